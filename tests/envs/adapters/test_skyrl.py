"""SkyRL-Gym adapter: SkyRL's own gsm8k envs (single and multi-turn) on rows of a SkyRL dataset file, a
BaseTextEnv subclass by module:Class, the protocol, the engine, and `creditflow train`."""

import functools
import sys

import pytest

from creditflow import credit
from creditflow.envs import EnvError, check_determinism, env_options, make, replay
from creditflow.envs.base import INFO_KEYS, INVALID_ACTION_PREFIX

skyrl_gym = pytest.importorskip("skyrl_gym")
from skyrl_gym.envs.base_text_env import BaseTextEnv, BaseTextEnvStepOutput  # noqa: E402

from tests.envs.adapters.conftest import scripted_rollouts, write_jsonl  # noqa: E402

QUESTION = "Tom has 3 apples and buys 4 more. How many apples does he have? Output the answer after \"####\"."
ROWS = [  # SkyRL's gsm8k rows (examples/train/gsm8k/gsm8k_dataset.py): prompt, env_class, reward_spec, extra_info
    {"data_source": "openai/gsm8k", "prompt": [{"role": "user", "content": QUESTION}], "env_class": "gsm8k",
     "reward_spec": {"method": "rule", "ground_truth": "7"}, "extra_info": {"split": "train", "index": 0}},
    {"data_source": "openai/gsm8k",
     "prompt": [{"role": "system", "content": "Answer after ####."},
                {"role": "user", "content": "A box holds 6 eggs. How many eggs are in 2 boxes?"}],
     "env_class": "gsm8k", "reward_spec": {"method": "rule", "ground_truth": "12"},
     "extra_info": {"split": "train", "index": 1}},
]
MULTI = "skyrl:gsm8k_multi_turn"


@pytest.fixture
def data(tmp_path):
    return write_jsonl(tmp_path / "gsm8k.jsonl", ROWS)


class CountdownEnv(BaseTextEnv):
    """A SkyRL BaseTextEnv: say the numbers from extras["start"] down to 1, one a turn."""

    def __init__(self, env_config=None, extras={}):
        super().__init__()
        self.next = int(extras["start"])
        self.max_turns = extras["max_turns"]

    def step(self, action):
        self.turns += 1
        if action.strip() != str(self.next):
            return BaseTextEnvStepOutput(observations=[{"role": "user", "content": f"no: say {self.next}"}],
                                         reward=0.0, done=self.turns >= self.max_turns, metadata={})
        self.next -= 1
        done = self.next == 0 or self.turns >= self.max_turns
        obs = [] if done else [{"role": "user", "content": f"now {self.next}"}]
        return BaseTextEnvStepOutput(observations=obs, reward=1.0 if self.next == 0 else 0.0, done=done,
                                     metadata={"left": self.next})


def test_single_turn_gsm8k_scores_the_answer(data):
    env = make("skyrl:gsm8k", data=data)
    obs, info = env.reset(seed=0)
    assert obs == "" and info["task"] == QUESTION and set(INFO_KEYS) <= set(info)
    assert info["admissible_actions"] is None
    obs, reward, terminated, truncated, info = env.step("3 + 4 = 7 #### 7")
    assert (obs, reward, terminated, truncated) == ("", 1.0, True, False)
    assert info["score"] == 1.0 and info["won"] is False  # success is the run's env.success_threshold
    env.reset(seed=3)  # row 3 % 2 = 1: the system message joins the task
    assert env.step("#### 11")[1:3] == (0.0, True)
    assert make("skyrl:gsm8k", data=data).reset(seed=1)[1]["task"].startswith("Answer after ####.\n\n")


def test_multi_turn_gsm8k_gives_turn_feedback_until_the_answer(data):
    env = make(MULTI, data=data, max_steps=3)
    env.reset(seed=0)
    obs, reward, terminated, _, info = env.step("#### 8")  # well formatted, wrong: SkyRL's format score 0.2/3
    assert obs.startswith("Please provide your step-by-step reasoning") and not terminated
    assert reward == pytest.approx(0.2 / 3) and info["state_key"] == obs
    obs, reward, terminated, _, info = env.step(INVALID_ACTION_PREFIX + "####")  # never reaches the env
    assert not terminated and not info["action_valid"] and reward == 0.0
    obs, reward, terminated, truncated, info = env.step("#### 7")
    assert (obs, reward, terminated, truncated) == ("", 1.0, True, False)
    assert info["score"] == pytest.approx(1 + 0.2 / 3)  # the episode's return


def test_multi_turn_gsm8k_stops_at_max_steps(data):
    env = make(MULTI, data=data, max_steps=2)
    env.reset(seed=0)
    assert env.step("#### 1")[2:4] == (False, False)
    _, _, terminated, truncated, info = env.step("#### 2")  # SkyRL's max_turns (= max_steps) ends it
    assert terminated and not truncated and info["score"] == pytest.approx(2 * 0.2 / 2)


