from pathlib import Path

import numpy as np
import pytest

from creditflow.envs import BaseTextEnv, EnvError, ReplayMismatch, check_determinism, make, replay


class CounterEnv(BaseTextEnv):
    """Counts 'inc' actions; optionally non-deterministic (observation depends on a shared counter)."""

    name = "counter"

    def __init__(self, flaky: bool = False, max_steps: int = 5):
        super().__init__(max_steps=max_steps)
        self.flaky = flaky
        self.value = 0
        self.calls = 0

    def _reset(self, seed, options):
        self.value = seed or 0
        return f"value={self.value}", {"state_key": str(self.value), "admissible_actions": ["inc", "dec"]}

    def _step(self, action):
        self.calls += 1
        if action == "inc":
            self.value += 1
        elif action == "dec":
            self.value -= 1
        else:
            return f"value={self.value}", 0.0, False, {"action_valid": False, "state_key": str(self.value)}
        noise = f" t={CounterEnv.global_calls()}" if self.flaky else ""
        return f"value={self.value}{noise}", 0.0, self.value >= 10, {"state_key": str(self.value)}

    _shared = 0

    @classmethod
    def global_calls(cls):
        cls._shared += 1
        return cls._shared


def test_info_defaults_and_truncation():
    env = CounterEnv(max_steps=2)
    obs, info = env.reset(seed=3)
    assert obs == "value=3"
    assert set(info) >= {"task", "admissible_actions", "action_valid", "won", "score", "state_key"}
    _, _, term, trunc, _ = env.step("inc")
    assert (term, trunc) == (False, False)
    _, _, term, trunc, _ = env.step("inc")
    assert (term, trunc) == (False, True)
    with pytest.raises(EnvError):
        env.step("inc")


def test_replay_verifies_observations():
    env = CounterEnv()
    res = replay(env, 1, ["inc", "inc"], ["value=1", "value=2", "value=3"])
    assert res.observation == "value=3" and res.info["state_key"] == "3"
    with pytest.raises(ReplayMismatch) as exc:
        replay(env, 1, ["inc", "dec"], ["value=1", "value=2", "value=3"])
    assert exc.value.step == 2


def test_replay_detects_nondeterministic_env():
    with pytest.raises(ReplayMismatch):
        first = replay(CounterEnv(flaky=True), 0, ["inc"])
        replay(CounterEnv(flaky=True), 0, ["inc"], ["value=0", first.observation])


def test_determinism_checker_catches_flaky_env():
    check_determinism(lambda: CounterEnv(), seed=0, actions=["inc", "dec", "inc"])
    with pytest.raises(AssertionError):
        check_determinism(lambda: CounterEnv(flaky=True), seed=0, actions=["inc", "inc"])


def test_registry_errors_are_one_line():
    with pytest.raises(EnvError, match="unknown env 'nope'"):
        make("nope")
    with pytest.raises(EnvError, match="no option"):
        make("sokoban", colour="red")


def test_options_are_checked_against_the_constructor_types():
    with pytest.raises(EnvError, match=r"option show_schema must be true or false, got 'yes'"):
        make("sql", show_schema="yes")
    with pytest.raises(EnvError, match=r"option time_limit must be a number, got 'fast'"):
        make("sql", time_limit="fast")
    with pytest.raises(EnvError, match=r"option tasks_file must be a string or None, got 3"):
        make("sql", tasks_file=3)
    assert make("sokoban", size=np.int64(7)).height == 7  # integer-like numbers are integers
    assert make("sql", time_limit=1).time_limit == 1.0  # an int where a float is expected
    with pytest.raises(EnvError, match="no tasks|does not exist|not found|no such"):
        make("sql", tasks_file=Path("/no/such/tasks.jsonl"))  # a path object passes the type check
