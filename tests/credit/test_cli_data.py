"""``creditflow credit`` keeps user data and gives one line for every bad input (issue 16, data path)."""

import json
import os
import re
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from tests.credit.credit_testlib import traj

from creditflow.cli import main
from creditflow.cli.credit import number as _number
from creditflow.jsonl import byte_offsets, decode_with_ends, iter_json_lines
from creditflow.rollout.trajectory import TrajectoryFormatError

ROOT = Path(__file__).resolve().parents[2]


def run(argv, capsys):
    with pytest.raises(SystemExit) as exc:
        main(argv)
    return exc.value.code, capsys.readouterr().err


def one_line_error(code, err, *parts):
    assert code == 2, err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert all(p in err for p in parts), err


def user_file(tmp_path):
    """Hand-written data with fields creditflow does not know, at both levels."""
    rows = []
    for k, won in enumerate([True, False]):
        d = traj(["A", "B" if won else "C", "S" if won else "D"], success=won, group="g", traj_id=f"g/{k}").to_dict()
        d["my_field"] = {"nested": [1, 2.5, "ü"], "k": k}
        d["steps"][0]["extra"] = "kept"
        d["steps"][1]["count"] = 7
        del d["steps"][0]["observation"], d["steps"][1]["response"]  # optional fields left out
        rows.append(d)
    path = tmp_path / "user.jsonl"
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    return path, rows


@pytest.mark.parametrize("estimator", ["grpo", "rloo", "gigpo", "rewardflow"])
def test_credit_round_trips_unknown_fields(estimator, tmp_path, capsys):
    src, rows = user_file(tmp_path)
    out = tmp_path / "out.jsonl"
    knobs = [] if estimator == "rewardflow" else ["reward_source=success"]
    code, err = run(["credit", "-e", estimator, "--in", str(src), "--out", str(out), *knobs], capsys)
    assert code == 0, err
    added = {"step_reward", "advantage"} | ({"process_reward"} if estimator in ("gigpo", "rewardflow") else set())
    for want, line in zip(rows, out.read_text(encoding="utf-8").splitlines()):
        got = json.loads(line)
        assert list(got) == list(want) and {k: got[k] for k in want if k != "steps"} == \
            {k: want[k] for k in want if k != "steps"}
        for w, g in zip(want["steps"], got["steps"]):
            assert list(g)[:len(w)] == list(w) and set(g) - set(w) == added  # only the documented fields
            assert {k: g[k] for k in w} == w
    assert '"ü"' in out.read_text(encoding="utf-8")


def test_credit_in_place_keeps_the_data(tmp_path, capsys):
    src, rows = user_file(tmp_path)
    code, err = run(["credit", "-e", "rewardflow", "--in", str(src), "--out", str(src)], capsys)
    assert code == 0, err
    got = [json.loads(line) for line in src.read_text().splitlines()]
    assert [g["my_field"] for g in got] == [r["my_field"] for r in rows] and got[0]["steps"][0]["extra"] == "kept"
    assert "observation" not in got[0]["steps"][0] and "response" not in got[0]["steps"][1]
    assert sorted(os.listdir(tmp_path)) == ["user.jsonl"]


@pytest.mark.parametrize("value", ["NaN", "Infinity", "-Infinity"])
def test_non_finite_reward_names_the_line(value, tmp_path, capsys):
    good = json.dumps(traj(["A", "B"]).to_dict())
    bad = good.replace('"reward": 0.0', f'"reward": {value}')
    src = tmp_path / "nan.jsonl"
    src.write_text(good + "\n" + bad + "\n")
    out = tmp_path / "o.jsonl"
    code, err = run(["credit", "-e", "grpo", "--in", str(src), "--out", str(out)], capsys)
    one_line_error(code, err, f"{src}:2: steps[0]: field 'reward' must be a finite number")
    assert not out.exists()


def test_default_reward_source_follows_the_outcome(tmp_path, capsys):
    won = traj(["A", "B", "C", "G"], rewards=[-0.1, -0.1, -0.1], success=True, traj_id="won")
    lost = traj(["A", "D"], rewards=[0.0], traj_id="lost")
    src = tmp_path / "hand.jsonl"
    src.write_text(json.dumps(won.to_dict()) + "\n" + json.dumps(lost.to_dict()) + "\n")
    out = tmp_path / "o.jsonl"
    code, err = run(["credit", "-e", "grpo", "--in", str(src), "--out", str(out)], capsys)
    one_line_error(code, err, "reward_source=return", "reward_source=success")
    assert not out.exists()
    code, err = run(["credit", "-e", "grpo", "--in", str(src), "--out", str(out), "reward_source=success"], capsys)
    assert code == 0, err
    first = [json.loads(line)["steps"][0]["advantage"] for line in out.read_text().splitlines()]
    assert first[0] > 0 > first[1]


