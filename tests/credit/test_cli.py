"""``creditflow credit`` and ``creditflow graph``: round trips, knobs, malformed input."""

import json

import pytest
from tests.credit.credit_testlib import traj

from creditflow import credit
from creditflow.cli import main
from creditflow.credit.registry import show_value
from creditflow.credit.rewardflow import GraphKnobs
from creditflow.rollout.trajectory import read_jsonl, write_jsonl


def run(argv, capsys):
    with pytest.raises(SystemExit) as exc:
        main(argv)
    out = capsys.readouterr()
    return exc.value.code, out.err


@pytest.fixture
def trajs_file(tmp_path):
    trajs = [
        traj(["A", "B", "C"], ["x", "y"], success=True, group="g1", traj_id="g1/0"),
        traj(["A", "D", "D", "E"], ["z", "bad", "w"], valid=[True, False, True], rewards=[0, -0.1, 0], group="g1",
             traj_id="g1/1"),
        traj(["P", "Q"], ["u"], group="g2", traj_id="g2/0"),
    ]
    path = tmp_path / "trajs.jsonl"
    write_jsonl(path, trajs)
    return path


@pytest.mark.parametrize("estimator", ["grpo", "rloo", "gigpo", "rewardflow", "graphgpo", "g2po", "gagpo"])
def test_credit_round_trip(estimator, trajs_file, tmp_path, capsys):
    out = tmp_path / f"{estimator}.jsonl"
    code, err = run(["credit", "--estimator", estimator, "--in", str(trajs_file), "--out", str(out)], capsys)
    assert code == 0, err
    scored = read_jsonl(out)
    assert [t.traj_id for t in scored] == ["g1/0", "g1/1", "g2/0"]
    for t in scored:
        for s in t.steps:
            assert isinstance(s.advantage, float) and isinstance(s.step_reward, float)
    raw = json.loads(out.read_text().splitlines()[0])
    assert {"process_reward", "step_reward", "advantage"} <= set(raw["steps"][0]) or estimator in ("grpo", "rloo")
    # the same numbers as the Python API
    api = credit.score(read_jsonl(trajs_file), estimator=estimator)
    assert [s.advantage for t in api for s in t.steps] == [s.advantage for t in scored for s in t.steps]


def test_credit_knobs_are_typed(trajs_file, tmp_path, capsys):
    out = tmp_path / "rf.jsonl"
    code, err = run(["credit", "-e", "rewardflow", "--in", str(trajs_file), "--out", str(out), "gamma=0.5",
                     "prune=false", "success_threshold=none", "max_hops=3"], capsys)
    assert code == 0, err
    assert read_jsonl(out)[0].steps[0].process_reward == 0.25


@pytest.mark.parametrize("knob, message", [
    ("gamma=abc", "knob gamma expects a number, got 'abc'"),
    ("foo=1", "has no knob 'foo'"),
    ("gamma", "expected key=value"),
    ("gamma=1.5", "knob gamma must be in"),
    ("prune=maybe", "knob prune expects true or false"),
])
def test_bad_knobs(knob, message, trajs_file, tmp_path, capsys):
    out = tmp_path / "x.jsonl"
    code, err = run(["credit", "-e", "rewardflow", "--in", str(trajs_file), "--out", str(out), knob], capsys)
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1
    assert not out.exists()


def test_unknown_estimator(trajs_file, tmp_path, capsys):
    code, err = run(["credit", "-e", "ppo", "--in", str(trajs_file), "--out", str(tmp_path / "x.jsonl")], capsys)
    assert code == 2 and "unknown estimator 'ppo'" in err


@pytest.mark.parametrize("line2, parts", [
    ('{"task_id": "t", "steps": [{"state": "A"}]}', (":2: steps[0]", "missing field 'action'")),
    ('{"task_id": "t", "steps": [{"state": "A", "action": "x", "reward": "high"}]}',
     (":2: steps[0]", "field 'reward' must be number")),
    ('{"task_id": "t", "steps": [', (":2: invalid JSON",)),
    ('{"steps": []}', (":2: missing field 'task_id'",)),
])
def test_malformed_input_names_line_and_field(line2, parts, tmp_path, capsys):
    good = json.dumps(traj(["A", "B"]).to_dict())
    src = tmp_path / "bad.jsonl"
    src.write_text(good + "\n" + line2 + "\n")
    out = tmp_path / "scored.jsonl"
    code, err = run(["credit", "-e", "rewardflow", "--in", str(src), "--out", str(out)], capsys)
    assert code == 2 and all(p in err for p in parts) and len(err.strip().splitlines()) == 1, err
    assert not out.exists() and list(tmp_path.iterdir()) == [src]


