"""verifiers adapter: verifiers' own GymEnv (FrozenLake) loaded by env id as the Environments Hub loads one, a
MultiTurnEnv that ends with final_env_response, rubric scores, truncation, splits, the protocol, the engine, and
`creditflow train`."""

import functools
import signal
import sys

import pytest

from creditflow import credit
from creditflow.envs import EnvError, check_determinism, env_options, make, replay
from creditflow.envs.base import INFO_KEYS, INVALID_ACTION_PREFIX

vf = pytest.importorskip("verifiers")
pytest.importorskip("gymnasium")
from datasets import Dataset  # noqa: E402

from tests.envs.adapters.conftest import scripted_rollouts  # noqa: E402

LAKE = "verifiers:tests.envs.adapters.vf_frozen_lake"  # an env id: verifiers.load_environment imports it
PATH = ["down", "down", "right", "right", "down", "right"]
GUESS = f"verifiers:{__name__}:guess_environment"


class GuessEnv(vf.MultiTurnEnv):
    """Guess the number; the env says higher or lower, and ends the rollout itself when it is found."""

    async def env_response(self, messages, state, **kwargs):
        guess = (messages[-1].content or "").strip()
        if guess == state["answer"]:
            state["final_env_response"] = [vf.UserMessage(content="correct")]
            return state["final_env_response"]
        hint = "higher" if guess.isdigit() and int(guess) < int(state["answer"]) else "lower"
        return [vf.UserMessage(content=hint)]


def solved_fast(state, answer) -> float:
    """1 / turns when the last guess was right."""
    last = state["trajectory"][-1]["completion"][-1].content.strip()
    return 1.0 / len(state["trajectory"]) if last == answer else 0.0


def guess_environment(max_turns: int = 4):
    rows = [{"question": f"Guess my number from 1 to 9 (try {i}).", "answer": str(3 + i)} for i in range(3)]
    return GuessEnv(dataset=Dataset.from_list(rows), eval_dataset=Dataset.from_list(rows[:1]),
                    system_prompt="Answer with one number.", rubric=vf.Rubric(funcs=[solved_fast]),
                    max_turns=max_turns)


def group_scored_environment():
    def best_of_group(states) -> list[float]:
        return [1.0 for _ in states]

    return GuessEnv(dataset=Dataset.from_list([{"question": "?", "answer": "1"}]),
                    rubric=vf.Rubric(funcs=[best_of_group]))


def test_gym_env_by_env_id_plays_frozen_lake_and_the_rubric_scores_it():
    env = make(LAKE)
    assert env.max_steps == 8  # the environment's max_turns
    obs, info = env.reset(seed=0)
    assert obs == "" and set(INFO_KEYS) <= set(info) and info["admissible_actions"] is None
    assert info["task"].startswith("Walk on FrozenLake") and info["task"].endswith("\n\n0")
    seen = [env.step(a)[0] for a in PATH]
    assert seen == ["4", "8", "9", "10", "14", "15\nEpisode already ended."]  # GymEnv's own texts
    # GymEnv notices the end only after asking the model once more (its stop condition runs at the next turn)
    obs, reward, terminated, truncated, info = env.step("up")
    assert (obs, reward, terminated, truncated) == ("", 1.0, True, False)
    assert info["score"] == 1.0 and info["won"] is False and info["stop_condition"] == "is_done"


def test_final_env_response_ends_the_episode_and_the_rubric_scores_it():
    env = make(GUESS)
    obs, info = env.reset(seed=1)  # row 1: answer 4
    assert info["task"] == "Answer with one number.\n\nGuess my number from 1 to 9 (try 1)."
    assert env.step("2")[:4] == ("higher", 0.0, False, False)
    obs, reward, terminated, truncated, info = env.step("4")
    assert (obs, terminated, truncated) == ("correct", True, False)
    assert reward == info["score"] == 0.5 and info["stop_condition"] == "has_final_env_response"


def test_the_environments_max_turns_and_creditflows_max_steps_end_it_scored_as_it_stands():
    env = make(GUESS, env_args={"max_turns": 2})
    env.reset(seed=0)
    env.step("1")
    obs, reward, terminated, truncated, info = env.step("3")  # the env's own stop (max_turns) comes before
    assert terminated and info["stop_condition"] == "max_turns_reached"  # env_response, so no "correct",
    assert obs == "" and reward == info["score"] == 0.5  # but its rubric reads the last answer
    env = make(GUESS, max_steps=2)
    env.reset(seed=0)
    env.step("1")
    obs, reward, terminated, truncated, info = env.step("2")  # cut by creditflow: rollout cancelled, scored
    assert (terminated, truncated, reward, info["score"]) == (False, True, 0.0, 0.0)
    env.reset(seed=0)  # the next episode starts clean
    assert env.step("3")[1:3] == (1.0, True)


