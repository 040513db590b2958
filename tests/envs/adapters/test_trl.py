"""TRL environment_factory adapter: a class as TRL's GRPOTrainer takes it (reset(**row), tool methods,
get_reward), tool calls in both written forms, errors as TRL reports them, the score, the engine, and
`creditflow train`. TRL itself is never imported: such a class is plain Python."""

import functools
import sys

import pytest

from creditflow import credit
from creditflow.envs import EnvError, check_determinism, env_options, make, replay
from creditflow.envs.adapters.trl_env import parse_tool_call
from creditflow.envs.base import INFO_KEYS, INVALID_ACTION_PREFIX

from tests.envs.adapters.conftest import scripted_rollouts, write_jsonl

NAME = f"trl:{__name__}:GuessEnv"
ROWS = [{"prompt": [{"role": "user", "content": "Find my number."}], "secret": 7},
        {"prompt": "Find my number, quickly.", "secret": 2}]


class GuessEnv:
    """The shape of TRL's environment_factory classes (docs: "Training with environments")."""

    def __init__(self):
        self.secret, self.guesses, self.found = 0, 0, False

    def reset(self, secret: int = 5, **kwargs) -> str:
        self.secret, self.guesses, self.found = int(secret), 0, False
        return "I picked a number from 1 to 9."

    def guess(self, number: int) -> str:
        """Guess the number.

        Args:
            number: Your guess.
        """
        self.guesses += 1
        if number == self.secret:
            self.found = True
            return "correct"
        return "higher" if number < self.secret else "lower"

    async def parity(self) -> str:
        """Say whether the number is even or odd."""
        return "even" if self.secret % 2 == 0 else "odd"

    def get_reward(self) -> float:
        return 1.0 / self.guesses if self.found else 0.0

    @property
    def tries(self) -> int:  # not a tool: TRL lists functions only
        return self.guesses


class SeededPuzzle:
    """An env that makes its own task (no dataset): reset takes the seed."""

    def reset(self, seed=None):
        self.target = (seed or 0) % 4
        return f"press button {self.target}"

    def press(self, button: int) -> str:
        """Press a button."""
        self.pressed = button
        return "click"

    def get_reward(self) -> float:
        return float(getattr(self, "pressed", None) == self.target)


class NoReward:
    def reset(self):
        return None

    def look(self) -> str:
        """Look around."""
        return "nothing"


@pytest.fixture
def data(tmp_path):
    return write_jsonl(tmp_path / "guess.jsonl", ROWS)


def test_tools_task_and_reset_text(data):
    env = make(NAME, data=data)
    obs, info = env.reset(seed=0)
    assert obs == "I picked a number from 1 to 9." and set(INFO_KEYS) <= set(info)
    assert info["admissible_actions"] is None and info["state_key"] == obs
    lines = info["task"].splitlines()
    assert lines[0] == "Find my number."
    assert "- guess(number: int): Guess the number." in lines
    assert "- parity(): Say whether the number is even or odd." in lines
    assert not any("tries" in line or "reset" in line or "get_reward" in line for line in lines)
    assert env.reset(seed=3)[1]["task"].startswith("Find my number, quickly.")  # row 3 % 2, a text prompt


def test_tool_calls_in_both_forms_and_the_final_answer(data):
    env = make(NAME, data=data)
    env.reset(seed=0)  # secret 7
    assert env.step("parity()")[:4] == ("odd", 0.0, False, False)  # an async tool
    assert env.step("guess(5)")[0] == "higher"
    assert env.step('{"name": "guess", "arguments": {"number": 7}}')[0] == "correct"
    obs, reward, terminated, truncated, info = env.step("It is 7.")  # no tool call: the answer
    assert (obs, terminated, truncated) == ("", True, False)
    assert reward == info["score"] == 0.5 and info["won"] is False


@pytest.mark.parametrize("action, error", [
    ("nope(1)", "{'error': 'Tool nope not found.'}"),
    ("guess(1, 2)", "{'error': 'GuessEnv.guess() takes 2 positional arguments but 3 were given'}"),
    ("guess(digits=3)", "{'error': \"GuessEnv.guess() got an unexpected keyword argument 'digits'\"}"),
    ('{"name": "guess", "arguments": {}}',
     "{'error': \"GuessEnv.guess() missing 1 required positional argument: 'number'\"}"),
])
def test_failed_tool_calls_observe_trls_error_and_are_invalid(data, action, error):
    env = make(NAME, data=data)
    env.reset(seed=0)
    obs, reward, terminated, _, info = env.step(action)
    assert obs == error and reward == 0.0 and not terminated and info["action_valid"] is False
    assert env.step("guess(7)")[0] == "correct"  # the episode goes on


