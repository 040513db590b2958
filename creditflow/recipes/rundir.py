"""Where a run lives: its launched processes (a :class:`~creditflow.trainer.distributed.World`) and its run
directory (``out_dir`` with ``config.yaml``), made so that a failed start leaves nothing behind."""

from __future__ import annotations

import contextlib
import os
import shutil
from pathlib import Path
from typing import Iterator

from creditflow.config import RunConfig, dump_config
from creditflow.errors import UserError
from creditflow.policy.load import resolve_device
from creditflow.spill import disk_full_line
from creditflow.trainer import distributed
from creditflow.trainer.distributed import World


def start_world(cfg: RunConfig) -> World:
    """Join the launched processes (``accelerate launch``, ``torchrun``; one process without a launcher),
    over gloo when the policy runs on CPU."""
    return distributed.start(cpu=resolve_device(cfg.policy.device) == "cpu")


@contextlib.contextmanager
def new_run_dir(cfg: RunConfig, world: World = World(), keep=None) -> Iterator[Path]:
    """Create ``out_dir`` and write ``config.yaml`` for a fresh run. A user error inside the block undoes
    that: the directory goes if this run created it (with the parent directories it created for it), else what
    this run added there goes and ``config.yaml`` is put back as it was, so the same command runs again; an
    interrupt keeps what was written (the tiny model, π_SFT) for the next attempt. ``keep()`` true at the
    error (a checkpoint was written: the run is resumable) keeps everything. Under N processes rank 0 does
    this; the others only get the path."""
    out = Path(cfg.out_dir)
    if not world.main:
        yield out
        return
    if out.exists() and not out.is_dir():
        raise UserError(f"out_dir {str(out)!r} is a file, not a directory")
    created = first_missing(out)  # out, or the first of its parents that does not exist yet
    config = out / "config.yaml"
    before = config.read_bytes() if config.is_file() else None
    try:
        entries = set(os.listdir(out)) if created is None else set()  # what a failed start must leave
        out.mkdir(parents=True, exist_ok=True)
        dump_config(cfg, config)
    except OSError as exc:
        if created is not None:
            shutil.rmtree(created, ignore_errors=True)
        raise UserError(f"out_dir {str(out)!r}: cannot write there ({exc.strerror or exc})") from None
    try:
        yield out
    except Exception as exc:  # a user error, or a full disk: nothing of this run is left
        if not isinstance(exc, UserError) and disk_full_line(exc) is None or keep is not None and keep():
            raise
        if created is not None:
            shutil.rmtree(created, ignore_errors=True)
        else:
            for name in set(os.listdir(out)) - entries:
                path = out / name
                shutil.rmtree(path, ignore_errors=True) if path.is_dir() and not path.is_symlink() else \
                    path.unlink(missing_ok=True)
            if before is None:
                config.unlink(missing_ok=True)
            else:
                config.write_bytes(before)
        raise


def first_missing(path: Path) -> Path | None:
    """The outermost directory that creating ``path`` (with its parents) would create; None when it exists."""
    missing = None
    for p in (path, *path.parents):
        if os.path.lexists(p):
            break
        missing = p
    return missing
