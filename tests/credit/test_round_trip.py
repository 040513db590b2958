"""``creditflow credit`` owns three fields and nothing else (issue 63, class 2): a byte-exact round trip.

The corpus crosses many shapes of valid input (how a step object is written, already-scored steps with their
fields anywhere, odd numbers and strings, key orders) with file-level shapes (LF, CRLF, mixed endings, a
UTF-8 byte-order mark, blank and whitespace-only lines, no final newline). Each case is written as a template
with markers where the credit values go; the output must equal the template with the values filled in, byte
for byte. The values come from ``credit.score`` on the parsed lines (the same kernel), written as JSON writes
a float.
"""

from __future__ import annotations

import itertools
import json
import os
import re

import pytest

from creditflow import credit
from creditflow.cli import main

CREDIT = ("process_reward", "step_reward", "advantage")
MARK = re.compile(r"<(process_reward|step_reward|advantage)>")
NUMBERED = re.compile(r"<(process_reward|step_reward|advantage)#(\d+)>")
ADDED = ', "process_reward": <process_reward>, "step_reward": <step_reward>, "advantage": <advantage>'

# step shapes: (input text, expected text with <field> markers); {k} is the step's number (a distinct state)
STEPS = [
    ('{"state": "s{k}", "action": "a", "reward": 0.0}', '{"state": "s{k}", "action": "a", "reward": 0.0' + ADDED + "}"),
    ('{"state":"s{k}","action":"a","reward":-0.10}', '{"state":"s{k}","action":"a","reward":-0.10' + ADDED + "}"),
    ('{ "state" : "s{k}" , "action" : "a" }', '{ "state" : "s{k}" , "action" : "a"' + ADDED + " }"),
    ('{\t"state":\t"s{k}",\t"action": "a"\t}', '{\t"state":\t"s{k}",\t"action": "a"' + ADDED + "\t}"),
    # unknown members, nested objects holding credit-named keys, strings that look like members
    ('{"state": "s{k}", "info": {"advantage": 3, "x": [1, {"step_reward": 2}]}, "action": "}\\"advantage\\": 1"}',
     '{"state": "s{k}", "info": {"advantage": 3, "x": [1, {"step_reward": 2}]}, "action": "}\\"advantage\\": 1"'
     + ADDED + "}"),
    ('{"state": "caf\\u00e9 s{k}", "observation": "café ☕ 😀", "action": "a", "n": 1.50, "m": 1E+2}',
     '{"state": "caf\\u00e9 s{k}", "observation": "café ☕ 😀", "action": "a", "n": 1.50, "m": 1E+2' + ADDED + "}"),
    # already scored: values replaced where they are, formatting around them kept
    ('{"state": "s{k}", "action": "a", "process_reward": 0.5, "step_reward": 1.50, "advantage": -2}',
     '{"state": "s{k}", "action": "a", "process_reward": <process_reward>, "step_reward": <step_reward>, '
     '"advantage": <advantage>}'),
    ('{"advantage":1.50,"state":"s{k}","action":"a"}', '{"advantage":<advantage>,"state":"s{k}","action":"a"'
     ', "process_reward": <process_reward>, "step_reward": <step_reward>}'),
    ('{ "state" : "s{k}" ,"step_reward"  :  null , "action": "a" }',
     '{ "state" : "s{k}" ,"step_reward"  :  <step_reward> , "action": "a", "process_reward": <process_reward>, '
     '"advantage": <advantage> }'),
    ('{"state": "s{k}", "adv\\u0061ntage": 0.1000000000000000055511151231257827, "action": "a"}',
     '{"state": "s{k}", "adv\\u0061ntage": <advantage>, "action": "a", "process_reward": <process_reward>, '
     '"step_reward": <step_reward>}'),
    ('{"state": "s{k}", "action": "a", "advantage": 1, "advantage": 2}',  # a repeated key: every copy
     '{"state": "s{k}", "action": "a", "advantage": <advantage>, "advantage": <advantage>, '
     '"process_reward": <process_reward>, "step_reward": <step_reward>}'),
]

# trajectory shapes: {steps} is the list of step texts; key order, spacing and unknown fields vary
TRAJECTORIES = [
    '{{"task_id": "t", "group_id": "g", "steps": [{steps}], "success": {won}}}',
    '{{"steps":[{steps}],"success":{won},"group_id":"g","task_id":"t","meta":{{"x":1.50,"n":"caf\\u00e9"}}}}',
    ' {{ "task_id" : "t" , "group_id" : "g" , "steps" : [ {steps} ] , "success" : {won} , '
    '"long": 3.14159265358979323846264338327950288 }}  ',
    '{{"task_id": "t", "group_id": "g", "steps": [{steps}], "success": {won}, "score": 1.0e0, "note": "écrit"}}',
]

