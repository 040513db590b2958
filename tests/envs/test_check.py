"""``creditflow envs check``: each protocol rule passes on an env that keeps it and fails, naming what, on one
that breaks it."""

import pytest

from creditflow import envs
from creditflow.cli import main
from creditflow.envs.check import check_env, first_reset_problem, info_problem
from tests.envs import plugin_envs as p


def results(cls, **kwargs):
    return {c.name: c for c in check_env(lambda: cls(**kwargs))}


def test_an_env_that_keeps_the_protocol_passes_every_check():
    checks = results(p.CutWalk)
    assert list(checks) == ["name and max_steps", "reset/step values and info keys", "determinism",
                            "snapshot/restore or replay", "state_key", "invalid actions", "expert", "truncate",
                            "episode length"]
    assert {c.status for c in checks.values()} == {"pass"}, checks
    assert checks["truncate"].detail == "after step 1 it ends the episode: reward 0, score 0, won False"
    assert checks["episode length"].detail == "at most 6 turns an episode (warns above 30)"


@pytest.mark.parametrize("name", ["sokoban", "sql", "webshop"])
def test_the_builtin_envs_pass(name, creditflow_cache, monkeypatch):
    monkeypatch.setenv("CREDITFLOW_CACHE", str(creditflow_cache))
    checks = check_env(envs.factory(name))
    assert not [c for c in checks if c.status == "fail"], checks


@pytest.mark.parametrize("cls,check,needle", [
    (p.NoMaxSteps, "name and max_steps", "max_steps is None: an env needs a turn limit"),
    (p.BadScore, "reset/step values and info keys", "seed 0, reset: info['score'] must be a finite number, got 'high'"),
    (p.NoStateKey, "reset/step values and info keys", "info has no 'state_key' key"),
    (p.Flaky, "determinism", "seed 0: env not deterministic at step 0"),
    (p.BadRestore, "snapshot/restore or replay", "seed 0: restore() at step 2 gives another state than the episode had"),
    (p.UnstableKey, "state_key", "replaying the same actions gives another state_key at step 0"),
    (p.ExecutesInvalid, "invalid actions", "an action starting with '<invalid>' (what the engine sends for an "
                                           "unparseable response) must be action_valid=False"),
    (p.CrashesOnNonText, "invalid actions", "seed 0, step 0 (None): step() raised AttributeError"),
    (p.LosingExpert, "expert", "the expert's plan reaches won on 0 of 3 seed(s): SFT would have no demonstration"),
    (p.BadTruncate, "truncate", "seed 0, after step 1: truncate() must return (reward, info), got {'task': 'walk"),
    (p.MovingTruncate, "truncate", "seed 0: truncate() changed the state_key; it ends the episode where it stands"),
])
def test_a_broken_rule_fails_its_check_and_says_what(cls, check, needle):
    got = results(cls)[check]
    assert got.status == "fail" and needle in got.detail, got


def test_what_is_not_wrong_but_worth_knowing_is_a_warning_or_a_skip():
    assert results(p.EmptyKeys)["state_key"].status == "warn"
    assert "rl.credit.state_fn=observation" in results(p.EmptyKeys)["state_key"].detail
    expert = results(p.NoExpert)["expert"]
    assert expert.status == "skip" and "train from a given --model" in expert.detail
    told = results(p.WalkEnv)["truncate"]  # the hook is optional
    assert told.status == "skip" and "no truncate(): an episode that rollout.max_steps cuts" in told.detail


def test_episodes_that_can_run_long_are_a_warning_that_says_the_cost_and_the_cure():
    # above 30 turns (twice the built-in Sokoban's 15), an untrained policy's episodes make a training step costly
    long = results(p.LongWalk)["episode length"]
    assert long.status == "warn", long
    assert long.detail.startswith("episodes can run 40 turns (the episodes played here: at most 4): an episode "
                                  "that does not end sooner, as an untrained policy's, costs 40 generations, and a "
                                  "training step at the default 8 x 8 rollouts up to 2,560; shorten them with "
                                  "rollout.max_steps=N")
    assert results(p.WalkEnv, max_steps=30)["episode length"].status == "pass"  # the threshold itself passes
    assert results(p.WalkEnv, max_steps=31)["episode length"].status == "warn"


def test_an_env_without_snapshots_is_checked_by_verified_replay():
    class NoSnapshot(p.WalkEnv):
        snapshot = restore = None

    check = results(NoSnapshot)["snapshot/restore or replay"]
    assert check.status == "pass" and "verified replay" in check.detail


def test_the_quick_checks_of_a_run():
    assert first_reset_problem(p.WalkEnv()) is None
    assert first_reset_problem(p.NoStateKey()) == "first reset: info has no 'state_key' key (every info needs task, " \
                                                  "admissible_actions, action_valid, won, score, state_key)"
    assert info_problem({"task": 1}) == "info['task'] must be a string, got 1"


def run(argv, capsys):
    with pytest.raises(SystemExit) as exc:
        main(argv)
    return exc.value.code, capsys.readouterr()


def test_the_command_prints_a_table_and_exits_1_on_a_failure(capsys):
    code, out = run(["envs", "check", "tests.envs.plugin_envs:WalkEnv", "length=2", "--seeds", "2"], capsys)
    assert code == 0
    assert "envs check tests.envs.plugin_envs:WalkEnv" in out.out and "determinism" in out.out
    assert out.out.count("pass") == 8 and "truncate" in out.out and "episode length" in out.out  # truncate: skip
    code, out = run(["envs", "check", "tests.envs.plugin_envs:Flaky"], capsys)
    assert code == 1 and "FAIL" in out.out
    assert out.err.strip() == "2 check(s) failed: determinism, snapshot/restore or replay"


def test_the_command_takes_options_and_refuses_bad_ones_in_one_line(capsys):
    code, out = run(["envs", "check", "sokoban", "size=abc"], capsys)
    assert code == 2 and out.err.strip() == "error: env 'sokoban': option size must be an integer, got 'abc'"
    code, out = run(["envs", "check", "sokoban", "size=5", "--seeds", "1"], capsys)
    assert code == 0


def test_a_run_checks_what_truncate_returns_and_names_the_rule():
    from creditflow.envs.checked import CheckedEnv, EnvRuleError

    env = CheckedEnv(p.BadTruncate(), "walk", "env 'walk'")
    env.reset(seed=0)
    env.step("right")
    with pytest.raises(EnvRuleError, match=r"^env 'walk': task walk/0, step 1, truncate: truncate\(\) must return "
                                           r"\(reward, info\), got \{'task'"):
        env.truncate()
    good = CheckedEnv(p.CutWalk(), "walk", "env 'walk'")
    good.reset(seed=0)
    good.step("right")
    assert good.truncate()[0] == 0.25  # one step of a walk of 4
    assert not hasattr(CheckedEnv(p.WalkEnv(), "walk", "env 'walk'"), "truncate")  # only where the env has it