def test_empty_input_is_an_error_for_credit_and_graph(tmp_path, capsys):
    src = tmp_path / "empty.jsonl"
    src.write_text("\n")
    code, err = run(["credit", "-e", "grpo", "--in", str(src), "--out", str(tmp_path / "o.jsonl")], capsys)
    one_line_error(code, err, "no trajectories")
    code, err = run(["graph", "--in", str(src), "--out", str(tmp_path / "g.png")], capsys)
    one_line_error(code, err, "no trajectories")
    assert sorted(os.listdir(tmp_path)) == ["empty.jsonl"]


@pytest.mark.parametrize("command", ["credit", "graph"])
@pytest.mark.parametrize("payload, column", [
    (b"\x89PNG\r\n\x1a\n\x00\x01binary", 1),
    ('{"task_id": "caf\xe9", "steps": []}\n'.encode("latin-1"), 17),
])
def test_binary_or_latin1_input_names_file_and_line(command, payload, column, tmp_path, capsys):
    good = (json.dumps(traj(["A", "B"]).to_dict()) + "\n").encode()
    src = tmp_path / "bad.jsonl"
    src.write_bytes(good + payload)
    extra = ["-e", "grpo"] if command == "credit" else []
    out = tmp_path / ("o.jsonl" if command == "credit" else "g.png")
    code, err = run([command, *extra, "--in", str(src), "--out", str(out)], capsys)
    one_line_error(code, err, f"{src}:2: not UTF-8 text", f"column {column}")


@pytest.mark.parametrize("command", ["credit", "graph"])
def test_input_directory_says_so(command, tmp_path, capsys):
    extra = ["-e", "grpo"] if command == "credit" else []
    code, err = run([command, *extra, "--in", str(tmp_path), "--out", str(tmp_path / "o.png")], capsys)
    one_line_error(code, err, "is a directory")


@pytest.mark.parametrize("command", ["credit", "graph"])
def test_unusable_output_is_one_line(command, tmp_path, capsys):
    src = tmp_path / "in.jsonl"
    src.write_text(json.dumps(traj(["A", "B"], success=True).to_dict()) + "\n")
    extra = ["-e", "rewardflow"] if command == "credit" else []
    folder = tmp_path / "out.png"
    folder.mkdir()
    code, err = run([command, *extra, "--in", str(src), "--out", str(folder)], capsys)
    one_line_error(code, err, "--out", "is a directory")
    code, err = run([command, *extra, "--in", str(src), "--out", str(src / "x.png")], capsys)
    one_line_error(code, err, "--out", "not a directory")


def test_summary_prints_counts_as_integers(tmp_path, capsys):
    src = tmp_path / "many.jsonl"
    lines = [json.dumps(traj(["A", "B"], group=f"g{k}", success=k % 2 == 0).to_dict()) for k in range(10_050)]
    src.write_text("\n".join(lines) + "\n")
    code, err = run(["credit", "-e", "grpo", "--in", str(src), "--out", str(tmp_path / "o.jsonl"),
                     "reward_source=success"], capsys)
    assert code == 0, err
    assert "groups=10050" in err and "scored 10050 trajectories, 10050 steps" in err and "e+" not in err
    assert _number(25_000) == "25000" and _number(0.123456) == "0.1235" and _number(25_000.4) == "25000"


def test_jsonl_reader_drops_a_byte_order_mark(tmp_path):
    src = tmp_path / "bom.jsonl"
    src.write_bytes(b"\xef\xbb\xbf" + json.dumps({"a": 1}).encode() + b"\n")
    assert list(iter_json_lines(src, TrajectoryFormatError)) == [(f"{src}:1", {"a": 1})]


