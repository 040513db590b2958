"""Line-numbered JSONL reading shared by every reader of user files.

Every problem is one ``error`` naming the file, and the line where there is one: a missing file, a
directory, an unreadable file, a line that is not UTF-8 (a binary or Latin-1 file), invalid JSON.

:func:`iter_json_texts` also keeps every byte of the file around the values (line endings as they are,
CRLF included, a byte-order mark, blank lines) and, for one array key of the top-level object (a
trajectory's ``"steps"``), where a new member of each object element goes and, for elements that hold
some given keys, where each member's key and value are. A writer can then add or replace members of
those objects and leave every other byte of the file as it was (``creditflow credit``).

:class:`AppendLog` is the one append-only JSONL log of creditflow's own outputs (a run's ``metrics.jsonl``, an
RRO collection's ``preferences.jsonl``, ``tasks.jsonl`` and ``trajectories.jsonl``): rows appended whole and
flushed, a last line torn by a crash left out when read, and the file rewritten atomically without it.
"""

from __future__ import annotations

import bisect
import json
import os
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Callable, Iterator, NamedTuple

from creditflow.atomic import write_atomic

_DECODER = json.JSONDecoder()
_SCAN = _DECODER.scan_once  # json's C scanner: (value, end) of the JSON value at an index
_SCANSTRING = json.decoder.scanstring
_WS = json.decoder.WHITESPACE.match
_NON_ASCII = re.compile(r"[^\x00-\x7f]")
_BOM = b"\xef\xbb\xbf"


class Member(NamedTuple):
    """One member of a JSON object as byte offsets into the line: ``"key": value`` spans
    ``start:value_end``, the value ``value_start:value_end``."""

    key: str
    start: int
    value_start: int
    value_end: int


@dataclass
class JsonLine:
    r"""One JSONL line as read.

    The file is the concatenation of ``lead + raw + end`` over its lines. ``raw`` is the JSON text of the
    line; ``lead`` the bytes before it since the previous line (blank lines, a byte-order mark); ``end`` its
    line ending as read (``b"\n"``, ``b"\r\n"``, ``b""`` at the end of a file without one) and, on the
    last line, the blank lines that end the file.

    Where the value is an object whose ``array_key`` holds a list, ``ends[i]`` is the byte index in ``raw``
    just after the last member of element i (where a new member goes; -1 for an element that is no object),
    else ``ends`` is ``None``. ``members[i]`` lists the members of element i where it holds one of the keys
    asked for (``spans_for``).
    """

    where: str
    value: Any
    raw: bytes
    ends: list[int] | None
    lead: bytes = b""
    end: bytes = b"\n"
    members: dict[int, list[Member]] = field(default_factory=dict)


def iter_json_lines(path: str | os.PathLike, error: type[Exception],
                    prefix: str = "") -> Iterator[tuple[str, object]]:
    """Yield ``("file:line", value)`` per non-blank line; problems raise ``error(prefix + "file[:line]: ...")``."""
    for where, text in _texts(Path(path), error, prefix):
        try:
            value = json.loads(text)
        except (ValueError, RecursionError) as exc:
            raise error(f"{prefix}{where}: {_unreadable(exc, text)}") from None
        yield where, value


def iter_json_texts(path: str | os.PathLike, error: type[Exception], array_key: str, prefix: str = "",
                    spans_for: frozenset[str] = frozenset()) -> Iterator[JsonLine]:
    """Like :func:`iter_json_lines`, yielding :class:`JsonLine` records that hold every byte of the file
    (see the module docstring): ``b"".join(l.lead + l.raw + l.end for l in lines)`` is the file."""
    pending: JsonLine | None = None
    blank = b""
    with _open_binary(Path(path), error, prefix) as fh:
        for lineno, raw in enumerate(fh, start=1):
            if not raw.removeprefix(_BOM).strip():
                blank += raw
                continue
            line = json_line(raw, array_key, f"{path}:{lineno}", error, prefix, spans_for)
            line.lead = blank + line.lead
            blank = b""
            if pending is not None:
                yield pending
            pending = line
    if pending is not None:
        pending.end += blank
        yield pending


