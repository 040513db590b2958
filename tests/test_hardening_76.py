"""Issue 76 (hardening, round 3): a user's env that misbehaves mid-run, option values taken literally, errors of
the types the API promises, checkpoint manifests of the wrong shape, and what round 2's probes still found."""

import json

import pytest
import torch

from creditflow.trainer.checkpoint import checkpoint_problem, checkpoint_step, resume_checkpoint, write_manifest

# --------------------------------------------------------------------------------------------------
# class 4: a checkpoint manifest of the wrong shape is damage, and --resume falls back
# --------------------------------------------------------------------------------------------------


def _checkpoint(root, step):
    path = root / "checkpoints" / f"step_{step:06d}"
    path.mkdir(parents=True)
    torch.save({}, path / "optimizer.pt")
    torch.save({"step": step, "world_size": 1}, path / "trainer_state.pt")
    (path / "config.json").write_text("{}")
    write_manifest(path, step)
    return path


def _edit(manifest, change):
    data = json.loads(manifest.read_text())
    change(data)
    manifest.write_text(json.dumps(data))


WRONG_SHAPES = {
    "files a list": lambda m: m.update(files=[]),
    "files a string": lambda m: m.update(files="all"),
    "no files": lambda m: m.pop("files"),
    "step a string": lambda m: m.update(step="2"),
    "step negative": lambda m: m.update(step=-1),
    "a size that is text": lambda m: m["files"]["config.json"].update(bytes="2"),
    "a size that is a float": lambda m: m["files"]["config.json"].update(bytes=2.0),
    "a file without its hash": lambda m: m["files"]["config.json"].pop("sha256"),
    "a hash that is a number": lambda m: m["files"]["config.json"].update(sha256=5),
    "facts a list": lambda m: m["files"].update({"config.json": [2, "ab"]}),
    "a file outside the checkpoint": lambda m: m["files"].update({"../x": m["files"]["config.json"]}),
    "no loop state listed": lambda m: m["files"].pop("trainer_state.pt"),
    "another format": lambda m: m.update(format="creditflow-checkpoint/9"),
    "an unknown key": lambda m: m.update(extra=1),
    "the top level a list": lambda m: m.clear(),
}


@pytest.mark.parametrize("shape", sorted(WRONG_SHAPES))
def test_a_manifest_of_the_wrong_shape_is_damage_and_resume_takes_the_previous_checkpoint(shape, tmp_path):
    _checkpoint(tmp_path, 1)
    newest = _checkpoint(tmp_path, 2)
    assert checkpoint_problem(newest) is None
    if shape == "the top level a list":
        (newest / "manifest.json").write_text("[]")
    else:
        _edit(newest / "manifest.json", WRONG_SHAPES[shape])
    problem = checkpoint_problem(newest)
    assert problem == "manifest.json is unreadable or not a checkpoint manifest"
    found = resume_checkpoint(tmp_path)
    assert found.path.name == "step_000001" and found.step == 1
    assert "step_000002: manifest.json is unreadable or not a checkpoint manifest" in found.note()
    assert checkpoint_step(newest) == 2  # the step is then read from trainer_state.pt


def test_a_manifest_without_optimizer_state_is_a_weights_only_checkpoint_resume_falls_back_to(tmp_path):
    """checkpoint.optimizer=newest: the checkpoints before the newest list no optimizer.pt (issue 90). That is no
    damage: a resume falls back to such a one when the newest is damaged, and says that AdamW starts afresh."""
    from creditflow.trainer.checkpoint import drop_optimizer_state, has_optimizer_state

    older = _checkpoint(tmp_path, 1)
    newest = _checkpoint(tmp_path, 2)
    assert drop_optimizer_state(older) and not (older / "optimizer.pt").exists()
    assert checkpoint_problem(older) is None and not has_optimizer_state(older) and has_optimizer_state(newest)
    assert not drop_optimizer_state(older)  # nothing left to drop
    (newest / "config.json").write_text("{ }")
    found = resume_checkpoint(tmp_path)
    assert found.path == older and "AdamW's moments start afresh" in found.note()


# --------------------------------------------------------------------------------------------------
# class 1: a user's env that misbehaves after the first reset. Every value it returns is checked on every step:
# a broken rule is one line naming the env, the task, the step and the rule (the one `envs check` prints), exit 2,
# and the run is removed (or kept resumable from its checkpoint).
# --------------------------------------------------------------------------------------------------

