"""gymnasium adapter: toy-text envs through named actions and the ansi render, Text-space envs, the options,
the protocol (invalid actions, determinism, verified replay, state keys), and `creditflow train` on FrozenLake."""

import functools
import sys

import pytest

from creditflow import credit
from creditflow.envs import EnvError, check_determinism, env_options, make, replay
from creditflow.envs.base import INVALID_ACTION_PREFIX, INFO_KEYS
from creditflow.rollout.expert import expert_trajectories

gymnasium = pytest.importorskip("gymnasium")
from gymnasium import spaces  # noqa: E402

from tests.envs.adapters.conftest import act, scripted_rollouts  # noqa: E402
from tests.pairs.helpers import QueueBackend, engine  # noqa: E402

LAKE = "gymnasium:FrozenLake-v1"
PATH = ["down", "down", "right", "right", "down", "right"]  # the 4x4 map's shortest way from S to G


class EchoWordEnv(gymnasium.Env):
    """A Text-space gymnasium env: say the word shown (three words in a row) to win."""

    WORDS = ["apple", "river", "stone", "cloud", "ember"]

    def __init__(self, rounds: int = 3):
        self.observation_space = spaces.Text(max_length=40)
        self.action_space = spaces.Text(min_length=1, max_length=10)  # alphanumeric charset, as gymnasium's default
        self.rounds = rounds

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.target = self.WORDS[int(self.np_random.integers(len(self.WORDS)))]
        self.left = self.rounds
        return f"say {self.target}", {}

    def step(self, action):
        if action != self.target:
            return f"no, say {self.target}", -1.0, False, False, {}
        self.left -= 1
        if self.left == 0:
            return "done", 1.0, True, False, {"is_success": True}
        self.target = self.WORDS[int(self.np_random.integers(len(self.WORDS)))]
        return f"say {self.target}", 0.0, False, False, {}


def cell_and_steps(observation, env):
    return f"{int(env.unwrapped.s)}@{env.unwrapped.lastaction}"


def test_frozen_lake_plays_with_named_actions_and_the_ansi_render():
    env = make(LAKE, make_kwargs={"is_slippery": False})
    assert env.max_steps == 20  # the registered max_episode_steps (100), capped at TURN_CAP
    obs, info = env.reset(seed=0)
    assert set(INFO_KEYS) <= set(info)
    assert info["admissible_actions"] == ["left", "down", "right", "up"]
    assert "S" in obs and "G" in obs and "\x1b[41m" in obs  # the render marks the player with a colour
    assert info["state_key"] == "0" and "frozen lake" in info["task"]
    for action in PATH[:-1]:
        obs, reward, terminated, truncated, info = env.step(action)
        assert (reward, terminated, truncated, info["won"]) == (0.0, False, False, False)
    obs, reward, terminated, truncated, info = env.step("Right")  # case-insensitive, as the parser matches
    assert (reward, terminated, truncated) == (1.0, True, False)
    assert info["won"] and info["score"] == 1.0 and info["state_key"] == "15"


def test_a_hole_ends_the_episode_without_a_win():
    env = make(LAKE, make_kwargs={"is_slippery": False})
    env.reset(seed=0)
    env.step("right")
    _, reward, terminated, _, info = env.step("down")  # cell 5 is a hole
    assert terminated and reward == 0.0 and not info["won"] and info["score"] == 0.0


@pytest.mark.parametrize("action", ["jump", "", "left left", INVALID_ACTION_PREFIX + "down", None, 3, ["down"]])
def test_invalid_and_non_text_actions_change_nothing(action):
    env = make(LAKE, make_kwargs={"is_slippery": False})
    obs, info = env.reset(seed=0)
    after, reward, terminated, truncated, info2 = env.step(action)
    assert after == obs and reward == 0.0 and not terminated and not truncated
    assert info2["action_valid"] is False and info2["state_key"] == info["state_key"]
    assert env.step("down")[4]["state_key"] == "4"  # the env was untouched


def test_slippery_lake_is_deterministic_under_a_seed_and_replays():
    check_determinism(lambda: make(LAKE), seed=7, n_steps=30)
    env = make(LAKE)
    obs, _ = env.reset(seed=11)
    observations, actions = [obs], ["down", "right", "jump", "right", "down"]
    for action in actions:
        obs, _, terminated, truncated, _ = env.step(action)
        observations.append(obs)
        if terminated or truncated:
            actions = actions[:len(observations) - 1]
            break
    again = replay(make(LAKE), 11, actions[:-1], observations[:len(actions)])
    assert again.observation == observations[len(actions) - 1]


@pytest.mark.parametrize("name, kwargs, length", [
    (LAKE, {"make_kwargs": {"is_slippery": False}}, 6),
    ("gymnasium:Taxi-v4", {}, None),
    ("gymnasium:CliffWalking-v1", {}, 13),
])
def test_expert_plans_are_shortest_and_win_where_transitions_are_certain(name, kwargs, length):
    demos = expert_trajectories(functools.partial(make, name, **kwargs), [0, 1, 2])
    assert len(demos) == 3 and all(d.success for d in demos)
    assert length is None or {len(d.steps) for d in demos} == {length}


