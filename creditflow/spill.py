"""Results that are not lost when their file cannot be written (a full disk, a read-only directory, a quota).

A command that has computed something worth minutes or hours (a whole evaluation, an RRO comparison)
writes it with :func:`write_results`: when the write fails with an ``OSError``, the results go to a new
file in the temporary directory (often another file system) and the command stops with one line saying
where they are; when that fails too, the line says they could not be saved (the caller prints what it
can before, e.g. the metrics). Disk-full errors elsewhere are recognised by :func:`disk_full_line`.
"""

from __future__ import annotations

import errno
import os
import tempfile
from pathlib import Path
from typing import Any, Callable

from creditflow.errors import UserError

_FULL = {errno.ENOSPC, errno.EDQUOT, errno.EFBIG}
_FULL_TEXT = ("No space left on device", "StorageFull", "Disk quota exceeded", "file write failed")


def write_results(path: str | os.PathLike, write: Callable[[Path], Any], what: str, where: str = "") -> Path:
    """``write(path)``; on an ``OSError`` ``write(<temporary file>)`` and a one-line :class:`UserError` naming
    that file (``what``: the results in words, e.g. "trajectories"; ``where``: the option that named
    ``path``, e.g. "--out"). Returns the path written."""
    path = Path(path)
    try:
        write(path)
        return path
    except OSError as exc:
        reason = exc.strerror or str(exc)
    named = f"{where} {str(path)!r}" if where else str(path)
    fd, spare = tempfile.mkstemp(prefix=f"creditflow-{path.stem}-", suffix=path.suffix or ".out")
    os.close(fd)
    try:
        write(Path(spare))
    except OSError as exc:
        Path(spare).unlink(missing_ok=True)
        raise UserError(f"{named}: cannot write ({reason}); the {what} could not be saved elsewhere either "
                        f"({exc.strerror or exc})") from None
    raise UserError(f"{named}: cannot write ({reason}); the {what} are in {spare} instead")


def disk_full_line(exc: BaseException) -> str | None:
    """One line for an error that means the disk (or a quota) is full, else None: an ``OSError`` with
    ENOSPC / EDQUOT / EFBIG, or the error torch or safetensors raise when their write fails."""
    if isinstance(exc, OSError) and exc.errno in _FULL:
        target = f" writing {exc.filename}" if exc.filename else ""
        return f"no space left{target} ({exc.strerror or exc}); free some space and run the command again"
    text = str(exc)
    if (isinstance(exc, (OSError, RuntimeError)) or type(exc).__name__ == "SafetensorError") \
            and any(t in text for t in _FULL_TEXT):
        first = (text.strip().splitlines() or [type(exc).__name__])[0][:200]
        return f"a write failed, most likely on a full disk ({first}); free some space and run the command again"
    return None