import os  # noqa: E402
import re  # noqa: E402

from creditflow.cli import main  # noqa: E402
from creditflow.envs.check import check_env  # noqa: E402
from creditflow.trainer.metrics import read_metrics  # noqa: E402
from tests.envs import plugin_envs as p  # noqa: E402

ENV = "tests.envs.plugin_envs:Misbehaves"
RULES = {  # what the line says the env did (as `envs check` says it)
    "raises": "step() raised RuntimeError: the database connection dropped",
    "four-tuple": "step() must return (observation, reward, terminated, truncated, info), got a tuple of 4 value(s)",
    "list state_key": "info['state_key'] must be a string (not starting with NUL, which creditflow's own graph "
                      "nodes do), got [",
    "nul state_key": "info['state_key'] must be a string (not starting with NUL",
    "nan reward": "step() returned a reward nan, not a finite number",
    "inf reward": "step() returned a reward inf, not a finite number",
    "no won": "info has no 'won' key",
    "bytes observation": "step() returned an observation of type bytes, not a string",
    "info not a dict": "info is list, not a dict",
    "reward text": "step() returned a reward '0.0', not a finite number",
    "reset raises": "raised RuntimeError: the database connection dropped",
}


@pytest.mark.parametrize("fault", p.Misbehaves.FAULTS)
def test_envs_check_prints_the_rule_a_run_names(fault):
    p.Misbehaves.resets = 0
    checks = {c.name: c for c in check_env(lambda: p.Misbehaves(fault, episode=1, step=0 if fault == "reset raises"
                                                                     else 1))}
    got = checks["reset/step values and info keys"]
    assert got.status == "fail" and RULES[fault] in got.detail, got


FAST = ["generation.max_new_tokens=4", "tensorboard=false"]
COMMANDS = {  # each plays at least 7 episodes (the env's first-reset checks count as episodes 1 and 2)
    "train": ["train", "--env", ENV, "--model", "{tiny}", "--out", "{out}", "rl.steps=2", "rollout.tasks_per_step=1",
              "rollout.group_size=2", "rl.eval_episodes=1", *FAST],
    "sft": ["sft", "--env", ENV, "--model", "{tiny}", "--out", "{out}", "sft.demos=4", "sft.epochs=1", *FAST],
    "eval": ["eval", "--env", ENV, "--model", "{tiny}", "--episodes", "6", "--out", "{out}/trajs.jsonl",
             "generation.max_new_tokens=4"],
    "rro collect": ["rro", "collect", "--env", ENV, "--model", "{tiny}", "--out", "{out}", "--tasks", "2",
                    "--candidates", "2", "--mc-rollouts", "2", *FAST],
}
WHERE = {"step 1": (1, 1), "a later step": (1, 3), "a later episode": (7, 1)}  # (episode, step)
STEP_FAULTS = [f for f in p.Misbehaves.FAULTS if f != "reset raises"]
CASES = [(command, where, STEP_FAULTS[(i * 3 + j) % len(STEP_FAULTS)])  # every fault at least once
         for i, command in enumerate(COMMANDS) for j, where in enumerate(WHERE)]


def _run(argv, capsys):
    with pytest.raises(SystemExit) as exc:
        main(argv)
    err = capsys.readouterr().err
    return exc.value.code, err