def test_no_expert_where_a_plan_is_not_sure_to_win():
    assert not hasattr(make(LAKE), "expert_actions")  # slippery ice
    assert not hasattr(make("gymnasium:Taxi-v4", make_kwargs={"fickle_passenger": True}), "expert_actions")
    assert not hasattr(make(f"gymnasium:{__name__}:EchoWordEnv"), "expert_actions")  # no transition table


def test_taxi_names_and_goal_reward():
    env = make("gymnasium:Taxi-v4")
    obs, info = env.reset(seed=0)
    assert info["admissible_actions"] == ["south", "north", "east", "west", "pickup", "dropoff"]
    assert env.max_steps == 20 and "+---------+" in obs  # its max_episode_steps (200), capped
    _, reward, _, _, info = env.step("dropoff")  # no passenger aboard: Taxi's -10
    assert reward == -10.0 and info["action_valid"]


def test_text_space_env_from_module_and_class():
    name = f"gymnasium:{__name__}:EchoWordEnv"
    env = make(name, make_kwargs={"rounds": 2}, max_steps=6)
    obs, info = env.reset(seed=3)
    assert obs.startswith("say ") and info["admissible_actions"] is None and info["state_key"] == obs
    _, _, _, _, info = env.step("not a word")  # a space is outside the Text space's charset: invalid
    assert info["action_valid"] is False
    _, reward, _, _, info = env.step("wrong")
    assert reward == -1.0 and info["action_valid"]
    for _ in range(2):
        obs, reward, terminated, _, info = env.step(obs.split()[-1])
    assert terminated and info["won"] and info["score"] == 0.0  # -1 + 0 + 1, and is_success says won
    check_determinism(lambda: make(name), seed=5, actions=["apple", "river", "stone", "cloud"])


def test_state_key_option_as_module_function_and_as_callable():
    env = make(LAKE, make_kwargs={"is_slippery": False}, state_key=f"{__name__}:cell_and_steps")
    assert env.reset(seed=0)[1]["state_key"] == "0@None"
    assert env.step("down")[4]["state_key"] == "4@1"
    env = make(LAKE, state_key=lambda observation, native: len(observation))
    assert env.reset(seed=0)[1]["state_key"] == str(len(env.reset(seed=0)[0]))


def test_options_are_listed_and_checked():
    assert list(env_options(LAKE)) == ["make_kwargs", "action_names", "task", "success_reward", "state_key",
                                       "max_steps"]
    with pytest.raises(EnvError, match="option max_steps must be an integer or None"):
        make(LAKE, max_steps=2.5)
    with pytest.raises(EnvError, match="has no option"):
        make(LAKE, size=3)


@pytest.mark.parametrize("name, kwargs, says", [
    ("gymnasium:NoSuchEnv-v0", {}, "NoSuchEnv"),
    ("gymnasium:", {}, "needs what to adapt"),
    ("gymnasium:CartPole-v1", {}, "not Text and it has no 'ansi' render"),
    (LAKE, {"action_names": ["a", "b"]}, "action_names must be 4 distinct"),
    (LAKE, {"make_kwargs": {"no_such_option": 1}}, "no_such_option"),
    (LAKE, {"max_steps": 0}, "max_steps must be an integer >= 1"),
    (LAKE, {"state_key": "no_such_module_xyz:key"}, "no_such_module_xyz"),
    (f"gymnasium:{__name__}:nothing_here", {}, "has no attribute 'nothing_here'"),
])
def test_bad_specs_and_options_are_one_line_errors(name, kwargs, says):
    with pytest.raises(EnvError) as exc:
        make(name, **kwargs)
    assert says in str(exc.value) and "\n" not in str(exc.value)


def test_missing_gymnasium_is_one_clear_line(monkeypatch):
    monkeypatch.setitem(sys.modules, "gymnasium", None)
    with pytest.raises(EnvError) as exc:
        make(LAKE)
    assert "pip install 'creditflow[gymnasium]'" in str(exc.value) and "\n" not in str(exc.value)


@pytest.mark.slow
def test_creditflow_train_on_frozen_lake(train_cli):
    code, rows, out = train_cli(LAKE, "env.kwargs.make_kwargs.is_slippery=false")
    assert code == 0
    steps = [r for r in rows if "train/loss" in r or "rollout/success" in r]
    assert steps and max(r["step"] for r in rows) == 2
    assert (out / "config.yaml").read_text().count("gymnasium:FrozenLake-v1") == 1


def test_rollout_engine_groups_credit_and_branches_on_frozen_lake():
    factory = functools.partial(make, LAKE, make_kwargs={"is_slippery": False})
    won, lost = scripted_rollouts(factory, [PATH, ["right", None, "down"]])
    assert won.success and won.score == 1.0 and [s.action for s in won.steps] == PATH
    assert not lost.success and [s.valid for s in lost.steps] == [True, False, True]
    assert [s.state for s in lost.steps] == ["0", "1", "1"] and lost.final_state == "5"  # the hole
    credit.compute("rewardflow", [won, lost])
    assert all(s.advantage > 0 for s in won.steps) and lost.steps[-1].advantage < 0
    # a branch from the middle of the winning path restores by verified replay and plays on
    eng = engine(QueueBackend([act(PATH[3])]), factory)
    again = eng.branch(won.prefix(3), 1, task_id="task0", max_turns=1)
    assert eng.stats.restore_mismatches == 0
    assert again[0].steps[0].state == won.steps[3].state and again[0].steps[0].next_state == won.steps[3].next_state