@pytest.mark.parametrize("action", [None, 7, ["guess(7)"], INVALID_ACTION_PREFIX + "guess(7)"])
def test_non_text_and_invalid_actions_change_nothing(data, action):
    env = make(NAME, data=data)
    obs, _ = env.reset(seed=0)
    after, reward, terminated, _, info = env.step(action)
    assert (after, reward, terminated, info["action_valid"]) == (obs, 0.0, False, False)
    assert env._env.guesses == 0


def test_parse_tool_call():
    assert parse_tool_call("guess(number=3)") == ("guess", [], {"number": 3})
    assert parse_tool_call(" search('red shoes', k=[1, 2]) ") == ("search", ["red shoes"], {"k": [1, 2]})
    assert parse_tool_call('{"name": "look", "arguments": {}}') == ("look", [], {})
    for answer in ["7", "guess", "guess(x)", "guess(*a)", "guess(**k)", "os.system('ls')", "f()()", "{oops",
                   '{"answer": 3}', "(" * 500]:
        assert parse_tool_call(answer) is None, answer


def test_max_steps_ends_and_scores_like_trls_tool_call_limit(data):
    env = make(NAME, data=data, max_steps=2)
    env.reset(seed=1)  # secret 2
    env.step("guess(1)")
    _, reward, terminated, truncated, info = env.step("guess(2)")
    assert (terminated, truncated) == (False, True) and reward == info["score"] == 0.5


def test_without_data_reset_gets_the_seed_when_it_takes_one():
    env = make(f"trl:{__name__}:SeededPuzzle")
    obs, info = env.reset(seed=6)
    assert obs == "press button 2" and info["task"].startswith("Tools (call one per step")
    env.step("press(button=2)")
    assert env.step("done")[1] == 1.0


def test_deterministic_and_replayable(data):
    check_determinism(lambda: make(NAME, data=data), seed=1, actions=["guess(5)", "parity()", "guess(2)", "ok"])
    env = make(NAME, data=data)
    seen = [env.reset(seed=0)[0], env.step("guess(9)")[0], env.step("guess(8)")[0]]
    assert replay(make(NAME, data=data), 0, ["guess(9)", "guess(8)"], seen).observation == "lower"


def test_state_key_function_sees_the_env(data):
    env = make(NAME, data=data, state_key=f"{__name__}:guess_count")
    assert env.reset(seed=0)[1]["state_key"] == "0 guesses"
    assert env.step("guess(3)")[4]["state_key"] == "1 guesses"


def guess_count(observation, env):
    return f"{env.guesses} guesses"


def test_engine_rollouts_and_credit(data):
    factory = functools.partial(make, NAME, data=data)
    quick, slow, lost = scripted_rollouts(factory, [["guess(7)", "7"], ["guess(9)", "guess(7)", "7"],
                                                    [None, "guess(1)", "no idea"]], seed=0)
    assert (quick.score, slow.score, lost.score) == (1.0, 0.5, 0.0)
    assert [s.observation for s in slow.steps] == ["I picked a number from 1 to 9.", "lower", "correct"]
    credit.compute("grpo", [quick, slow, lost], reward_source="score")
    assert quick.steps[0].advantage > slow.steps[0].advantage > lost.steps[0].advantage


def test_options_are_listed():
    assert list(env_options(NAME)) == ["data", "state_key", "max_steps"]


@pytest.mark.parametrize("name, says", [
    (f"trl:{__name__}:NoReward", "has no get_reward method"),
    (f"trl:{__name__}:ROWS", "is not a class or factory"),
    (f"trl:{__name__}:guess_count", "failed"),
    ("trl:no_such_pkg_xyz:Env", "module 'no_such_pkg_xyz' failed to import: ModuleNotFoundError"),
    ("trl:GuessEnv", "must be 'module:name'"),
])
def test_bad_specs_are_one_line_errors(name, says):
    with pytest.raises(EnvError) as exc:
        make(name)
    assert says in str(exc.value) and "\n" not in str(exc.value)