# file shapes: line endings and what lies between lines
FILES = {  # byte-order mark; line endings (cycled); the last line's ending; bytes between lines; after the last
    "lf": (b"", [b"\n"], b"\n", b"", b""),
    "crlf": (b"", [b"\r\n"], b"\r\n", b"", b""),
    "mixed endings": (b"", [b"\r\n", b"\n"], b"\r\n", b"", b""),
    "no final newline": (b"", [b"\n"], b"", b"", b""),
    "bom": (b"\xef\xbb\xbf", [b"\n"], b"\n", b"", b""),
    "blank lines": (b"\n \t\n", [b"\n"], b"\n", b"\n\r\n  \n", b"\n\n"),
    "bom, crlf, blank lines, no final newline": (b"\xef\xbb\xbf\r\n", [b"\r\n"], b"", b"\r\n", b""),
}


def corpus_lines(n_lines: int, offset: int) -> list[tuple[str, str]]:
    """``n_lines`` trajectories (alternately won and lost), cycling through the step and trajectory shapes;
    the markers of the expected text are numbered by step (``<advantage#7>``: the file's eighth step)."""
    out = []
    shapes = itertools.cycle(STEPS[offset:] + STEPS[:offset])
    count = itertools.count()
    for i in range(n_lines):
        steps = [next(shapes) for _ in range(2 + i % 2)]
        ins = ", ".join(s[0].replace("{k}", str(k)) for k, s in enumerate(steps))
        exp = ", ".join(MARK.sub(rf"<\1#{next(count)}>", s[1].replace("{k}", str(k))) for k, s in enumerate(steps))
        template = TRAJECTORIES[(i + offset) % len(TRAJECTORIES)]
        won = "true" if i % 2 == 0 else "false"
        out.append((template.format(steps=ins, won=won), template.format(steps=exp, won=won)))
    return out


def build_file(lines: list[tuple[str, str]], shape: tuple) -> tuple[bytes, bytes]:
    """The input file and the expected one (with markers) of ``lines`` laid out as ``shape`` says."""
    bom, ends, last_end, between, tail = shape
    ins, exp = [bom], [bom]
    for i, (a, b) in enumerate(lines):
        last = i == len(lines) - 1
        after = (last_end + tail) if last else (ends[i % len(ends)] + between)
        ins.append(a.encode() + after)
        exp.append(b.encode() + after)
    return b"".join(ins), b"".join(exp)


def expected_bytes(template: bytes, data: bytes, estimator: str, knobs: dict) -> bytes:
    """The template with each marker replaced by the value ``credit.score`` gives that step, as JSON writes
    a float."""
    records = [json.loads(line) for line in data.decode("utf-8-sig").splitlines() if line.strip()]
    steps = [s for t in credit.score(records, estimator=estimator, **knobs) for s in t.steps]
    return NUMBERED.sub(lambda m: repr(float(getattr(steps[int(m.group(2))], m.group(1)))),
                        template.decode("utf-8")).encode("utf-8")


def run(argv, capsys):
    with pytest.raises(SystemExit) as exc:
        main(argv)
    return exc.value.code, capsys.readouterr().err


@pytest.mark.parametrize("estimator, knobs", [("rewardflow", {}), ("gigpo", {"reward_source": "success"})])
@pytest.mark.parametrize("shape", list(FILES))
def test_the_round_trip_is_byte_exact(shape, estimator, knobs, tmp_path, capsys):
    data, template = build_file(corpus_lines(6, len(shape)), FILES[shape])
    src, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    src.write_bytes(data)
    code, err = run(["credit", "-e", estimator, "--in", str(src), "--out", str(out),
                     *(f"{k}={v}" for k, v in knobs.items())], capsys)
    assert code == 0, err
    assert out.read_bytes() == expected_bytes(template, data, estimator, knobs)
    # scoring the output again changes nothing: a scored file is a fixed point
    again = tmp_path / "again.jsonl"
    assert run(["credit", "-e", estimator, "--in", str(out), "--out", str(again),
                *(f"{k}={v}" for k, v in knobs.items())], capsys)[0] == 0
    assert again.read_bytes() == out.read_bytes()


def test_every_step_shape_is_in_the_corpus():
    lines = corpus_lines(6, 0) + corpus_lines(6, 3)
    used = {s for s, _ in STEPS if any(s.replace("{k}", "0") in a or s.replace("{k}", "1") in a
                                       or s.replace("{k}", "2") in a for a, _ in lines)}
    assert used == {s for s, _ in STEPS}


