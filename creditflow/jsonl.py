"""Line-numbered JSONL reading shared by every reader of user files.

Every problem is one ``error`` naming the file, and the line where there is one: a missing file, a
directory, an unreadable file, a line that is not UTF-8 (a binary or Latin-1 file), invalid JSON.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import IO, Iterator


def iter_json_lines(path: str | os.PathLike, error: type[Exception],
                    prefix: str = "") -> Iterator[tuple[str, object]]:
    """Yield ``("file:line", value)`` per non-blank line; problems raise ``error(prefix + "file[:line]: ...")``."""
    path = Path(path)
    with _open_binary(path, error, prefix) as fh:
        for lineno, raw in enumerate(fh, start=1):
            if not raw.strip():
                continue
            where = f"{path}:{lineno}"
            text = _utf8(raw, lineno == 1, f"{prefix}{where}", error)
            try:
                yield where, json.loads(text)
            except json.JSONDecodeError as exc:
                raise error(f"{prefix}{where}: invalid JSON ({exc.msg}, column {exc.colno})") from None


def _open_binary(path: Path, error: type[Exception], prefix: str) -> IO[bytes]:
    """``path`` opened for reading bytes, or one ``error`` saying why not."""
    if path.is_dir():
        raise error(f"{prefix}{path}: is a directory, not a JSONL file")
    try:
        return path.open("rb")
    except FileNotFoundError:
        raise error(f"{prefix}{path}: no such file") from None
    except OSError as exc:
        raise error(f"{prefix}{path}: cannot read ({exc.strerror or exc})") from None


def _utf8(raw: bytes, first: bool, where: str, error: type[Exception]) -> str:
    """The line as text (a UTF-8 byte-order mark on the first line is dropped)."""
    try:
        return raw.decode("utf-8-sig" if first else "utf-8")
    except UnicodeDecodeError as exc:
        raise error(f"{where}: not UTF-8 text (byte 0x{raw[exc.start]:02x} at column {exc.start + 1}); "
                    "JSONL files are UTF-8") from None