def test_sigterm_during_a_write_leaves_no_temporary_file(tmp_path):
    target = tmp_path / "scored.jsonl"
    script = textwrap.dedent(f"""
        import os, signal
        from creditflow.atomic import atomic_open
        with atomic_open({str(target)!r}) as fh:
            fh.write("half a file")
            os.kill(os.getpid(), signal.SIGTERM)
            fh.write("never")
    """)
    proc = subprocess.run([sys.executable, "-c", script], cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 128 + signal.SIGTERM, proc.stderr
    assert os.listdir(tmp_path) == []


def test_sigterm_during_the_credit_command(tmp_path):
    """A real ``creditflow credit`` killed with SIGTERM while it writes: no output, no hidden file."""
    src = tmp_path / "in.jsonl"
    row = json.dumps(traj(["A", "B", "C"], success=True).to_dict())
    src.write_text("\n".join([row] * 50) + "\n")
    out = tmp_path / "out" / "scored.jsonl"
    script = textwrap.dedent(f"""
        import os, signal, creditflow.rollout.trajectory as tr
        from creditflow.cli import main
        real = tr.atomic_open
        def killed_mid_write(path, mode="w"):
            with real(path, mode) as fh:
                fh.write(b"partial" if "b" in mode else "partial")
                os.kill(os.getpid(), signal.SIGTERM)
                yield fh
        import contextlib
        tr.atomic_open = contextlib.contextmanager(killed_mid_write)
        main(["credit", "-e", "rewardflow", "--in", {str(src)!r}, "--out", {str(out)!r}])
    """)
    proc = subprocess.run([sys.executable, "-c", script], cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 128 + signal.SIGTERM, proc.stderr[-2000:]
    assert os.listdir(out.parent) == []


def test_credit_changes_no_byte_but_the_added_fields(tmp_path, capsys):
    rows = [traj(["A", "B", "S"], success=True, traj_id="w").to_dict(), traj(["A", "C"], traj_id="l").to_dict()]
    rows[0]["note"] = "écrit à la main"
    rows[0]["steps"][0]["observation"] = "box on target: √, 😀 ok"  # 3- and 4-byte characters before a splice
    text = json.dumps(rows[0], ensure_ascii=False, indent=None, separators=(",", ":")) + "\r\n"  # compact, CRLF
    text += '  { "task_id" : "g", "traj_id": "l", "steps" : [ {"state": "A", "action": "a0", "reward": 1e0} ,\t' \
            '{"state":"C","action":"a1"} ] , "x": [ ] }\n'
    src = tmp_path / "odd.jsonl"
    src.write_bytes(text.encode())
    out = tmp_path / "o.jsonl"
    code, err = run(["credit", "-e", "rewardflow", "--in", str(src), "--out", str(out)], capsys)
    assert code == 0, err
    got = out.read_text(encoding="utf-8").splitlines()
    added = re.compile(r', "process_reward": [-0-9.e]+, "step_reward": [-0-9.e]+, "advantage": [-0-9.e]+')
    assert [added.sub("", line) for line in got] == text.splitlines()
    assert all(len(added.findall(line)) == 2 for line in got)
    assert out.read_bytes().count(b"\r\n") == 1  # the CRLF line keeps its ending


def test_credit_on_scored_data_replaces_the_fields(tmp_path, capsys):
    src, _ = user_file(tmp_path)
    once, twice = tmp_path / "once.jsonl", tmp_path / "twice.jsonl"
    assert run(["credit", "-e", "rewardflow", "--in", str(src), "--out", str(once)], capsys)[0] == 0
    assert run(["credit", "-e", "gigpo", "--in", str(once), "--out", str(twice), "reward_source=success"],
               capsys)[0] == 0
    direct = tmp_path / "direct.jsonl"
    assert run(["credit", "-e", "gigpo", "--in", str(src), "--out", str(direct), "reward_source=success"],
               capsys)[0] == 0
    for line, other in zip(twice.read_text().splitlines(), direct.read_text().splitlines()):
        assert json.loads(line) == json.loads(other)
        assert line.count('"advantage"') == len(json.loads(line)["steps"])  # replaced, never duplicated


@pytest.mark.parametrize("text", [
    '{"a": 1, "steps": [{"x": 1}, {"y": [1, {}]}, 3], "b": {"c": 2}}', '{"steps": []}', "[1, 2]",
    '{"steps": 5}', ' { "steps" : [ { } ] } ', '{"a": NaN, "steps": [{"s": "}"}]}', '{"steps": [], "steps": [{}]}',
])
def test_decode_with_ends_agrees_with_json_loads(text):
    value, ends = decode_with_ends(text, "steps")
    assert value == json.loads(text) or text.startswith('{"a": NaN')
    steps = value.get("steps") if isinstance(value, dict) else None
    if isinstance(steps, list):
        assert len(ends) == len(steps)
        assert all(text[e:].lstrip().startswith("}") and not text[e - 1].isspace()
                   for e, s in zip(ends, steps) if isinstance(s, dict))
    else:
        assert ends is None


def test_byte_offsets_count_multibyte_characters():
    text = '{"steps": [{"o": "é√😀"}, {"o": "x"}]}'
    _, ends = decode_with_ends(text, "steps")
    raw = text.encode("utf-8")
    assert [raw[i:i + 1] for i in byte_offsets(text, raw, ends)] == [b"}", b"}"]
    assert [raw[i:i + 1] for i in byte_offsets(text, raw, ends[::-1])] == [b"}", b"}"]  # any order
    assert byte_offsets("abc", b"abc", [1, -1]) == [1, -1]


@pytest.mark.parametrize("text", ['{"a": 1,}', '{"steps": [1,]}', '{"a" 1}', '{"a": 1} x', '{"steps": [{"a": }]}'])
def test_decode_with_ends_raises_json_errors(text):
    with pytest.raises(json.JSONDecodeError):
        decode_with_ends(text, "steps")
