"""Episode length and truncation across the adapters (issue 74, part 5): the gymnasium adapter's default limit is
the env's time limit capped at TURN_CAP turns, which every toy-text task's shortest solution fits in; and a cut by
the run's rollout.max_steps (below the adapter's max_steps) reaches the adapter through truncate(), which ends the
episode as the adapter's own limit ends it: a gymnasium episode truncated (nothing to call), a verifiers 0.3
rollout stopped at a turn limit and scored by its rubric, a TRL env scored by get_reward()."""

import functools

import pytest

from creditflow.envs import EnvError, make
from creditflow.envs.adapters.gymnasium_env import TURN_CAP

from tests.envs.adapters.conftest import scripted_rollouts

pytest.importorskip("gymnasium")

LAKE = "gymnasium:FrozenLake-v1"
ECHO = "gymnasium:tests.envs.adapters.test_gymnasium:EchoWordEnv"  # a Text-space env with no registered limit


@pytest.mark.parametrize("name, kwargs, registered", [
    (LAKE, {}, 100),
    ("gymnasium:FrozenLake8x8-v1", {}, 200),
    ("gymnasium:Taxi-v4", {}, 200),
    ("gymnasium:CliffWalking-v1", {}, None),
    (ECHO, {"make_kwargs": {"rounds": 2}}, None),
])
def test_the_gymnasium_default_limit_is_the_time_limit_capped(name, kwargs, registered):
    env = make(name, **kwargs)
    assert TURN_CAP == 20 and env.max_steps == min(registered or TURN_CAP, TURN_CAP)
    assert make(name, max_steps=100, **kwargs).max_steps == 100  # the option sets any other limit


@pytest.mark.parametrize("name, kwargs, seeds", [
    (LAKE, {"make_kwargs": {"is_slippery": False}}, [0]),
    ("gymnasium:FrozenLake8x8-v1", {"make_kwargs": {"is_slippery": False}}, [0]),
    ("gymnasium:CliffWalking-v1", {}, [0]),
    ("gymnasium:Taxi-v4", {}, range(60)),
])
def test_every_toy_text_task_is_winnable_within_the_default_limit(name, kwargs, seeds):
    env = make(name, **kwargs)
    longest = 0
    for seed in seeds:
        env.reset(seed=seed)
        longest = max(longest, len(env.expert_actions()))
    assert 0 < longest <= env.max_steps  # Taxi's longest shortest plan is 18 steps


def test_a_cut_gymnasium_episode_is_truncated_and_not_won():
    factory = functools.partial(make, LAKE, make_kwargs={"is_slippery": False})
    walked, = scripted_rollouts(factory, [["right", "right", "down"]], max_steps=3)  # the adapter's limit: 20
    assert walked.truncated and not walked.success and walked.score == 0.0 and walked.final_state == "6"
    env = factory()
    env.reset(seed=0)
    env.step("right")
    reward, info = env.truncate()  # gymnasium has nothing to call: the episode ends where it stands
    assert (reward, info["won"], info["score"], info["state_key"], info["action_valid"]) == (0.0, False, 0.0, "1",
                                                                                             True)
    with pytest.raises(EnvError, match="truncate\\(\\) called after the episode ended"):
        env.truncate()
    with pytest.raises(EnvError, match="step\\(\\) called after the episode ended"):
        env.step("down")


def test_a_cut_verifiers_rollout_is_stopped_at_a_turn_limit_and_scored_by_its_rubric():
    pytest.importorskip("verifiers")
    from creditflow.envs import adapters

    if adapters.verifiers_adapter() != adapters.VERIFIERS_03:
        pytest.skip("the verifiers 0.3 adapter (the main environment's)")
    factory = functools.partial(make, "verifiers:tests.envs.adapters.vf_frozen_lake")  # its max_turns: 8
    path = ["down", "down", "right", "right", "down", "right"]  # reaches the goal at step 6
    # GymEnv notices the end only at its next turn, so at step 6 the rollout still runs: the run's limit cuts it
    walked, = scripted_rollouts(factory, [path], max_steps=6)
    assert walked.truncated and len(walked) == 6
    assert walked.score == 1.0 and walked.steps[-1].reward == 1.0  # the rubric's score, where it used to be 0
    assert walked.steps[-1].info["score"] == 1.0
    env = factory()
    env.reset(seed=0)
    env.step("down")
    state = env._rollout_state
    reward, info = env.truncate()
    assert reward == info["score"] == 0.0 and info["stop_condition"] == "max_turns_reached"
    assert state["is_completed"] and state["stop_condition"] == "max_turns_reached"  # as verifiers marks its own
    env.reset(seed=0)  # the next episode starts clean
    assert env.step("down")[0] == "4"


def test_a_cut_trl_episode_is_scored_by_get_reward():
    factory = functools.partial(make, "trl:tests.envs.adapters.test_trl:SeededPuzzle")  # its max_steps: 10
    pressed, = scripted_rollouts(factory, [["press(button=1)"]], seed=1, max_steps=1)  # cut before an answer
    assert pressed.truncated and pressed.score == 1.0 and pressed.steps[-1].reward == 1.0  # get_reward()
    wrong, = scripted_rollouts(factory, [["press(button=0)"]], seed=1, max_steps=1)
    assert wrong.truncated and wrong.score == 0.0