def test_the_adapter_never_imports_trl(data, monkeypatch):
    monkeypatch.setitem(sys.modules, "trl", None)
    env = make(NAME, data=data)
    env.reset(seed=0)
    assert env.step("guess(7)")[0] == "correct"


@pytest.mark.slow
def test_creditflow_train_on_a_trl_environment(train_cli, data):
    code, rows, _ = train_cli(NAME, f"env.kwargs.data={data}", "env.kwargs.max_steps=3",
                              "env.success_threshold=0.5", algo="grpo")
    assert code == 0 and max(r["step"] for r in rows) == 2 and "train/score" in rows[-1]


# --------------------------------------------------------------------------------------------------
# issue 74 part 3: what creditflow reads from the class is read here as CreditGRPOTrainer reads it
# --------------------------------------------------------------------------------------------------


class KeyedWalk:
    """A class written per docs/trl.md: a tool, TRL's get_reward, and creditflow's reads (state_key, success as a
    property, expert_actions)."""

    def reset(self, **kwargs) -> str:
        self.pos = 0
        return "Start at 0; the goal is at 2."

    def move(self, d: str) -> str:
        """Move one cell.

        Args:
            d: r or l
        """
        self.pos = max(0, self.pos + (1 if d == "r" else -1))
        return f"at {self.pos}"

    def get_reward(self) -> float:
        return 0.25  # not the outcome: success is

    def state_key(self) -> str:
        return f"pos={self.pos}"

    @property
    def success(self) -> bool:
        return self.pos == 2

    def expert_actions(self) -> list:
        return ["move(d='r')", {"name": "move", "arguments": {"d": "r"}}]


class MethodOutcome(KeyedWalk):
    def success(self) -> bool:  # a method works as well as a property
        return self.pos == 1


def test_creditflow_reads_are_no_tools_and_give_state_outcome_and_expert():
    env = make(f"trl:{__name__}:KeyedWalk")
    assert list(env._tools) == ["move"]
    obs, info = env.reset(seed=0)
    assert "state_key" not in info["task"] and "expert" not in info["task"] and "success" not in info["task"]
    assert info["state_key"] == "pos=0"  # the class's key, not the observation text
    assert env.step("state_key()")[0] == "{'error': 'Tool state_key not found.'}"  # not callable by the policy
    plan = env.expert_actions()
    assert plan == ["move(d='r')", '{"name": "move", "arguments": {"d": "r"}}']
    keys = [env.step(a)[4]["state_key"] for a in plan]
    *_, info = env.step("done")
    assert keys == ["pos=1", "pos=2"] and info["won"] is True and info["score"] == 0.25
    method = make(f"trl:{__name__}:MethodOutcome")
    method.reset(seed=0)
    method.step("move(d='r')")
    assert method.step("done")[4]["won"] is True


def test_the_state_key_option_still_wins(data):
    env = make(f"trl:{__name__}:KeyedWalk", state_key=f"{__name__}:position_word")
    assert env.reset(seed=0)[1]["state_key"] == "at cell 0"


def position_word(observation, env):
    return f"at cell {env.pos}"


def test_a_trl_module_in_the_current_directory_is_found_as_for_module_class(tmp_path, monkeypatch):
    """`--env trl:module:Class` finds ./module.py like `--env module:Class` does (one shared import)."""
    (tmp_path / "cwd_trl_env_xyz.py").write_text(
        "class Walk:\n"
        "    def reset(self, **kwargs):\n        return 'start'\n"
        "    def move(self, d: str) -> str:\n        '''Move.'''\n        return 'moved'\n"
        "    def get_reward(self):\n        return 1.0\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(tmp_path))])
    monkeypatch.delitem(sys.modules, "cwd_trl_env_xyz", raising=False)
    env = make("trl:cwd_trl_env_xyz:Walk")
    assert env.reset(seed=0)[0] == "start" and env.step("move(d='r')")[0] == "moved"
    with pytest.raises(EnvError) as exc:  # and a module that is nowhere is still one line
        make("trl:cwd_missing_xyz:Walk")
    assert "module 'cwd_missing_xyz' failed to import: ModuleNotFoundError" in str(exc.value)
