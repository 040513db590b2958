"""``jsonl.AppendLog``: the one append-only JSONL log (metrics, RRO collections), its two reading modes and
what a crash leaves."""

import pytest

from creditflow.errors import UserError
from creditflow.jsonl import AppendLog


def test_append_writes_whole_lines_and_nothing_for_no_rows(tmp_path):
    log = AppendLog(tmp_path / "a.jsonl", ensure_ascii=False)
    log.append([])
    assert not log.path.exists()
    log.append([{"b": "é", "a": 1}, {"c": None}])
    assert log.path.read_bytes() == '{"b": "é", "a": 1}\n{"c": null}\n'.encode()
    assert log.read() == ([{"b": "é", "a": 1}, {"c": None}], False)


def test_strict_reading_keeps_an_unterminated_row_and_leaves_a_torn_one_out(tmp_path):
    log = AppendLog(tmp_path / "m.jsonl", error=UserError, what="metrics row", sort_keys=True)
    log.path.write_text('{"step": 0}\n\n{"step": 1}')
    assert log.read() == ([{"step": 0}, {"step": 1}], True)  # kept, but the next append would glue onto it
    log.path.write_text('{"step": 0}\n{"st')
    assert log.read() == ([{"step": 0}], True)
    log.path.write_text('{"step": 0}\n[1]\n{"step": 2}\n')
    with pytest.raises(UserError, match=r"m.jsonl:2: not a metrics row \(a JSON list, not an object\)"):
        log.read()


def test_lenient_reading_leaves_out_bad_lines_and_an_unterminated_last_line(tmp_path):
    log = AppendLog(tmp_path / "p.jsonl")
    log.path.write_text('{"a": 1}\nnot json\n[2]\n{"b": 3}')
    assert log.read() == ([{"a": 1}, [2]], True)
    assert AppendLog(tmp_path / "missing.jsonl").read() == ([], False)


def test_keep_rewrites_only_when_something_changes(tmp_path):
    log = AppendLog(tmp_path / "k.jsonl", sort_keys=True)
    log.append([{"s": 0, "b": 1}, {"s": 1}])
    before = log.path.stat().st_ino
    assert log.keep(lambda r: True) == [{"s": 0, "b": 1}, {"s": 1}]
    assert log.path.stat().st_ino == before  # not rewritten
    with open(log.path, "a") as fh:
        fh.write('{"s": 2')  # torn
    assert log.keep(lambda r: r["s"] < 1) == [{"b": 1, "s": 0}]
    assert log.path.read_text() == '{"b": 1, "s": 0}\n'


def test_writer_flushes_each_write(tmp_path):
    log = AppendLog(tmp_path / "w.jsonl", sort_keys=True)
    with log.open() as writer:
        writer.write({"z": 1, "a": 2})
        assert log.path.read_text() == '{"a": 2, "z": 1}\n'
        writer.write_text('{"a"')
        writer.sync()
    assert log.read() == ([{"a": 2, "z": 1}], True)