@pytest.mark.parametrize("action", [None, 3, ["3"], INVALID_ACTION_PREFIX + "3"])
def test_invalid_and_non_text_actions_do_not_answer_the_model_call(action):
    env = make(GUESS)
    env.reset(seed=0)
    obs, reward, terminated, _, info = env.step(action)
    assert (obs, reward, terminated, info["action_valid"]) == ("", 0.0, False, False)
    _, reward, terminated, _, _ = env.step("3")  # the same model call, answered now: first turn in the rollout
    assert terminated and reward == 1.0


def test_test_split_plays_the_eval_dataset():
    env = make(GUESS, split="test")
    assert env.reset(seed=5)[1]["task"].endswith("(try 0).")


def test_deterministic_and_replayable():
    check_determinism(lambda: make(LAKE), seed=2, actions=["down", "right", "down", "jump", "down"])
    env = make(GUESS)
    first, _ = env.reset(seed=2)
    seen = [first, env.step("9")[0], env.step("1")[0]]
    assert replay(make(GUESS), 2, ["9", "1"], seen).observation == "higher"


def test_state_key_function_gets_the_rollout_state():
    env = make(GUESS, state_key=lambda observation, state: f"turn {len(state['trajectory'])}")
    assert env.reset(seed=0)[1]["state_key"] == "turn 0"
    assert env.step("1")[4]["state_key"] == "turn 1"


def test_engine_rollouts_and_credit():
    factory = functools.partial(make, GUESS)
    fast, slow, lost = scripted_rollouts(factory, [["5"], ["9", "5"], ["1", None, "2", "3"]], seed=2)
    assert (fast.score, slow.score, lost.score) == (1.0, 0.5, 0.0)
    assert [s.observation for s in slow.steps] == ["", "lower"] and lost.steps[1].valid is False
    credit.compute("grpo", [fast, slow, lost], reward_source="score")
    assert fast.steps[0].advantage > slow.steps[0].advantage > lost.steps[0].advantage


def test_options_are_listed():
    assert list(env_options(GUESS)) == ["env_args", "split", "state_key", "max_steps"]


@pytest.mark.parametrize("name, kwargs, says", [
    ("verifiers:no_such_env_package_xyz", {}, "Could not import 'no_such_env_package_xyz'"),
    (f"verifiers:{__name__}:group_scored_environment", {}, "group reward functions"),
    (f"verifiers:{__name__}:solved_fast", {}, "raised TypeError"),
    (f"verifiers:{__name__}:PATH", {}, "is not an Environment, nor a function or class"),
    (GUESS, {"split": "dev"}, "option split must be one of 'train', 'test'"),
    (GUESS, {"env_args": {"no_such_arg": 1}}, "no_such_arg"),
])
def test_bad_specs_and_options_are_one_line_errors(name, kwargs, says):
    with pytest.raises(EnvError) as exc:
        make(name, **kwargs)
    assert says in str(exc.value) and "\n" not in str(exc.value)


def test_the_process_keeps_its_signal_handlers():
    def ours(signum, frame):
        pass

    previous = signal.signal(signal.SIGTERM, ours)
    try:
        make(GUESS, env_args={"max_turns": 5})  # building a verifiers Environment installs its own handlers
        assert signal.getsignal(signal.SIGTERM) is ours
    finally:
        signal.signal(signal.SIGTERM, previous)


def test_missing_verifiers_is_one_clear_line(monkeypatch):
    monkeypatch.setitem(sys.modules, "verifiers", None)
    with pytest.raises(EnvError, match=r"pip install 'creditflow\[verifiers\]'"):
        make(GUESS)


@pytest.mark.slow
def test_creditflow_train_on_a_verifiers_environment(train_cli):
    code, rows, _ = train_cli(LAKE, "env.kwargs.max_steps=3", "env.success_threshold=1.0")
    assert code == 0 and max(r["step"] for r in rows) == 2 and "train/score" in rows[-1]