@pytest.mark.parametrize("action", [None, 7, ["#### 7"], INVALID_ACTION_PREFIX + "#### 7"])
def test_non_text_and_invalid_actions_never_reach_the_env(data, action):
    env = make("skyrl:gsm8k", data=data)
    env.reset(seed=0)
    obs, reward, terminated, truncated, info = env.step(action)
    assert (obs, reward, terminated, info["action_valid"]) == ("", 0.0, False, False)
    assert env.step("#### 7")[1] == 1.0  # the single turn is still to come


def test_a_base_text_env_by_module_and_class_with_state_key(tmp_path):
    data = write_jsonl(tmp_path / "countdown.jsonl", [{"prompt": "Count down.", "start": 3}])
    name = f"skyrl:{__name__}:CountdownEnv"
    env = make(name, data=data, state_key=lambda observation, native: f"next={native.next}")
    _, info = env.reset(seed=0)
    assert info["state_key"] == "next=3" and info["task"] == "Count down."
    obs, _, _, _, info = env.step("3")
    assert obs == "now 2" and info["state_key"] == "next=2" and info["skyrl_metadata"] == {"left": 2}
    env.step("5")
    env.step("2")
    obs, reward, terminated, _, info = env.step("1")
    assert terminated and reward == 1.0 and info["score"] == 1.0
    check_determinism(lambda: make(name, data=data), seed=0, actions=["3", "x", "2", "1"])
    plain = make(name, data=data)
    first, _ = plain.reset(seed=0)
    seen = [first, plain.step("3")[0], plain.step("x")[0]]
    assert replay(make(name, data=data), 0, ["3", "x"], seen).observation == "no: say 2"


def test_parquet_rows_as_skyrl_writes_them(tmp_path):
    pq = pytest.importorskip("pyarrow.parquet")
    import pyarrow as pa

    path = tmp_path / "train.parquet"
    pq.write_table(pa.Table.from_pylist(ROWS), path)
    env = make("skyrl:gsm8k", data=str(path))
    assert env.reset(seed=1)[1]["task"].endswith("How many eggs are in 2 boxes?")
    assert env.step("#### 12")[1] == 1.0


def test_engine_rollouts_and_credit_on_multi_turn_gsm8k(data):
    factory = functools.partial(make, MULTI, data=data, max_steps=3)
    right, wrong = scripted_rollouts(factory, [["#### 5", "#### 7"], [None, "#### 9", "#### 8"]], seed=0)
    assert right.score == pytest.approx(1 + 0.2 / 3) and [s.valid for s in wrong.steps] == [False, True, True]
    assert wrong.score == pytest.approx(2 * 0.2 / 3)
    credit.compute("grpo", [right, wrong])
    assert right.steps[0].advantage > 0 > wrong.steps[0].advantage


def test_options_are_listed():
    assert list(env_options(MULTI)) == ["data", "env_config", "state_key", "max_steps"]


@pytest.mark.parametrize("name, kwargs, says", [
    ("skyrl:gsm8k", {}, "needs its tasks: env.kwargs.data="),
    ("skyrl:no_such_env", {"data": "DATA"}, "skyrl_gym has no env 'no_such_env'; registered: aime"),
    ("skyrl:gsm8k", {"data": "/no/such/file.jsonl"}, "no file"),
    ("skyrl:gsm8k", {"data": "DATA", "max_steps": 0}, "max_steps must be an integer >= 1"),
    ("skyrl:text2sql", {"data": "DATA"}, "cannot be made for this task"),
    ("skyrl:tests.nowhere:Env", {"data": "DATA"}, "failed to import"),
])
def test_bad_specs_and_options_are_one_line_errors(data, name, kwargs, says):
    kwargs = {k: data if v == "DATA" else v for k, v in kwargs.items()}
    with pytest.raises(EnvError) as exc:
        make(name, **kwargs).reset(seed=0)
    assert says in str(exc.value) and "\n" not in str(exc.value)


def test_rows_without_a_prompt_are_refused(tmp_path):
    data = write_jsonl(tmp_path / "bad.jsonl", [{"question": "?"}])
    with pytest.raises(EnvError, match="row 1 has no 'prompt'"):
        make("skyrl:gsm8k", data=data)


def test_missing_skyrl_gym_is_one_clear_line(monkeypatch, data):
    monkeypatch.setitem(sys.modules, "skyrl_gym", None)
    with pytest.raises(EnvError, match=r"pip install 'creditflow\[skyrl\]'"):
        make("skyrl:gsm8k", data=data)


@pytest.mark.slow
def test_creditflow_train_on_skyrl_gsm8k_multi_turn(train_cli, data):
    code, rows, _ = train_cli(MULTI, f"env.kwargs.data={data}", "env.kwargs.max_steps=3",
                              "env.success_threshold=1.0", algo="gigpo")
    assert code == 0 and max(r["step"] for r in rows) == 2 and "train/score" in rows[-1]
