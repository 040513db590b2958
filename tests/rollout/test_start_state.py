"""One start-state type (StartState, Trajectory.prefix), one success rule, and the engine's branch API."""

import pytest

from creditflow.envs import make
from creditflow.envs.base import INVALID_ACTION_PREFIX
from creditflow.policy.backends.base import Generation, SamplingParams
from creditflow.policy.prompts import PromptBuilder
from creditflow.rollout.engine import RolloutEngine, TaskSpec
from creditflow.rollout.trajectory import StartState, Step, SuccessRule, Trajectory


class Scripted:
    """Says the next action of ``plan`` for each prompt (by its turn number); records the prompts."""

    def __init__(self, plan):
        self.plan, self.prompts = plan, []

    def generate(self, prompts, params):
        self.prompts.extend(prompts)
        out = []
        for p in prompts:
            turn = bytes(p).decode().count("\nAction ")  # past actions in the prompt (history_length=9: all)
            out.append(Generation(f"<action>{self.plan[min(turn, len(self.plan) - 1)]}</action>", [1], [-0.5]))
        return out


def encode(messages):
    return list(messages[0]["content"].encode())


def engine(backend, **kw):
    return RolloutEngine(backend, encode, lambda: make("sokoban"), PromptBuilder("sokoban", history_length=9),
                         SamplingParams(), **kw)


def test_success_rule_won_or_score_threshold():
    assert SuccessRule()(True, 0.0) and not SuccessRule()(False, 0.99)
    rule = SuccessRule(0.8)
    assert rule(False, 0.8) and rule(True, 0.1) and not rule(False, 0.79)
    assert rule.outcome({"won": False, "score": 0.9}) == (True, 0.9)
    assert SuccessRule().outcome({"won": True}) == (True, 1.0)  # missing score: 1 for a win
    assert SuccessRule(0.5).of(Trajectory("t", score=0.6)) is True


def test_prefix_includes_the_start_path_and_env_actions():
    start = StartState(3, ["up"], ["o0", "o1"])
    steps = [Step("s1", "o1", "left"), Step("s2", "o2", "zz", valid=False, executed=INVALID_ACTION_PREFIX + "zz"),
             Step("s3", "o3", "bad", valid=False)]  # no 'executed': an invalid step replays as invalid
    traj = Trajectory("t", steps, meta={"seed": 3, "final_observation": "o4"}, start=start)
    p = traj.prefix(2)
    assert p.seed == 3 and p.actions == ["up", "left", INVALID_ACTION_PREFIX + "zz"]
    assert p.observations == ["o0", "o1", "o2", "o3"] and p.t == 3
    full = traj.prefix()
    assert full.actions[-1] == INVALID_ACTION_PREFIX + "bad" and full.observations[-1] == "o4"
    assert traj.prefix(0).actions == ["up"] and traj.prefix(0).observations == ["o0", "o1"]
    with pytest.raises(ValueError):
        traj.prefix(4)
    assert Trajectory("u", meta={"seed": 5}).prefix() == StartState(5, [], [])


def test_taskspec_start_must_match_its_seed():
    with pytest.raises(ValueError):
        TaskSpec("t", 1, start=StartState(2))


def test_branching_turn_by_turn_equals_one_rollout():
    plan = ["right", "down", "down"]  # solves seed 1
    whole = engine(Scripted(plan)).rollout([TaskSpec("sokoban/1", 1)], 1)[0]
    assert whole.success and [s.action for s in whole.steps] == plan

    eng = engine(Scripted(plan))
    (path,) = eng.branch(StartState(1), 1, task_id="sokoban/1", max_turns=0)  # reset only
    assert path.steps == [] and path.end_info["admissible_actions"] and path.end_snapshot is not None
    for _ in plan:
        prompt = eng.prompt_at(path)
        (step_traj,) = eng.branch(path.prefix(), 1, task_id="sokoban/1", max_turns=1)
        assert bytes(eng.backend.prompts[-1]).decode() == prompt[0]["content"]  # prompt_at = what it showed
        path.steps.append(step_traj.steps[0])
        path.end_snapshot, path.end_info = step_traj.end_snapshot, step_traj.end_info
        path.meta["final_observation"] = step_traj.meta["final_observation"]
    assert step_traj.done and step_traj.success
    assert [s.observation for s in path.steps] == [s.observation for s in whole.steps]
    assert [s.prompt_ids for s in path.steps] == [s.prompt_ids for s in whole.steps]


def test_branch_from_an_unrestorable_state_gives_nothing():
    eng = engine(Scripted(["up"]))
    assert eng.branch(StartState(1, ["right"], ["not the start"]), 2, task_id="s/1") == []
    assert eng.stats.restore_mismatches == 2
