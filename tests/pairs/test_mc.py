"""Monte-Carlo process reward over the batched engine, with deterministic (scripted) policies."""

import pytest

from creditflow.envs import make
from creditflow.envs.base import INVALID_ACTION_PREFIX
from creditflow.pairs.mc import MCProcessReward, PrefixRestoreError
from creditflow.rollout.trajectory import StartState
from tests.pairs.helpers import LineEnv, ScriptedBackend, act, engine

O0 = "t=0 a=0"


def always(a):
    return ScriptedBackend(lambda call, j, prompt: act(a))


def test_deterministic_policy_gives_the_outcome_of_its_continuation_batched_and_cached():
    backend = always("a")
    mc = MCProcessReward(engine(backend, LineEnv), m=3)
    # e_1:1 = [b] then a, a -> 2 of 3 'a' -> 2/3;  e_1:0 = [] then a, a, a -> 1
    vals = mc.estimate("line/0", [StartState(0, ["b"], [O0]), StartState(0)])
    assert vals == [pytest.approx(2 / 3), 1.0]
    assert backend.calls == [6, 6, 3]  # both prefixes x m=3 in one lockstep batch
    assert (mc.stats.rollouts, mc.stats.estimated, mc.stats.queries) == (6, 2, 2)
    assert mc.stats.env_steps == 3 * 2 + 3 * 3 and mc.stats.generated_tokens > 0
    # cached by (task, action prefix): no new rollouts
    assert mc.estimate("line/0", [StartState(0, ["b"], [O0])]) == [pytest.approx(2 / 3)]
    assert backend.calls == [6, 6, 3] and mc.stats.cache_hits == 1
    # another task with the same actions is another key
    mc.estimate("line/1", [StartState(1, ["b"], [O0])])
    assert mc.stats.rollouts == 9


def test_terminal_prefix_is_its_outcome_without_rollouts():
    backend = always("a")
    mc = MCProcessReward(engine(backend, LineEnv), m=5)
    p = StartState(0, ["a", "b", "c"], [O0, "t=1 a=1", "t=2 a=1"])
    assert mc.estimate("line/0", [p], [1 / 3]) == [pytest.approx(1 / 3)]
    assert backend.calls == [] and mc.stats.rollouts == 0 and mc.stats.terminal == 1


def test_estimate_is_the_mean_of_m_outcomes():
    # first turn: even batch positions say a, odd say b; afterwards always a
    backend = ScriptedBackend(lambda call, j, prompt: act("a") if call > 0 or j % 2 == 0 else act("b"))
    mc = MCProcessReward(engine(backend, LineEnv), m=4)
    # rollouts: aaa (1), baa (2/3), aaa (1), baa (2/3) -> mean 5/6
    assert mc.estimate("line/0", [StartState(0)]) == [pytest.approx(5 / 6)]
    assert mc.stats.rollouts == 4


def test_sokoban_snapshot_and_replay_restore_give_the_same_estimate():
    env = make("sokoban")
    obs0, _ = env.reset(seed=1)
    env.step("right")
    snap = env.snapshot()
    for snapshot in (None, snap):
        mc = MCProcessReward(engine(always("down"), lambda: make("sokoban")), m=2)
        # seed 1 is solved by right, down, down: the always-down continuation wins
        assert mc.estimate("sokoban/1", [StartState(1, ["right"], [obs0], snapshot=snapshot)]) == [1.0]
        # always down from the start never solves it
        assert mc.estimate("sokoban/1", [StartState(1)]) == [0.0]


def test_replay_mismatch_raises_and_is_counted():
    mc = MCProcessReward(engine(always("a"), LineEnv), m=2)
    with pytest.raises(PrefixRestoreError):
        mc.estimate("line/0", [StartState(0, ["b"], ["not what the env shows"])])
    assert mc.stats.restore_failures == 1


def test_invalid_prefix_action_is_replayed_as_invalid_and_shown_as_parsed():
    seen = []

    def responder(call, j, prompt):
        seen.append(bytes(prompt).decode())
        return act("a")

    mc = MCProcessReward(engine(ScriptedBackend(responder), LineEnv), m=1)
    # the env received an invalid action (a no-op 'b' for LineEnv's count), the policy had written "zz"
    assert mc.estimate("line/0", [StartState(0, [INVALID_ACTION_PREFIX + "zz"], [O0])]) == [pytest.approx(2 / 3)]
    assert "Action 1: zz" in seen[0] and INVALID_ACTION_PREFIX not in seen[0]
