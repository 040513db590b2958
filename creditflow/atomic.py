"""Atomic writes of files and directories, and the crash points that test them.

A file: a temporary file in the target's directory, flushed to disk (fsync) and renamed over it when
complete. A directory (a model with its tokenizer, a checkpoint): a temporary directory next to it, every
file in it flushed, then renamed into place. A crash, a kill, an exception or a SIGTERM mid-write leaves the
old file or directory (or none) in place, never a part of one; a killed process may leave the hidden
temporary behind, which the next write of the same target removes. While a file write is open in the main
thread, SIGTERM (whose default action would end the process on the spot) raises ``SystemExit(143)``
instead, so the clean-up runs; a SIGTERM handler installed by the program itself is left alone.

Crash points (:func:`crash_point`) let tests kill the process with SIGKILL at a chosen point of a write,
e.g. ``CREDITFLOW_CRASH_AT=checkpoint.optimizer@2`` between the optimizer state and the loop state of the
second checkpoint the process writes (tests/test_crash_consistency.py).

A path that is a symbolic link writes the file it points to (the link stays), and a file written over
keeps its permission bits.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import tempfile
import threading
from pathlib import Path
from typing import IO, Callable, Iterator

SIGTERM_EXIT = 128 + signal.SIGTERM  # the shell's exit status of a process ended by SIGTERM


@contextlib.contextmanager
def atomic_open(path: str | os.PathLike, mode: str = "w") -> Iterator[IO]:
    """``with atomic_open(p, "w") as fh: ...`` (``"w"`` text UTF-8 or ``"wb"``); renamed over ``p`` on success."""
    path = Path(os.path.realpath(path) if os.path.islink(path) else path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with _sigterm_raises():
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        try:
            with os.fdopen(fd, mode, **({} if "b" in mode else {"encoding": "utf-8"})) as fh:
                yield fh
                fh.flush()
                os.fsync(fh.fileno())  # the bytes are on disk before the name points at them
            umask = os.umask(0)
            os.umask(umask)
            os.chmod(tmp, path.stat().st_mode & 0o7777 if path.exists() else 0o666 & ~umask)  # mkstemp: 0600
            os.replace(tmp, path)
            _fsync_dir(path.parent)
        except BaseException:
            if os.path.exists(tmp):
                os.unlink(tmp)
            raise


@contextlib.contextmanager
def _sigterm_raises() -> Iterator[None]:
    """Within the block, SIGTERM raises ``SystemExit(143)`` where it would otherwise kill the process."""
    if threading.current_thread() is not threading.main_thread() or signal.getsignal(signal.SIGTERM) != signal.SIG_DFL:
        yield
        return
    previous = signal.signal(signal.SIGTERM, _exit_on_sigterm)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _exit_on_sigterm(signum, frame) -> None:
    raise SystemExit(SIGTERM_EXIT)


def write_atomic(path: str | os.PathLike, data: str | bytes) -> None:
    """Write ``data`` (text as UTF-8, or bytes) to ``path`` atomically."""
    with atomic_open(path, "wb" if isinstance(data, bytes) else "w") as fh:
        fh.write(data)


@contextlib.contextmanager
def atomic_dir(target: str | os.PathLike) -> Iterator[Path]:
    """``with atomic_dir(d) as tmp: <write files into tmp>``: on success ``tmp`` becomes ``d`` (replacing an
    older ``d``), so ``d`` is complete or absent, never partial. On an exception ``tmp`` is removed.
    ``tmp`` is ``.<name>.tmp`` next to ``d``; one left by a killed process is cleared first."""
    target = Path(target)
    tmp = temporary_dir(target)
    try:
        yield tmp
        publish_dir(tmp, target)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def temporary_dir(target: str | os.PathLike) -> Path:
    """A fresh, empty ``.<name>.tmp`` next to ``target`` (one left by a killed process is removed)."""
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    return tmp


def publish_dir(tmp: str | os.PathLike, target: str | os.PathLike) -> None:
    """Flush every file under ``tmp`` to disk and rename ``tmp`` to ``target``. An existing ``target`` is
    renamed aside (``.<name>.old``) first and removed after, so a kill in between leaves no ``target``
    (never a mixed one). Ctrl-C and SIGTERM wait until both renames are done."""
    tmp, target = Path(tmp), Path(target)
    readable_files(tmp)
    sync_tree(tmp)
    old = target.with_name(f".{target.name}.old")
    shutil.rmtree(old, ignore_errors=True)
    with _signals_deferred():
        if target.exists():
            os.rename(target, old)
            crash_point("dir.swap")
        os.rename(tmp, target)
    _fsync_dir(target.parent)
    shutil.rmtree(old, ignore_errors=True)


def clear_temporaries(directory: str | os.PathLike) -> list[Path]:
    """Remove the temporaries that writes killed mid-way left in ``directory`` (``.<name>.tmp``,
    ``.<name>.old`` and :func:`atomic_open`'s ``.<name>.<random>.tmp``); returns what was removed."""
    removed = []
    for p in Path(directory).glob(".*"):
        if p.name.endswith((".tmp", ".old")):
            if p.is_dir() and not p.is_symlink():
                shutil.rmtree(p, ignore_errors=True)
            else:
                p.unlink(missing_ok=True)
            removed.append(p)
    return removed


def readable_files(root: str | os.PathLike) -> None:
    """Give the files under ``root`` that a writer made private (0600, as ``tempfile.mkstemp`` makes them: the
    safetensors file of transformers' ``save_pretrained``) the mode any new file gets (``0666 & ~umask``), as the
    other files of a model directory have."""
    umask = os.umask(0)
    os.umask(umask)
    for dirpath, _dirs, files in os.walk(root):
        for name in files:
            path = os.path.join(dirpath, name)
            if not os.path.islink(path) and os.stat(path).st_mode & 0o777 == 0o600:
                os.chmod(path, 0o666 & ~umask)


def sync_tree(root: str | os.PathLike) -> None:
    """fsync every file and directory under ``root`` (and ``root``)."""
    for dirpath, _dirs, files in os.walk(root):
        for name in files:
            fd = os.open(os.path.join(dirpath, name), os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        _fsync_dir(Path(dirpath))


def _fsync_dir(path: Path) -> None:
    """Make a rename or a new entry in ``path`` durable (a no-op where directories cannot be opened)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


@contextlib.contextmanager
def _signals_deferred() -> Iterator[None]:
    """Ctrl-C and SIGTERM received in the block take effect when it ends (main thread; elsewhere no-op)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    held: list[int] = []
    previous = {signum: signal.signal(signum, lambda received, _frame: held.append(received))
                for signum in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, signal.SIG_DFL if handler is None else handler)
        for signum in held:
            signal.raise_signal(signum)


# -- crash points (tests) -----------------------------------------------------------------------------

CRASH_AT = "CREDITFLOW_CRASH_AT"
_passed: dict[str, int] = {}


def crash_point(name: str, before: Callable[[], None] | None = None) -> None:
    """Kill this process with SIGKILL here when ``$CREDITFLOW_CRASH_AT`` is ``name`` (the first time this
    process passes the point) or ``name@n`` (the n-th time); ``before`` runs first (e.g. writes half a
    record). A test hook: without the variable it does nothing."""
    wanted = os.environ.get(CRASH_AT)
    if not wanted:
        return
    point, _, nth = wanted.partition("@")
    if point != name:
        return
    _passed[name] = _passed.get(name, 0) + 1
    if _passed[name] == int(nth or 1):
        if before is not None:
            before()
        os.kill(os.getpid(), signal.SIGKILL)