_DIGITS = re.compile(r"value has (\d+) digits")


def _unreadable(exc: BaseException, text: str = "") -> str:
    """Why a line's JSON cannot be read, in words: invalid JSON (where), an integer too long for Python to read
    (valid JSON), or nesting deeper than the reader goes (valid JSON too)."""
    if isinstance(exc, json.JSONDecodeError):
        return f"invalid JSON ({exc.msg}, column {exc.colno})"
    if isinstance(exc, RecursionError):
        return "JSON nested too deeply to read (arrays or objects inside one another beyond Python's recursion limit)"
    digits = _DIGITS.search(str(exc))
    if digits:
        field = re.search(r'"((?:[^"\\]|\\.)*)"\s*:\s*-?\d{%d}' % (sys.get_int_max_str_digits() + 1), text)
        named = f"field {field.group(1)!r}: " if field else ""
        return (f"{named}a number of {digits.group(1)} digits, more than can be read ({sys.get_int_max_str_digits()}); "
                f"a number must fit a float")
    return f"cannot read the JSON ({str(exc).splitlines()[0] if str(exc) else type(exc).__name__})"


def json_line(raw: bytes, array_key: str, where: str, error: type[Exception], prefix: str = "",
              spans_for: frozenset[str] = frozenset()) -> JsonLine:
    """One :class:`JsonLine` from a line's bytes (its line ending and a leading byte-order mark are kept
    apart, in ``end`` and ``lead``)."""
    content = raw.rstrip(b"\r\n")
    end = raw[len(content):]
    lead = _BOM if content.startswith(_BOM) else b""
    content = content[len(lead):]
    text = _utf8(content, False, f"{prefix}{where}", error)
    try:
        value, ends, members = _decode_line(text, array_key, spans_for)
    except (ValueError, RecursionError) as exc:
        raise error(f"{prefix}{where}: {_unreadable(exc, text)}") from None
    if ends is not None and len(content) != len(text):  # str indices -> UTF-8 byte offsets, in one pass
        flat = byte_offsets(text, content, ends + [i for ms in members.values() for m in ms for i in m[1:]])
        ends, at = flat[:len(ends)], len(ends)
        for ms in members.values():
            for j, m in enumerate(ms):
                ms[j] = Member(m.key, *flat[at:at + 3])
                at += 3
    return JsonLine(where, value, content, ends, lead, end, members)


def byte_offsets(text: str, raw: bytes, indices: list[int]) -> list[int]:
    """Indices into ``text`` (in any order; -1 stays -1) as offsets into its UTF-8 bytes ``raw``: each
    non-ASCII character before an index adds its extra bytes."""
    if len(raw) == len(text):
        return indices
    shift, positions, extra = 0, [], [0]
    for match in _NON_ASCII.finditer(text):
        shift += len(match.group().encode("utf-8")) - 1
        positions.append(match.start())
        extra.append(shift)
    return [i + extra[bisect.bisect_left(positions, i)] if i >= 0 else i for i in indices]


def _raw_lines(path: Path, error: type[Exception], prefix: str) -> Iterator[tuple[int, str, bytes]]:
    with _open_binary(path, error, prefix) as fh:
        for lineno, raw in enumerate(fh, start=1):
            if raw.strip():
                yield lineno, f"{path}:{lineno}", raw


def _texts(path: Path, error: type[Exception], prefix: str) -> Iterator[tuple[str, str]]:
    for lineno, where, raw in _raw_lines(path, error, prefix):
        yield where, _utf8(raw, lineno == 1, f"{prefix}{where}", error).rstrip("\r\n")


def decode_with_ends(text: str, array_key: str) -> tuple[Any, list[int] | None]:
    """``json.loads(text)``, and for each object element of ``value[array_key]`` the index just after its
    last member (see :class:`JsonLine`); ``None`` where the value holds no such list."""
    value, ends, _ = _decode_line(text, array_key, frozenset())
    return value, ends


