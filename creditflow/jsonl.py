"""Line-numbered JSONL reading shared by every reader of user files.

Every problem is one ``error`` naming the file, and the line where there is one: a missing file, a
directory, an unreadable file, a line that is not UTF-8 (a binary or Latin-1 file), invalid JSON.

:func:`iter_json_texts` also keeps each line's bytes and, for one array key of the top-level object (a
trajectory's ``"steps"``), the byte where each object element closes, so a writer can add fields to those
objects and leave every other byte of the line as it was (``creditflow credit``).
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Iterator

_DECODER = json.JSONDecoder()
_SCAN = _DECODER.scan_once  # json's C scanner: (value, end) of the JSON value at an index
_SCANSTRING = json.decoder.scanstring
_WS = json.decoder.WHITESPACE.match
_NON_ASCII = re.compile(r"[^\x00-\x7f]")
_BOM = b"\xef\xbb\xbf"


@dataclass
class JsonLine:
    """One JSONL line: its ``file:line``, value, bytes (without the newline or a byte-order mark) and, where
    the value is an object whose ``array_key`` holds a list, the index in ``raw`` of the closing brace of
    each object element (-1 for an element that is no object; ``None`` when there is no such list)."""

    where: str
    value: Any
    raw: bytes
    closes: list[int] | None


def iter_json_lines(path: str | os.PathLike, error: type[Exception],
                    prefix: str = "") -> Iterator[tuple[str, object]]:
    """Yield ``("file:line", value)`` per non-blank line; problems raise ``error(prefix + "file[:line]: ...")``."""
    for where, text in _texts(Path(path), error, prefix):
        try:
            yield where, json.loads(text)
        except json.JSONDecodeError as exc:
            raise error(f"{prefix}{where}: invalid JSON ({exc.msg}, column {exc.colno})") from None


def iter_json_texts(path: str | os.PathLike, error: type[Exception], array_key: str,
                    prefix: str = "") -> Iterator[JsonLine]:
    """Like :func:`iter_json_lines`, yielding :class:`JsonLine` records (see the module docstring)."""
    for _, where, raw in _raw_lines(Path(path), error, prefix):
        yield json_line(raw, array_key, where, error, prefix)


def json_line(raw: bytes, array_key: str, where: str, error: type[Exception], prefix: str = "") -> JsonLine:
    """One :class:`JsonLine` from a line's bytes (newline and a byte-order mark are dropped)."""
    raw = raw.rstrip(b"\r\n").removeprefix(_BOM)
    text = _utf8(raw, False, f"{prefix}{where}", error)
    try:
        value, closes = decode_with_closes(text, array_key)
    except json.JSONDecodeError as exc:
        raise error(f"{prefix}{where}: invalid JSON ({exc.msg}, column {exc.colno})") from None
    return JsonLine(where, value, raw, None if closes is None else byte_offsets(text, raw, closes))


def byte_offsets(text: str, raw: bytes, indices: list[int]) -> list[int]:
    """Indices into ``text`` as offsets into its UTF-8 bytes ``raw`` (each non-ASCII character before an
    index adds its extra bytes)."""
    if len(raw) == len(text):
        return indices
    shift, positions, extra = 0, [], []
    for match in _NON_ASCII.finditer(text):
        shift += len(match.group().encode("utf-8")) - 1
        positions.append(match.start())
        extra.append(shift)
    out = []
    k = 0
    for i in indices:
        while k < len(positions) and positions[k] < i:
            k += 1
        out.append(i + (extra[k - 1] if k else 0) if i >= 0 else i)
    return out


def _raw_lines(path: Path, error: type[Exception], prefix: str) -> Iterator[tuple[int, str, bytes]]:
    with _open_binary(path, error, prefix) as fh:
        for lineno, raw in enumerate(fh, start=1):
            if raw.strip():
                yield lineno, f"{path}:{lineno}", raw


def _texts(path: Path, error: type[Exception], prefix: str) -> Iterator[tuple[str, str]]:
    for lineno, where, raw in _raw_lines(path, error, prefix):
        yield where, _utf8(raw, lineno == 1, f"{prefix}{where}", error).rstrip("\r\n")


def decode_with_closes(text: str, array_key: str) -> tuple[Any, list[int] | None]:
    """``json.loads(text)``, and the closing-brace index of each object element of ``value[array_key]``.

    A small walk over the top-level object with json's own C scanner for every value; where the walk
    meets anything unusual, ``json.loads`` decides (and raises its usual error for invalid JSON).
    """
    try:
        return _walk_object(text, array_key)
    except (ValueError, IndexError, StopIteration):
        return json.loads(text), None


def _walk_object(text: str, array_key: str) -> tuple[dict, list[int] | None]:
    i = _WS(text, 0).end()
    if text[i] != "{":
        raise ValueError("not an object")
    i = _WS(text, i + 1).end()
    obj: dict = {}
    closes = None
    while text[i] != "}":
        if text[i] != '"':
            raise ValueError("expected a key")
        key, i = _SCANSTRING(text, i + 1)
        i = _WS(text, i).end()
        if text[i] != ":":
            raise ValueError("expected ':'")
        i = _WS(text, i + 1).end()
        if key == array_key and text[i] == "[":
            obj[key], closes, i = _walk_array(text, i)
        else:
            obj[key], i = _SCAN(text, i)
            if key == array_key:
                closes = None
        i = _WS(text, i).end()
        if text[i] == ",":
            i = _WS(text, i + 1).end()
            if text[i] == "}":
                raise ValueError("trailing comma")
        elif text[i] != "}":
            raise ValueError("expected ',' or '}'")
    if _WS(text, i + 1).end() != len(text):
        raise ValueError("extra data")
    return obj, closes


def _walk_array(text: str, i: int) -> tuple[list, list[int], int]:
    """The array starting at ``text[i] == "["``: its items, each object item's closing index, the end."""
    items: list = []
    closes: list[int] = []
    i = _WS(text, i + 1).end()
    while text[i] != "]":
        value, end = _SCAN(text, i)
        items.append(value)
        closes.append(end - 1 if isinstance(value, dict) else -1)
        i = _WS(text, end).end()
        if text[i] == ",":
            i = _WS(text, i + 1).end()
            if text[i] == "]":
                raise ValueError("trailing comma")
        elif text[i] != "]":
            raise ValueError("expected ',' or ']'")
    return items, closes, i + 1


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
