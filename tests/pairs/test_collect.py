"""Collection along whole trajectories: a scripted reward oracle (hand-computed) and the real estimator
(resume after a crash gives the same data as an uninterrupted run)."""

import json

import pytest

from creditflow.errors import UserError
from creditflow.pairs import preferences as prefs_mod
from creditflow.pairs.collect import PreferenceCollector
from creditflow.pairs.mc import MCStats
from creditflow.pairs.preferences import PreferenceWriter, read_preferences
from creditflow.policy.prompts import PromptBuilder
from creditflow.rollout.trajectory import read_jsonl
from tests.pairs.helpers import SOKOBAN, LineEnv, QueueBackend, RandomPolicyBackend, act, engine


class TableMC:
    """Scripted reward oracle keyed by action prefix (terminal prefixes: the env's final score)."""

    def __init__(self, table):
        self.table = table
        self.stats = MCStats()
        self.asked = []

    def clear(self):
        pass

    def estimate(self, task_id, states, outcomes=None):
        outcomes = outcomes or [None] * len(states)
        self.asked.extend(tuple(s.actions) for s in states)
        return [o if o is not None else self.table[tuple(s.actions)] for s, o in zip(states, outcomes)]


def collector(backend, exploration, candidates, table):
    c = PreferenceCollector(engine(backend, LineEnv), exploration=exploration, candidates=candidates,
                            mc_rollouts=1, env_name="line")
    c.mc = TableMC(table)
    return c


def test_rising_collection_hand_computed():
    table = {(): 0.5, ("b",): 0.3, ("a",): 0.6, ("a", "c"): 0.7}
    backend = QueueBackend([act("b"), act("a"),  # step 1: 0.3 < 0.5, 0.6 >= 0.5 -> pair a > b
                            act("c"),  # step 2: 0.7 >= 0.6 at once -> one candidate, no pair
                            act("b"), act("a"), act("b"), "zz", act("b")])  # step 3: all terminal < 0.7
    c = collector(backend, "rising", 5, table)
    pairs, rec, _ = c.collect_task(0)
    assert rec["step_samples"] == [2, 1, 5] and rec["samples"] == 8 and rec["steps"] == 3
    assert (rec["pairs"], rec["omitted_no_rising"], rec["omitted_no_contrast"]) == (1, 1, 1)
    # step 3: terminal outcomes (#a)/3 of a,c,b / a,c,a / a,c,b / a,c,<invalid> / a,c,b; the invalid one is a sample
    assert rec["step_rewards"][2] == [pytest.approx(x) for x in (1 / 3, 2 / 3, 1 / 3, 1 / 3, 1 / 3)]
    # the trajectory continued with the best candidate of the omitted step: a, c, a -> 2/3, not solved
    assert (rec["length"], rec["success"], rec["score"]) == (3, False, pytest.approx(2 / 3))
    (pair,) = pairs
    assert pair["prompt"] == PromptBuilder("a test env").messages("say a", "t=0 a=0", [], ["a", "b", "c"])
    assert pair["chosen"] == [{"role": "assistant", "content": act("a")}]
    assert pair["rejected"] == [{"role": "assistant", "content": act("b")}]
    assert (pair["step"], pair["chosen_reward"], pair["rejected_reward"], pair["previous_reward"]) == (1, 0.6, 0.3, 0.5)
    assert pair["candidates"] == 2
    # the step-2 prompt shows the chosen first action and its observation
    step2 = bytes(backend.prompts[2]).decode()
    assert "Action 1: a" in step2 and "t=1 a=1" in step2


def test_fixed_size_collection_hand_computed():
    table = {(): 0.5, ("b",): 0.3, ("a",): 0.6, ("a", "c"): 0.7, ("a", "a"): 0.9}
    backend = QueueBackend([act("b"), act("a"), act("c"), act("a"), act("a"), act("b")])
    c = collector(backend, "fixed", 2, table)
    pairs, rec, _ = c.collect_task(0)
    assert rec["step_samples"] == [2, 2, 2] and rec["pairs"] == 3
    assert [(p["chosen_action"], p["rejected_action"]) for p in pairs] == [("a", "b"), ("a", "c"), ("a", "b")]
    assert [p["chosen_reward"] for p in pairs] == [0.6, 0.9, 1.0]
    assert rec["success"] is True and rec["score"] == 1.0