def _decode_line(text: str, array_key: str, spans_for: frozenset[str]) -> tuple[Any, list[int] | None, dict]:
    """A small walk over the top-level object with json's own C scanner for every value; where the walk
    meets anything unusual, ``json.loads`` decides (and raises its usual error for invalid JSON)."""
    try:
        return _walk_object(text, array_key, spans_for)
    except (ValueError, IndexError, StopIteration, RecursionError):
        return json.loads(text), None, {}


def _walk_object(text: str, array_key: str, spans_for: frozenset[str]) -> tuple[dict, list[int] | None, dict]:
    i = _WS(text, 0).end()
    if text[i] != "{":
        raise ValueError("not an object")
    i = _WS(text, i + 1).end()
    obj: dict = {}
    ends, members = None, {}
    while text[i] != "}":
        if text[i] != '"':
            raise ValueError("expected a key")
        key, i = _SCANSTRING(text, i + 1)
        i = _WS(text, i).end()
        if text[i] != ":":
            raise ValueError("expected ':'")
        i = _WS(text, i + 1).end()
        if key == array_key and text[i] == "[":
            obj[key], ends, members, i = _walk_array(text, i, spans_for)
        else:
            obj[key], i = _SCAN(text, i)
            if key == array_key:
                ends, members = None, {}
        i = _WS(text, i).end()
        if text[i] == ",":
            i = _WS(text, i + 1).end()
            if text[i] == "}":
                raise ValueError("trailing comma")
        elif text[i] != "}":
            raise ValueError("expected ',' or '}'")
    if _WS(text, i + 1).end() != len(text):
        raise ValueError("extra data")
    return obj, ends, members


_JSON_WS = frozenset(" \t\n\r")


def _walk_array(text: str, i: int, spans_for: frozenset[str]) -> tuple[list, list[int], dict, int]:
    """The array starting at ``text[i] == "["``: its items, where a new member of each object item goes,
    the members of the items that hold a key of ``spans_for``, and the end."""
    items: list = []
    ends: list[int] = []
    members: dict[int, list[Member]] = {}
    i = _WS(text, i + 1).end()
    while text[i] != "]":
        value, end = _SCAN(text, i)
        items.append(value)
        if isinstance(value, dict):
            last = end - 1  # the closing brace; a new member goes after the last one, before any whitespace
            while text[last - 1] in _JSON_WS:
                last -= 1
            ends.append(last)
            if spans_for and not spans_for.isdisjoint(value):
                members[len(items) - 1] = _members(text, i)
        else:
            ends.append(-1)
        i = _WS(text, end).end()
        if text[i] == ",":
            i = _WS(text, i + 1).end()
            if text[i] == "]":
                raise ValueError("trailing comma")
        elif text[i] != "]":
            raise ValueError("expected ',' or ']'")
    return items, ends, members, i + 1


def _members(text: str, i: int) -> list[Member]:
    """The members of the object at ``text[i] == "{"`` (already scanned, so valid JSON)."""
    out = []
    i = _WS(text, i + 1).end()
    while text[i] != "}":
        start = i
        key, i = _SCANSTRING(text, i + 1)
        i = _WS(text, _WS(text, i).end() + 1).end()  # past ':'
        _, end = _SCAN(text, i)
        out.append(Member(key, start, i, end))
        i = _WS(text, end).end()
        if text[i] == ",":
            i = _WS(text, i + 1).end()
    return out


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
    """The line as text (a UTF-8 byte-order mark on the first line is dropped); a NUL byte, which no text
    file holds, marks binary data as an invalid byte does."""
    try:
        text = raw.decode("utf-8-sig" if first else "utf-8")
    except UnicodeDecodeError as exc:
        bad = exc.start
    else:
        bad = raw.find(b"\x00")
        if bad < 0:
            return text
    raise error(f"{where}: not UTF-8 text (byte 0x{raw[bad]:02x} at column {bad + 1}); JSONL files are UTF-8")


# -- the append-only log ------------------------------------------------------------------------------