def test_an_estimator_without_process_reward_removes_a_stale_one(tmp_path, capsys):
    """grpo computes no process_reward: one left by an earlier estimator is removed with its separator,
    wherever it is, and every other byte stays."""
    src = tmp_path / "in.jsonl"
    src.write_bytes(b'{"task_id": "t", "steps": [{"process_reward": 0.9, "state": "A", "action": "a"}, '
                    b'{"state": "B", "process_reward":0.5 , "action": "b", "advantage": 7}], "success": true}\r\n'
                    b'{"task_id": "t", "steps": [{"state": "A", "action": "c","process_reward": 1}], "success": false}')
    out = tmp_path / "out.jsonl"
    assert run(["credit", "-e", "grpo", "--in", str(src), "--out", str(out), "reward_source=success"], capsys)[0] == 0
    a = repr(0.7071057811879616)  # 0.5 / (sample std sqrt(0.5) + 1e-6)
    assert out.read_bytes() == (
        b'{"task_id": "t", "steps": [{"state": "A", "action": "a", "step_reward": 0.0, "advantage": ' + a.encode()
        + b'}, {"state": "B", "action": "b", "advantage": ' + a.encode() + b', "step_reward": 0.0}], '
        b'"success": true}\r\n{"task_id": "t", "steps": [{"state": "A", "action": "c", "step_reward": 0.0, '
        b'"advantage": -' + a.encode() + b'}], "success": false}')
    # the Python paths agree: no stale process_reward on score()'s copies or on scored dicts
    records = [json.loads(line) for line in src.read_text().splitlines()]
    assert all(s.process_reward is None for t in credit.score(records, estimator="grpo", reward_source="success")
               for s in t.steps)


def test_out_that_is_a_symlink_writes_its_target(tmp_path, capsys):
    src = tmp_path / "in.jsonl"
    src.write_text('{"task_id": "t", "steps": [{"state": "A", "action": "a"}], "success": true}\n')
    target = tmp_path / "data" / "scored.jsonl"
    target.parent.mkdir()
    target.write_text("old\n")
    os.chmod(target, 0o600)
    link = tmp_path / "out.jsonl"
    link.symlink_to(os.path.relpath(target, tmp_path))
    assert run(["credit", "-e", "grpo", "--in", str(src), "--out", str(link)], capsys)[0] == 0
    assert link.is_symlink() and os.readlink(link) == os.path.relpath(target, tmp_path)
    assert target.read_text().startswith('{"task_id": "t", "steps": [{"state": "A", "action": "a", "step_reward"')
    assert os.stat(target).st_mode & 0o777 == 0o600  # the file written over keeps its permissions
    assert sorted(os.listdir(target.parent)) == ["scored.jsonl"]  # no temporary left beside it
    # --in and --out the same link: scored in place through the link
    assert run(["credit", "-e", "grpo", "--in", str(link), "--out", str(link)], capsys)[0] == 0
    assert link.is_symlink() and target.read_text().count('"advantage"') == 1
    # a dangling link writes the file it names; a loop of links is one line
    dangling = tmp_path / "new.jsonl"
    dangling.symlink_to(tmp_path / "data" / "made.jsonl")
    assert run(["credit", "-e", "grpo", "--in", str(src), "--out", str(dangling)], capsys)[0] == 0
    assert dangling.is_symlink() and (tmp_path / "data" / "made.jsonl").read_text().count('"advantage"') == 1
    (tmp_path / "loop_a").symlink_to(tmp_path / "loop_b")
    (tmp_path / "loop_b").symlink_to(tmp_path / "loop_a")
    code, err = run(["credit", "-e", "grpo", "--in", str(src), "--out", str(tmp_path / "loop_a")], capsys)
    assert code == 2 and "Too many levels of symbolic links" in err and len(err.strip().splitlines()) == 1


def huge_file(tmp_path, rewards) -> tuple:
    steps = ", ".join(f'{{"state": "A{k}", "action": "a", "reward": {r!r}}}' for k, r in enumerate(rewards))
    src = tmp_path / "in.jsonl"
    src.write_text(f'{{"task_id": "t", "steps": [{steps}], "success": true}}\n'
                   '{"task_id": "t", "steps": [{"state": "A", "action": "b", "reward": -1e300}], "success": false}\n')
    return src, tmp_path / "out.jsonl"


@pytest.mark.parametrize("estimator, rewards", [
    *[(name, [1e308, 1e308]) for name in ("grpo", "rloo", "gigpo", "rewardflow")],  # the sum overflows
    *[(name, [1e308, -1e308]) for name in ("grpo", "gigpo", "rewardflow")],  # the variance overflows
])
def test_credit_that_would_not_be_finite_is_an_error_naming_the_line(estimator, rewards, tmp_path, capsys):
    """Huge finite rewards: never an output with NaN or Infinity; one line naming the trajectory and why."""
    src, out = huge_file(tmp_path, rewards)
    code, err = run(["credit", "-e", estimator, "--in", str(src), "--out", str(out), "reward_source=return"], capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert re.search(rf"in\.jsonl:[12]: estimator '{estimator}' cannot give it finite credit: .*rescale them", err)
    assert not out.exists() and sorted(os.listdir(tmp_path)) == ["in.jsonl"]


def test_huge_values_with_finite_credit_are_scored(tmp_path, capsys):
    """RLOO divides by no variance: returns of 1e300 still give finite, exact advantages."""
    src, out = huge_file(tmp_path, [1e308, -1e308])
    assert run(["credit", "-e", "rloo", "--in", str(src), "--out", str(out), "reward_source=return"], capsys)[0] == 0
    advantages = [s["advantage"] for line in out.read_text().splitlines() for s in json.loads(line)["steps"]]
    assert advantages == [1e300, 1e300, -1e300]
