"""verifiers 0.4 adapter, with the real verifiers 0.4 in .venv-verifiers (make verifiers; elsewhere skipped): a 0.4
environment written with verifiers' own classes (tests/envs/adapters/vf04/creditflow_guess: a Taskset, an Env whose
run() is the rollout loop, a Task with a @vf.reward and a @vf.stop, an in-process Harness), loaded by its taskset id
as `vf eval` loads one, run episode by episode (verifiers' interception server, its client, its limits and its
reward scoring unchanged), and trained by `creditflow train` at a tiny budget."""

import sys
from pathlib import Path

import pytest

from creditflow.envs import EnvError, adapters, check_determinism, env_options, make, replay
from creditflow.envs.base import INFO_KEYS, INVALID_ACTION_PREFIX

if adapters.verifiers_adapter() != adapters.VERIFIERS_04:  # the main env has verifiers 0.3.x
    pytest.skip("needs verifiers 0.4 (.venv-verifiers: make verifiers)", allow_module_level=True)

GUESS = "verifiers:creditflow-guess"  # its taskset id: the package tests/envs/adapters/vf04/creditflow_guess
TASK = "Answer with one number.\n\nGuess my number from 1 to 9 (try {})."


@pytest.fixture(autouse=True, scope="module")
def installed():
    """The environment package importable, as installing it would make it."""
    folder = str(Path(__file__).parent / "vf04")
    sys.path.insert(0, folder)
    yield
    sys.path.remove(folder)


def test_the_0_4_adapter_serves_verifiers_and_lists_its_options():
    assert adapters.ADAPTERS["verifiers"] == adapters.VERIFIERS_04
    assert set(env_options(GUESS)) == {"env_args", "env_config", "state_key", "max_steps"}


def test_the_envs_own_loop_runs_and_its_reward_scores_the_episode():
    env = make(GUESS)
    assert env.max_steps == 10  # no max_turns anywhere: the default, and verifiers' limit too
    obs, info = env.reset(seed=1)  # task 1: answer 4
    assert obs == "" and set(INFO_KEYS) <= set(info) and info["task"] == TASK.format(1)
    assert env.step("2")[:4] == ("higher", 0.0, False, False)  # GuessEnv.run's reply, through the interaction
    assert env.step("7")[:4] == ("lower", 0.0, False, False)
    obs, reward, terminated, truncated, info = env.step("4")
    assert (obs, terminated, truncated) == ("", True, False)
    assert reward == info["score"] == pytest.approx(1 / 3)  # GuessTask.solved_fast: 1 / guesses
    assert info["won"] is False and "errors" not in info
    env.close()


def test_a_harness_that_asks_for_whole_completions_gets_them():
    env = make(GUESS, env_config={"agent": {"harness": {"id": "creditflow-guess", "stream": False}}})
    env.reset(seed=0)
    assert env.step("9")[0] == "lower"
    assert env.step("3")[1:3] == (0.5, True)
    env.close()


def test_a_stop_condition_and_verifiers_turn_limit_end_the_episode():
    env = make(GUESS)
    env.reset(seed=0)
    obs, reward, terminated, truncated, info = env.step("quit")  # GuessTask.said_quit (@vf.stop)
    assert (terminated, reward, info["stop_condition"]) == (True, 0.0, "said_quit")
    short = make(GUESS, max_steps=2)  # the agent's max_turns: verifiers refuses the third turn
    assert short.max_steps == 2
    short.reset(seed=0)
    assert short.step("1")[:3] == ("higher", 0.0, False)
    obs, reward, terminated, truncated, info = short.step("2")
    assert (terminated, truncated, reward, info["stop_condition"]) == (True, False, 0.0, "max_turns")


def test_env_args_are_the_tasksets_config_and_seeds_wrap():
    env = make(GUESS, env_args={"tasks": 1})
    env.reset(seed=2)  # one task: seed 2 plays task 0 (answer 3)
    obs, reward, terminated, truncated, info = env.step("3")
    assert terminated and reward == 1.0


def test_deterministic_replayable_and_invalid_actions_leave_the_call_unanswered():
    check_determinism(lambda: make(GUESS), seed=2, actions=["1", "<invalid>", "9", "5"])
    env = make(GUESS)
    seen = [env.reset(seed=2)[0], env.step("9")[0], env.step("1")[0]]
    assert seen[1:] == ["lower", "higher"]
    assert replay(make(GUESS), 2, ["9", "1"], seen).observation == "higher"
    obs, reward, terminated, truncated, info = env.step(INVALID_ACTION_PREFIX + " no action")
    assert (obs, terminated, info["action_valid"]) == ("higher", False, False)  # the model call still waits
    assert env.step("5")[2] is True  # and the next action answers it: 3 guesses
    env.close()


def test_state_key_function_gets_the_model_calls_messages():
    env = make(GUESS, state_key=lambda observation, messages: f"{len(messages)} messages")
    assert env.reset(seed=0)[1]["state_key"] == "2 messages"  # system, user
    assert env.step("1")[4]["state_key"] == "4 messages"  # + the answer, the env's reply


def test_errors_are_one_line():
    for name, options, match in [("verifiers:no-such-env", {}, "could not load it"),
                                 (GUESS, {"env_args": {"no_such_field": 1}}, "could not load it"),
                                 (GUESS, {"env_config": []}, "env_config must be dict")]:
        with pytest.raises(EnvError, match=match) as exc:
            make(name, **options)
        assert "\n" not in str(exc.value)


def test_creditflow_train_runs_a_verifiers_0_4_environment(train_cli):
    code, rows, _ = train_cli(GUESS, "env.kwargs.max_steps=3", "env.success_threshold=0.5")
    assert code == 0 and max(r["step"] for r in rows) == 2 and "train/score" in rows[-1]
    assert all(0.0 <= r["train/score"] <= 1.0 for r in rows if "train/score" in r)