class AppendLog:
    """An append-only JSONL file, one row per line, that a crash may leave with a torn last line.

    Rows are written whole and flushed (:meth:`append`, or :meth:`open` for a writer kept open), so a crash
    can tear the last line only; :meth:`read` leaves a torn last line out and says so, and :meth:`keep` /
    :meth:`rewrite` replace the file atomically (without it) before the next append would glue a row onto it.

    ``dumps``: the ``json.dumps`` keywords of a line. Reading is strict with ``error`` (a run's metrics): every
    line is a JSON object, a bad line before the last is ``error("file:line: not a <what> (...)")``, and a last
    line that lacks only its newline is kept. Without ``error`` it is lenient (an RRO collection, whose
    unfinished task is dropped on reopening anyway): a line that does not parse, and a last line without its
    newline, are left out.
    """

    def __init__(self, path: str | os.PathLike, *, error: type[Exception] | None = None, what: str = "row",
                 **dumps: Any):
        self.path = Path(path)
        self.error = error
        self.what = what
        self.dumps = dumps

    def line(self, row: Any) -> str:
        return json.dumps(row, **self.dumps) + "\n"

    def read(self) -> tuple[list, bool]:
        """``(rows, torn)``: the rows (none when the file does not exist), and whether something was left out
        (a torn last line) or the last row lacks its newline, which the next append would glue onto."""
        if not self.path.exists():
            return [], False
        try:
            data = self.path.read_bytes()
        except OSError as exc:
            if self.error is None:
                raise
            raise self.error(f"{self.path}: cannot read ({exc.strerror or exc})") from None
        *lines, tail = data.split(b"\n")
        torn = tail != b""  # no newline at the end: the last write was cut (or never finished)
        if self.error is None:
            rows = []
            for raw in lines:
                try:
                    rows.append(json.loads(raw))
                except ValueError:
                    torn = True
            return rows, torn
        return self._read_strict([*lines, tail], torn)

    def _read_strict(self, lines: list[bytes], torn: bool) -> tuple[list, bool]:
        numbered = [(n, raw) for n, raw in enumerate(lines, start=1) if raw.strip(b" \t\r")]
        rows = []
        for k, (n, raw) in enumerate(numbered):
            try:
                row = json.loads(raw)
                if not isinstance(row, dict):
                    raise ValueError(f"a JSON {type(row).__name__}, not an object")
            except ValueError as exc:
                if k == len(numbered) - 1:  # the last line: a row torn by a crash (or zeros after a power loss)
                    return rows, True
                raise self.error(f"{self.path}:{n}: not a {self.what} ({str(exc).splitlines()[0]})") from None
            rows.append(row)
        return rows, torn

    def rewrite(self, rows: list) -> None:
        """Replace the file with ``rows``, atomically."""
        write_atomic(self.path, "".join(self.line(r) for r in rows))

    def keep(self, wanted: Callable[[Any], bool]) -> list:
        """Drop the rows not ``wanted`` and a torn last line; the file is rewritten only when that changes it."""
        rows, torn = self.read()
        kept = [r for r in rows if wanted(r)]
        if torn or len(kept) != len(rows):
            self.rewrite(kept)
        return kept

    def append(self, rows: list) -> None:
        """Append ``rows`` and put them on disk (fsync) before returning; nothing to append opens nothing."""
        if not rows:
            return
        with self.open() as writer:
            writer.write_text("".join(self.line(r) for r in rows))
            writer.sync()

    def open(self) -> LogWriter:
        return LogWriter(self)


class LogWriter:
    """The log opened for appending: each write is flushed at once (a crash tears at most the last line),
    :meth:`sync` puts what was written on disk."""

    def __init__(self, log: AppendLog):
        self.log = log
        self._fh = log.path.open("a", encoding="utf-8")

    def write(self, row: Any) -> None:
        self.write_text(self.log.line(row))

    def write_text(self, text: str) -> None:
        self._fh.write(text)
        self._fh.flush()

    def sync(self) -> None:
        self._fh.flush()
        os.fsync(self._fh.fileno())

    def close(self) -> None:
        self._fh.close()

    def __enter__(self) -> LogWriter:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()