def test_missing_input_file(tmp_path, capsys):
    code, err = run(["credit", "-e", "grpo", "--in", str(tmp_path / "nope.jsonl"), "--out",
                     str(tmp_path / "o.jsonl")], capsys)
    assert code == 2 and "no such file" in err


@pytest.mark.parametrize("suffix", [".png", ".dot", ".html"])
def test_graph_outputs(suffix, trajs_file, tmp_path, capsys):
    out = tmp_path / f"graph{suffix}"
    code, err = run(["graph", "--in", str(trajs_file), "--group", "g1", "--out", str(out), "gamma=0.5"], capsys)
    assert code == 0, err
    data = out.read_bytes()
    if suffix == ".png":
        assert data[:8] == b"\x89PNG\r\n\x1a\n"
    else:
        text = data.decode()
        assert "Node 0" in text and "Node 2*" in text  # legend with the success node marked
        assert "Node 0 -> Node 1" in text or "Node 0 &rarr; Node 1" in text
        if suffix == ".html":
            assert "<svg" in text and "R(s)" in text
        else:
            assert text.count("->") >= 4 and "doublecircle" in text


@pytest.mark.parametrize("suffix", [".png", ".dot"])
def test_graphgpo_graph(suffix, trajs_file, tmp_path, capsys):
    """``--estimator graphgpo`` draws GraphGPO's graph: every step an edge (the invalid D -> D self-loop too),
    node shade omega ** d(s)."""
    out = tmp_path / f"graph{suffix}"
    code, err = run(["graph", "-e", "graphgpo", "--in", str(trajs_file), "--group", "g1", "--out", str(out),
                     "omega=0.5", "success_from=outcome"], capsys)
    assert code == 0, err
    assert "5 nodes, 5 edges" in err  # A B C D E; A-B B-C A-D D-D D-E (RewardFlow prunes D-D: 4 edges)
    if suffix == ".dot":
        text = out.read_text()
        assert text.startswith("// GraphGPO state graph") and "Node 0 (R=0.250): A" in text  # omega ** d(A)
        assert "Node 3 -> Node 3: bad" in text  # the invalid step is an edge of GraphGPO's graph
    code, err = run(["graph", "-e", "g2po", "--in", str(trajs_file), "--out", str(out)], capsys)
    assert code == 2 and "graphs are drawn for rewardflow, graphgpo" in err


def test_graph_errors(trajs_file, tmp_path, capsys):
    code, err = run(["graph", "--in", str(trajs_file), "--group", "nope", "--out", str(tmp_path / "g.png")], capsys)
    assert code == 2 and "no group 'nope'" in err and "g1" in err
    code, err = run(["graph", "--in", str(trajs_file), "--out", str(tmp_path / "g.txt")], capsys)
    assert code == 2 and "unsupported output" in err
    code, err = run(["graph", "--in", str(trajs_file), "--out", str(tmp_path / "g.png"), "alpha_traj=2"], capsys)
    assert code == 2 and "no knob 'alpha_traj'" in err


def _help(command, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "400")  # one line per knob
    with pytest.raises(SystemExit) as exc:
        main([command, "--help"])
    assert exc.value.code == 0
    return capsys.readouterr().out


def test_credit_help_lists_every_knob_with_default_and_docstring(capsys, monkeypatch):
    text = _help("credit", capsys, monkeypatch)
    lines = [line.strip() for line in text.splitlines()]
    flat = " ".join(text.split())
    for name in credit.estimator_names():
        source = credit.knob_model(name).source
        assert (f"{name} ({source}):" if source else f"{name}:") in flat  # what it is built from, in its title
        for knob, field in credit.knob_model(name).model_fields.items():
            assert any(line.startswith(f"{knob}={show_value(field.default)}  {field.description[:30]}")
                       for line in lines), (name, knob)


def test_credit_help_says_which_estimators_are_built_from_an_abstract(capsys, monkeypatch):
    flat = " ".join(_help("credit", capsys, monkeypatch).split())
    for name in ("g2po", "gagpo"):
        assert f"{name} (built from its abstract and summaries: every equation is creditflow's choice):" in flat
    assert "graphgpo (preset=official, the default, checked against the authors' verl-agent recipe):" in flat


def test_graph_help_lists_the_graph_knobs(capsys, monkeypatch):
    out = _help("graph", capsys, monkeypatch)
    for knob, field in GraphKnobs.model_fields.items():
        assert f"{knob}=" in out and field.description[:30] in out
    assert "alpha_traj" not in out