def test_invalid_action_reward_replaces_an_invalid_candidates_estimate():
    """rro.invalid_action_reward = -1: an invalid candidate gets -1 without an MC estimate, so it never rises and
    is the rejected action; when every candidate is invalid the state's r_{t-1} carries over (not -1)."""
    table = {(): 0.5, ("a",): 0.6}
    backend = QueueBackend([act("d"), act("a"),  # step 1: d is not admissible -> -1; a: 0.6 >= 0.5 -> a > d
                            "zz", act("d"),  # step 2: both invalid -> -1, -1: no rising; go on with "zz"
                            act("b"), act("a")])  # step 3 (terminal): b 1/3 < 0.6, a 2/3 >= 0.6 -> a > b
    c = PreferenceCollector(engine(backend, LineEnv), exploration="rising", candidates=2, mc_rollouts=1,
                            env_name="line", invalid_action_reward=-1.0)
    c.mc = TableMC(table)
    pairs, rec, _ = c.collect_task(0)
    assert rec["step_samples"] == [2, 2, 2] and rec["invalid_candidates"] == 3
    assert rec["step_rewards"][:2] == [[-1.0, 0.6], [-1.0, -1.0]]
    # no estimate was asked for an invalid candidate; the path went on with the all-invalid step's first one
    assert c.mc.asked == [(), ("a",), ("a", "<invalid>zz", "b"), ("a", "<invalid>zz", "a")]
    assert (rec["pairs"], rec["omitted_no_rising"]) == (2, 1)
    first, last = pairs
    assert (first["chosen_action"], first["rejected_action"], first["rejected_reward"]) == ("a", "d", -1.0)
    assert (first["chosen_valid"], first["rejected_valid"]) == (True, False)
    # with r_{t-1} = -1 after the all-invalid step, b (1/3) would have risen at once and made no pair
    assert (last["chosen_action"], last["rejected_action"], last["previous_reward"]) == ("a", "b", 0.6)

    # the paper's rule (None): the invalid candidate is estimated like any other
    backend = QueueBackend([act("d"), act("a"), act("a"), act("a"), act("a"), act("a")])
    c = PreferenceCollector(engine(backend, LineEnv), exploration="fixed", candidates=2, mc_rollouts=1,
                            env_name="line")
    c.mc = TableMC({(): 0.5, ("<invalid>d",): 0.7, ("a",): 0.6, ("<invalid>d", "a"): 0.9})
    pairs, rec, _ = c.collect_task(0)
    assert rec["step_rewards"][0] == [0.7, 0.6]
    assert (pairs[0]["chosen_action"], pairs[0]["chosen_valid"]) == ("d", False)


def _collect(directory, seeds, seed=0):
    c = PreferenceCollector(engine(RandomPolicyBackend(), SOKOBAN), exploration="rising", candidates=3,
                            mc_rollouts=3, seed=seed, env_name="sokoban")
    writer = PreferenceWriter(directory, {"exploration": "rising", "seed": seed, "tasks": len(seeds)})
    return c.collect(seeds, writer), writer


def _records(directory):
    rows = [json.loads(line) for line in (directory / "tasks.jsonl").read_text().splitlines()]
    for r in rows:
        r.pop("seconds")
    return rows


def test_resume_after_crash_gives_the_uninterrupted_data(tmp_path, monkeypatch):
    import torch

    seeds = [300_000 + i for i in range(6)]
    full, _ = _collect(tmp_path / "full", seeds)
    assert full["pairs"] > 0 and full["tasks"] == 6 and full["rollouts"] > 0
    assert full["samples_per_step"] == pytest.approx(full["totals"]["samples"] / full["steps"])

    # crash while task 4 is being recorded: its pairs are on disk, its accounting record is not
    real_append, calls = prefs_mod._append, []

    def crashing_append(path, rows):
        if path.name == "tasks.jsonl":
            calls.append(path)
            if len(calls) == 4:
                raise KeyboardInterrupt
        real_append(path, rows)

    monkeypatch.setattr(prefs_mod, "_append", crashing_append)
    with pytest.raises(KeyboardInterrupt):
        _collect(tmp_path / "crashed", seeds)
    monkeypatch.setattr(prefs_mod, "_append", real_append)
    with open(tmp_path / "crashed" / "preferences.jsonl", "a") as fh:
        fh.write('{"prompt": [{"role": "us')  # and a torn line on top
    torch.manual_seed(12345)  # whatever the global RNG state is at the restart
    resumed, writer = _collect(tmp_path / "crashed", seeds)
    assert writer.resumed
    assert (tmp_path / "crashed" / "preferences.jsonl").read_text() == (tmp_path / "full" / "preferences.jsonl").read_text()
    assert _records(tmp_path / "crashed") == _records(tmp_path / "full")
    assert {k: resumed[k] for k in ("samples_per_step", "steps", "pairs", "rollouts")} == \
        {k: full[k] for k in ("samples_per_step", "steps", "pairs", "rollouts")}
    # summary and card next to the data
    summary = json.loads((tmp_path / "crashed" / "summary.json").read_text())
    assert {"samples_per_step", "steps", "pairs", "rollouts"} <= set(summary)
    assert "samples per step" in (tmp_path / "crashed" / "README.md").read_text()
    assert len(read_preferences(tmp_path / "crashed")) == full["pairs"]
    # the explored trajectories survive the crash the same way, one per finished task
    assert (tmp_path / "crashed" / "trajectories.jsonl").read_text() == \
        (tmp_path / "full" / "trajectories.jsonl").read_text()
    trajs = read_jsonl(tmp_path / "full" / "trajectories.jsonl")
    assert [t.task_id for t in trajs] == [f"sokoban/{s}" for s in seeds]
    assert all(len(t.steps) == len(t.meta["step_rewards"]) for t in trajs)


def test_restart_with_other_settings_is_refused(tmp_path):
    w = PreferenceWriter(tmp_path, {"exploration": "rising", "tasks": 2})
    w.add_task([], {"task_id": "x/1", "steps": 1, "samples": 1})
    PreferenceWriter(tmp_path, {"exploration": "rising", "tasks": 5})  # more tasks: fine
    with pytest.raises(UserError, match="exploration"):
        PreferenceWriter(tmp_path, {"exploration": "fixed", "tasks": 2})
