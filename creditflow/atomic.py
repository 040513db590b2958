"""Atomic file writes: a temporary file in the target's directory, renamed over it when complete.

A crash, an exception or a SIGTERM mid-write leaves the old file (or none) in place, never half a file
and never the hidden temporary file: while a write is open in the main thread, SIGTERM (whose default
action would end the process on the spot) raises ``SystemExit(143)`` instead, so the clean-up runs. A
SIGTERM handler installed by the program itself is left alone.

A path that is a symbolic link writes the file it points to (the link stays), and a file written over
keeps its permission bits.
"""

from __future__ import annotations

import contextlib
import os
import signal
import tempfile
import threading
from pathlib import Path
from typing import IO, Iterator

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
            umask = os.umask(0)
            os.umask(umask)
            os.chmod(tmp, path.stat().st_mode & 0o7777 if path.exists() else 0o666 & ~umask)  # mkstemp: 0600
            os.replace(tmp, path)
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