@pytest.mark.parametrize("command, where, fault", CASES, ids=[f"{c}-{w}-{f}" for c, w, f in CASES])
def test_an_env_that_breaks_a_rule_mid_run_is_one_line_and_leaves_nothing(command, where, fault, tiny_model_dir,
                                                                          tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    episode, step = WHERE[where]
    out = tmp_path / "runs" / "x"
    argv = [a.format(tiny=tiny_model_dir, out=out) for a in COMMANDS[command]]
    argv += [f"env.kwargs.fault={fault}", f"env.kwargs.episode={episode}", f"env.kwargs.step={step}"]
    p.Misbehaves.resets = 0
    code, err = _run(argv, capsys)
    errors = [line for line in err.splitlines() if line.startswith("error: ")]
    assert code == 2 and len(errors) == 1 and "Traceback" not in err, err
    line = errors[0]
    assert re.search(rf"error: env '{ENV}': task {ENV}/\d+, step {step} \(action .*\): ", line), line
    assert RULES[fault] in line and f"(creditflow envs check {ENV} runs every check)" in line, line
    assert p.Misbehaves.resets >= episode
    if "finished task(s) are kept in" in line:  # rro collect after a saved task: the same command continues
        assert command == "rro collect" and (out / "preferences" / "tasks.jsonl").read_text().count("\n") >= 1
    else:
        assert not (tmp_path / "runs").exists(), os.listdir(tmp_path / "runs")  # a failed start leaves nothing


def test_a_reset_that_raises_in_a_later_episode_names_it(tiny_model_dir, tmp_path, capsys):
    p.Misbehaves.resets = 0
    code, err = _run(["eval", "--env", ENV, "--model", str(tiny_model_dir), "--episodes", "4",
                      "generation.max_new_tokens=4", "env.kwargs.fault=reset raises", "env.kwargs.episode=3",
                      "env.kwargs.step=0"], capsys)
    assert code == 2 and "Traceback" not in err, err
    assert re.search(rf"error: env '{ENV}': task {ENV}/\d+, reset: reset\(seed=\d+\) raised RuntimeError: the "
                     "database connection dropped", err), err


TRAIN = ["train", "--env", ENV, "--out", "{out}", "rollout.tasks_per_step=1", "rollout.group_size=2",
         "rl.eval_episodes=1", "rl.eval_every=0", *FAST]


def test_after_a_failed_start_the_same_command_runs(tiny_model_dir, tmp_path, capsys):
    out = tmp_path / "run"
    argv = [a.format(out=out) for a in TRAIN] + ["--model", str(tiny_model_dir), "rl.steps=1"]
    p.Misbehaves.resets = 0
    code, err = _run(argv + ["env.kwargs.fault=no won", "env.kwargs.episode=5"], capsys)
    assert code == 2 and "info has no 'won' key" in err and not out.exists(), err
    p.Misbehaves.resets = 0
    code, err = _run(argv + ["env.kwargs.fault=no won", "env.kwargs.episode=1000"], capsys)  # the env fixed
    assert code == 0, err
    assert [r["step"] for r in read_metrics(out / "metrics.jsonl")] == [0, 1]


def test_a_fault_after_a_checkpoint_keeps_the_run_resumable(tiny_model_dir, tmp_path, capsys):
    out = tmp_path / "run"
    argv = [a.format(out=out) for a in TRAIN] + ["--model", str(tiny_model_dir), "rl.steps=3", "rl.save_every=1"]
    p.Misbehaves.resets = 0  # two first-reset checks, the step-0 eval, two rollouts of step 1: step 2 breaks
    code, err = _run(argv + ["env.kwargs.fault=nan reward", "env.kwargs.episode=6"], capsys)
    errors = [line for line in err.splitlines() if line.startswith("error: ")]
    assert code == 2 and len(errors) == 1, err
    assert errors[0].endswith(f"; the run is kept at {out}/checkpoints/step_000001: after the fix, continue with "
                              f"creditflow train --resume {out}"), errors[0]
    p.Misbehaves.resets = 0
    code, err = _run(["train", "--resume", str(out), "env.kwargs.episode=1000"], capsys)
    assert code == 0, err
    assert [r["step"] for r in read_metrics(out / "metrics.jsonl")] == [0, 1, 2, 3]


def test_sft_finds_an_expert_without_won_before_it_builds_anything(tmp_path, capsys, monkeypatch):
    """Without --model, SFT builds the tiny policy: the env's fault is found first, and is the only line."""
    import creditflow.policy.factory as policy_factory

    def never(*args, **kwargs):
        raise AssertionError("the tiny policy was built before the env was known good")

    monkeypatch.setattr(policy_factory, "build_tiny_policy", never)
    p.Misbehaves.resets = 0
    code, err = _run(["sft", "--env", ENV, "--out", str(tmp_path / "run"), "sft.demos=3", "env.kwargs.fault=no won",
                      "env.kwargs.step=3"], capsys)
    assert code == 2 and err.count("\n") == 1 and "step 3 (action 'right'): info has no 'won' key" in err, err
    assert not (tmp_path / "run").exists()


def test_a_losing_expert_is_said_before_any_work(tmp_path, capsys):
    code, err = _run(["sft", "--env", "tests.envs.plugin_envs:LosingExpert", "--out", str(tmp_path / "run"),
                      "sft.demos=2"], capsys)
    assert code == 2 and err.count("\n") == 1, err
    assert "the expert reached the goal in none of the 2 demo episodes (sft.demos, seeds 500000..500001" in err
    assert not (tmp_path / "run").exists()


# --------------------------------------------------------------------------------------------------
# class 2: a named option's value is text, taken literally; key=value overrides keep their typed parsing; a key
# given twice in YAML is an error naming both lines
# --------------------------------------------------------------------------------------------------

from creditflow import api  # noqa: E402
from creditflow.config import build_config  # noqa: E402
from creditflow.errors import UserError  # noqa: E402


class Captured(Exception):
    def __init__(self, cfg):
        self.cfg = cfg


def _capture(monkeypatch):
    """Every command's entry point raises :class:`Captured` with the config the command built."""
    import creditflow.recipes.demo as demo

    def keep(config=None, *, overrides=(), **kwargs):  # the named options as the API takes them (_named)
        named = {k: kwargs[k] for k in ("model", "out", "algo", "curriculum") if k in kwargs}
        raise Captured(api.load_config(config, api._named(list(overrides), **named)))

    monkeypatch.setattr(api, "train", keep)
    monkeypatch.setattr(api, "sft", keep)
    monkeypatch.setattr(api, "rro", lambda cfg: (_ for _ in ()).throw(Captured(cfg)))
    monkeypatch.setattr(api, "evaluate", lambda cfg, **_: (_ for _ in ()).throw(Captured(cfg)))
    monkeypatch.setattr(api, "collect_preferences", keep)
    monkeypatch.setattr(api, "dpo", keep)
    monkeypatch.setattr(demo, "run_train", lambda cfg: (_ for _ in ()).throw(Captured(cfg)))


OPTIONS = {  # option -> the setting it names, per command that has it
    "--out": ("out_dir", ["train", "sft", "rro collect", "rro train", "rro run", "demo"]),
    "--model": ("policy.model", ["train", "sft", "eval", "rro collect", "rro train", "rro run"]),
    "--env": ("env.name", ["train", "sft", "eval", "rro collect", "rro train", "rro run", "demo"]),
    "--data": ("rro.data_dir", ["rro collect", "rro train"]),
    "--base-url": ("policy.base_url", ["eval", "rro collect"]),
    "--model-name": ("policy.model_name", ["eval", "rro collect"]),
    "--ray-address": ("rro.ray_address", ["rro collect", "rro run"]),
}
TEXTS = ["runs/my run #2", "2024", "a: b", "[x, y]", "gymnasium:", "null", "true", "{k: 1}", "1e-5"]
OPTION_CASES = [(command, option, text) for option, (_, commands) in OPTIONS.items() for command in commands
                for text in TEXTS]


@pytest.mark.parametrize("command, option, text", OPTION_CASES)
def test_a_named_options_value_is_taken_literally(command, option, text, monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    _capture(monkeypatch)
    key = OPTIONS[option][0]
    argv = [*command.split(), option, text]
    if command == "eval" and option != "--model":
        argv += ["--model", "m"]
    with pytest.raises(Captured) as got:
        main(argv)
    value = got.value.cfg
    for part in key.split("."):
        value = getattr(value, part)
    assert value == text and isinstance(value, str)
    assert not (tmp_path / "runs").exists()


def test_key_value_overrides_keep_their_typed_parsing():
    cfg = build_config(None, ["rl.steps=7", "env.kwargs={size: 6, describe_positions: true}", "rl.lr=1e-5"])
    assert cfg.rl.steps == 7 and cfg.env.kwargs == {"size": 6, "describe_positions": True} and cfg.rl.lr == 1e-5


@pytest.mark.parametrize("text, lines", [
    ("rl:\n  eval_every: 1\n  steps: 2\n  eval_every: 7\n", (2, 4)),
    ("seed: 1\nrl:\n  steps: 2\nseed: 3\n", (1, 4)),
    ("rl: {eval_every: 1, eval_every: 7}\n", (1, 1)),
    ("env:\n  kwargs:\n    size: 5\n    size: 6\n", (3, 4)),
])
def test_a_key_given_twice_in_a_yaml_config_names_the_key_and_both_lines(text, lines, tmp_path):
    path = tmp_path / "run.yaml"
    path.write_text(text)
    key = "seed" if "seed: 3" in text else "size" if "size" in text else "eval_every"
    with pytest.raises(UserError, match=rf"run.yaml:{lines[1]}: key '{key}' given twice \(lines {lines[0]} and "
                                        rf"{lines[1]}\); give each setting once"):
        build_config(path)


def test_a_key_given_twice_in_an_override_is_an_error():
    with pytest.raises(UserError, match=r"override 'rl=\{eval_every: 1, eval_every: 7\}': key 'eval_every' given "
                                        r"twice"):
        build_config(None, ["rl={eval_every: 1, eval_every: 7}"])


@pytest.mark.parametrize("item", ["=5", "rl.=5", "rl..lr=5", " =3", ".seed=1"])
def test_an_empty_override_key_says_so(item):
    with pytest.raises(UserError, match=r"the key before '=' must be a dotted setting name such as rl.lr"):
        build_config(None, [item])


@pytest.mark.parametrize("data, where", [({"rl": [1, 2]}, "rl"), ({"env": []}, "env"), ({"policy": {"lora": [1]}},
                                         "policy.lora"), ({"rl": "fast"}, "rl")])
def test_a_list_where_a_section_goes_says_so(data, where):
    with pytest.raises(UserError, match=rf"config: {where}: must be a section of key: value settings \(got "):
        build_config(None, base=data)


# --------------------------------------------------------------------------------------------------
# class 3: the API's errors are the types it promises: argument types first (TypeError naming the argument and what
# it takes), then values (a ValueError subclass naming the argument); UserError stays the base the CLI catches
# --------------------------------------------------------------------------------------------------

import creditflow  # noqa: E402
from creditflow.errors import UserTypeError  # noqa: E402

API_TYPE_CASES = [
    ("overrides a dict", lambda: creditflow.train(overrides={"rl.steps": 1}),
     r"overrides must be a list or tuple of 'key=value' strings, got \{'rl.steps': 1\} \(dict\)"),
    ("overrides a string", lambda: creditflow.train(overrides="rl.steps=1"),
     r"overrides must be a list or tuple .* got 'rl.steps=1' \(str\) \(pass \['rl.steps=1'\]\)"),
    ("overrides of ints", lambda: creditflow.train(overrides=[5]), r"overrides\[0\] must be a 'key=value' string, got 5"),
    ("resume True", lambda: creditflow.train(resume=True), r"resume must be the run directory to continue \(a str or "
                                                           r"os.PathLike\) or None, got True \(bool\)"),
    ("resume a number", lambda: creditflow.train(resume=3), r"resume must be"),
    ("sft overrides a dict", lambda: creditflow.sft(overrides={"a": 1}), "overrides must be a list"),
    ("rro overrides ints", lambda: creditflow.rro(overrides=(1,)), r"overrides\[0\] must be"),
    ("config a number", lambda: creditflow.sft(42), "config must be a RunConfig"),
    ("config list of ints", lambda: creditflow.sft([1]), r"config\[0\] must be a 'key=value' string"),
    ("env a number", lambda: creditflow.train(env=42),
     r"env must be a name, an env class, a factory or an env object \(with reset and step\), got 42 \(int\)"),
    ("evaluate model True", lambda: creditflow.evaluate(model=True), "model must be a model directory"),
    ("evaluate episodes text", lambda: creditflow.evaluate(model="m", episodes="3"), "episodes must be a positive"),
    ("evaluate episodes True", lambda: creditflow.evaluate(model="m", episodes=True), "episodes must be a positive"),
    ("evaluate split a number", lambda: creditflow.evaluate(model="m", split=1), "split must be 'validation' or"),
    ("evaluate overrides a str", lambda: creditflow.evaluate(model="m", overrides="a=1"), "overrides must be a list"),
    ("load_config overrides a dict", lambda: api.load_config(None, {"a": 1}), "overrides must be a list"),
]


@pytest.mark.parametrize("call, pattern", [c[1:] for c in API_TYPE_CASES], ids=[c[0] for c in API_TYPE_CASES])
def test_an_argument_of_the_wrong_type_is_a_type_error_naming_it(call, pattern, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(TypeError, match=pattern) as exc:
        call()
    assert isinstance(exc.value, UserError) and "\n" not in str(exc.value)
    assert not list(tmp_path.iterdir())


API_VALUE_CASES = [
    ("unknown setting", lambda: creditflow.train(["rl.nonsense=1"]), "rl.nonsense: unknown option"),
    ("resume nowhere", lambda: creditflow.train(resume="no/such/run"), "no such directory"),
    ("episodes 0", lambda: creditflow.evaluate(model="m", episodes=0), "episodes must be a positive integer, got 0"),
    ("unknown split", lambda: creditflow.evaluate(model="m", split="train"), "split must be 'validation' or 'test'"),
    ("unknown env", lambda: creditflow.sft(env="no_such_env"), "unknown env 'no_such_env'"),
    ("model that is no model", lambda: creditflow.evaluate(model="no/such/model"), "no/such/model"),
    ("a bad credit knob", lambda: creditflow.train(["rl.algo=rewardflow", "rl.credit.gamma=abc"]), "knob gamma"),
]


@pytest.mark.parametrize("call, pattern", [c[1:] for c in API_VALUE_CASES], ids=[c[0] for c in API_VALUE_CASES])
def test_a_bad_value_is_a_value_error_naming_it(call, pattern, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ValueError, match=pattern) as exc:
        call()
    assert isinstance(exc.value, UserError) and not isinstance(exc.value, UserTypeError)
    assert not list(tmp_path.iterdir())


# --------------------------------------------------------------------------------------------------
# class 5: what round 2's probes still found
# --------------------------------------------------------------------------------------------------

STEP = {"state": "A", "action": "a", "reward": 0}
LAST = {"state": "B", "action": "b", "reward": 1}
FAILED = {"task_id": "t", "steps": [{"state": "A", "action": "c", "reward": 0}], "success": False}


def _line(**changes):
    step = {**STEP, **changes.pop("step", {})}
    return json.dumps({"task_id": "t", "steps": [step, LAST], "success": True, **changes})


HOSTILE = {  # file text -> what the one line says
    "a 5000-digit integer reward": ('{"task_id": "t", "steps": [{"state": "A", "action": "a", "reward": 1' + "0" * 4999
                                    + '}], "success": true}\n', "x.jsonl:1: field 'reward': a number of 5000 digits"),
    "an unknown field nested 200,000 deep": (
        '{"task_id": "t", "steps": [{"state": "A", "action": "a"}], "success": true, "extra": ' + "[" * 200_000
        + "]" * 200_000 + "}\n", "x.jsonl:1: JSON nested too deeply to read"),
    "an unknown step field nested 200,000 deep": (
        '{"task_id": "t", "steps": [{"state": "A", "action": "a", "extra": ' + '{"a": ' * 200_000 + "1"
        + "}" * 200_000 + '}], "success": true}\n', "x.jsonl:1: JSON nested too deeply to read"),
    "a list-valued next_state": (_line(step={"next_state": ["B"]}) + "\n" + json.dumps(FAILED) + "\n",
                                 "x.jsonl:1: steps[0]: field 'next_state' must be str, got list"),
    "a list-valued step info": (_line(step={"info": [1, 2]}) + "\n" + json.dumps(FAILED) + "\n",
                                "x.jsonl:1: steps[0]: field 'info' must be dict, got list"),
    "a list-valued last step info": (json.dumps({"task_id": "t", "steps": [STEP, {**LAST, "info": ["x"]}],
                                                 "success": True}) + "\n",
                                     "x.jsonl:1: steps[1]: field 'info' must be dict, got list"),
    "an int next_state among str ones": (_line(step={"next_state": 5}) + "\n" + json.dumps(FAILED) + "\n",
                                         "x.jsonl:1: steps[0]: field 'next_state' must be str, got int"),
    "a failed rollout ending in the success node": (
        _line() + "\n" + json.dumps({**FAILED, "final_state": "\u0000success"}) + "\n",
        "x.jsonl:2: field 'final_state' is '\\x00success': a state key must not start with the NUL character"),
    "a state key of the dead-end node": (_line(step={"state": "\u0000end:0"}) + "\n",
                                         "x.jsonl:1: steps[0]: field 'state' is '\\x00end:0': a state key must not"),
    "done that is text": (_line(step={"done": "yes"}) + "\n", "steps[0]: field 'done' must be bool, got str"),
}
TOOLS = [["credit", "-e", "rewardflow"], ["credit", "-e", "gigpo"], ["credit", "-e", "grpo"], ["graph"]]


@pytest.mark.parametrize("tool", TOOLS, ids=lambda t: " ".join(t))
@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_hostile_values_inside_valid_json_are_one_line(case, tool, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    text, needle = HOSTILE[case]
    (tmp_path / "x.jsonl").write_text(text)
    out = tmp_path / "sub" / ("g.dot" if tool == ["graph"] else "o.jsonl")
    code, err = _run([*tool, "--in", "x.jsonl", "--out", str(out)], capsys)
    if tool[-1] == "grpo" and "a state key must not" in needle:  # GRPO reads no state key: nothing to refuse
        assert code == 0, err
        return
    assert code == 2 and err.count("\n") == 1 and err.startswith("error: ") and "Traceback" not in err, err
    assert needle in err, err
    assert not (tmp_path / "sub").exists()


def test_an_overflow_that_a_knob_causes_names_the_knob_and_its_value(tmp_path, capsys):
    (tmp_path / "x.jsonl").write_text(_line() + "\n" + json.dumps(FAILED) + "\n")
    code, err = _run(["credit", "-e", "rewardflow", "alpha_traj=1.7e308", "alpha_action=1.7e308", "--in",
                      str(tmp_path / "x.jsonl"), "--out", str(tmp_path / "o.jsonl")], capsys)
    assert code == 2 and err.count("\n") == 1, err
    assert ("cannot give it finite credit: its credit overflows float64 with knob(s) alpha_action=1.7e+308, "
            "alpha_traj=1.7e+308") in err and "bring them nearer their defaults (alpha_action=1.0, alpha_traj=1.0)" \
        in err, err



import errno  # noqa: E402


def _full(*args, **kwargs):
    raise OSError(errno.ENOSPC, "No space left on device", "runs/x/tiny_model/model.safetensors")


@pytest.mark.parametrize("where", ["config.yaml", "the tiny policy", "SFT's save"])
def test_sft_on_a_full_disk_leaves_nothing_and_says_one_line(where, tmp_path, capsys, monkeypatch):
    import creditflow.policy.factory as policy_factory
    import creditflow.recipes.rundir as rundir
    import creditflow.recipes.sft as sft

    monkeypatch.chdir(tmp_path)
    if where == "config.yaml":
        monkeypatch.setattr(rundir, "dump_config", _full)
    elif where == "the tiny policy":
        monkeypatch.setattr(policy_factory, "build_tiny_policy", _full)
    else:
        monkeypatch.setattr(sft, "train_sft", lambda *a, **k: (_ for _ in ()).throw(RuntimeError(
            "[enforce fail at inline_container.cc:672] . PytorchStreamWriter failed writing file data/0: file write "
            "failed\nsecond line")))
    code, err = _run(["sft", "--out", "runs/deep/x", "sft.demos=2", "sft.epochs=1", "policy.tiny_hidden_size=32",
                      "policy.tiny_layers=1"], capsys)
    lines = [line for line in err.splitlines() if line.strip()]  # progress lines of the work done, then the error
    errors = [line for line in lines if line.startswith("error: ")]
    assert code == 2 and len(errors) == 1 and lines[-1] == errors[0] and "Traceback" not in err, err
    assert "second line" not in err
    assert "no space left" in errors[0] or "most likely on a full disk" in errors[0] or "cannot write" in errors[0]
    assert not (tmp_path / "runs").exists(), list((tmp_path / "runs").rglob("*"))


def test_a_user_error_in_an_existing_out_dir_removes_only_what_the_run_added(tiny_model_dir, tmp_path, capsys):
    out = tmp_path / "mine"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    p.Misbehaves.resets = 0
    code, err = _run(["train", "--env", ENV, "--model", str(tiny_model_dir), "--out", str(out), "rl.steps=1",
                      "rollout.tasks_per_step=1", "rollout.group_size=2", "rl.eval_episodes=1", *FAST,
                      "env.kwargs.fault=raises", "env.kwargs.episode=4"], capsys)
    assert code == 2 and "step() raised RuntimeError" in err, err
    assert sorted(x.name for x in out.iterdir()) == ["notes.txt"]  # metrics.jsonl, config.yaml gone: it runs again
