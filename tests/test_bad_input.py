"""The bad-input corpus (issue 16): every case is one line on stderr, exit code 2, and no output left behind.

Each case runs ``creditflow.cli.main`` in this process (a few seconds at most: validation fails before any
SFT, model building or rollout). ``{name}`` in a case's arguments is a prepared input (see ``inputs``);
``{out}`` is where a run would go and must not exist afterwards; nothing else under ``tmp_path`` may
change. ``T`` is the small budget of the issue's table.
"""

import os
import shutil

import pytest
import torch

from creditflow.cli import main
from creditflow.config import build_config, dump_config
from creditflow.trainer.checkpoint import write_manifest

T = ["rl.steps=1", "rollout.tasks_per_step=1", "rollout.group_size=2", "rollout.max_steps=4", "rl.eval_episodes=2",
     "sft.demos=4", "sft.epochs=1"]

CASES = [
    # (id, argv, text the one line must hold)
    ("1 env kwarg not an int", ["train", "--out", "{out}", "env.kwargs.size=abc", *T],
     "env 'sokoban': option size must be an integer, got 'abc'"),
    ("1 eval kwarg not an int", ["train", "--out", "{out}", "env.eval_kwargs.size=abc", *T],
     "env.eval_kwargs): env 'sokoban': option size must be an integer"),
    ("2 model config.json not JSON", ["train", "--out", "{out}", "--model", "{bad_json_model}", *T],
     "config.json:1: invalid JSON"),
    ("3 unknown device", ["train", "--out", "{out}", "policy.device=foo", *T],
     "policy.device: must be auto, cpu, cuda, cuda:N or mps (got 'foo')"),
    ("4 sft.max_length fits no example",
     ["sft", "--out", "{out}", "--model", "{tiny}", "sft.demos=4", "sft.epochs=1", "sft.max_length=16"],
     "sft.max_length=16 leaves no response token to train on"),
    ("5 config is binary", ["train", "--config", "{binary}", *T], "not UTF-8 text"),
    ("5 config is a directory", ["train", "--config", "{directory}", *T], "is a directory, not a file"),
    ("12 max_steps 0", ["train", "--out", "{out}", *T, "rollout.max_steps=0"],
     "rollout.max_steps: Input should be greater than or equal to 1 (got 0)"),
    ("12 max_steps -1", ["train", "--out", "{out}", *T, "rollout.max_steps=-1"], "rollout.max_steps"),
    ("13 size 6.5", ["train", "--out", "{out}", "env.kwargs.size=6.5", *T], "size must be an integer, got 6.5"),
    ("13 describe_positions maybe", ["train", "--out", "{out}", "env.kwargs.describe_positions=maybe", *T],
     "describe_positions must be true or false, got 'maybe'"),
    ("14 size 1000", ["train", "--out", "{out}", "env.kwargs.size=1000", *T], "size must be in 3..24, got 1000"),
    ("15 resume with another --out", ["train", "--resume", "{run}", "--out", "{out}", "rl.steps=5"],
     "conflicts with --resume"),
    ("17 resume with nothing to do", ["train", "--resume", "{run}", "rl.steps=1"],
     "already at step 3 and rl.steps is 1, nothing to do"),
    ("18 knob not a number", ["train", "--out", "{out}", "--algo", "rewardflow", "rl.credit.gamma=abc", *T],
     "rl.credit: knob gamma expects a number, got 'abc'"),
    ("18 unknown dtype", ["train", "--out", "{out}", "policy.dtype=foo", *T], "policy.dtype"),
    ("bf16 rollout copy beside bf16 autocast",
     ["train", "--out", "{out}", "policy.rollout_dtype=bf16", "policy.autocast=bf16", *T],
     "rollout_dtype=bf16 and autocast=bf16 both sample in bf16; set one of them"),
    ("bf16 rollout copy of bf16 weights", ["train", "--out", "{out}", "policy.rollout_dtype=bf16", "policy.dtype=bf16", *T],
     "rollout_dtype=bf16 copies float32 weights; the weights are bf16"),
    ("unknown rollout dtype", ["train", "--out", "{out}", "policy.rollout_dtype=fp8", *T], "policy.rollout_dtype"),
    pytest.param("18 cuda without CUDA", ["train", "--out", "{out}", "policy.device=cuda", *T],
                 "CUDA is not available",
                 marks=pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")),
    # our own additions
    ("unknown option, no made-up suggestion", ["train", "--bogus"], "No such option: --bogus; see"),
    ("model is a file", ["train", "--out", "{out}", "--model", "{binary}", *T], "is not a directory"),
    ("model config.json is a list", ["train", "--out", "{out}", "--model", "{list_json_model}", *T],
     "expected a JSON object, got list"),
    ("model config.json is Latin-1", ["train", "--out", "{out}", "--model", "{latin1_model}", *T], "not UTF-8"),
    ("eval on a broken model", ["eval", "--model", "{bad_json_model}", "--episodes", "2"], "invalid JSON"),
    ("eval --out a directory", ["eval", "--model", "{tiny}", "--episodes", "2", "--out", "{directory}"],
     "is a directory; give a file path"),
    ("eval --episodes 0", ["eval", "--model", "{tiny}", "--episodes", "0"], "--episodes"),
    ("resume a file", ["train", "--resume", "{binary}"], "is a file; give the run directory"),
    ("resume with --config", ["train", "--resume", "{run}", "--config", "{yaml}", "rl.steps=5"],
     "--config conflicts with --resume"),
    ("out_dir is a file", ["train", "--out", "{binary}", "--model", "{tiny}", *T], "is a file, not a directory"),
    ("four boxes", ["train", "--out", "{out}", "env.kwargs.num_boxes=4", *T], "num_boxes must be in 1..3"),
    ("sql switch not a bool", ["train", "--out", "{out}", "--env", "sql", "env.kwargs.show_schema=maybe", *T],
     "option show_schema must be true or false, got 'maybe'"),
    ("demo with a bad env kwarg", ["demo", "--out", "{out}", "env.kwargs.size=abc"], "option size must be an integer"),
    ("sft with a bad env kwarg", ["sft", "--out", "{out}", "--model", "{tiny}", "env.kwargs.size=abc"],
     "option size must be an integer"),
    ("rro collect --data a file", ["rro", "collect", "--out", "{out}", "--model", "{tiny}", "--data", "{binary}"],
     "is a file, not a directory"),
    ("rro train on binary data", ["rro", "train", "--out", "{out}", "--model", "{tiny}", "--data", "{binary}"],
     "not UTF-8 text"),
    ("rro run on an unknown device", ["rro", "run", "--out", "{out}", "policy.device=tpu"], "policy.device"),
    ("lora rank 0", ["train", "--out", "{out}", "--model", "{tiny}", "policy.lora=true", "policy.lora.r=0", *T],
     "policy.lora.r: Input should be greater than or equal to 1 (got 0)"),
    ("lora alpha 0", ["train", "--out", "{out}", "policy.lora=true", "policy.lora.alpha=0", *T],
     "policy.lora.alpha: Input should be greater than 0 (got 0)"),
    ("lora module not in the model", ["train", "--out", "{out}", "--model", "{tiny}", "policy.lora=true",
                                      "policy.lora.target_modules=[q_proj, qkv_proj]", *T],
     "policy.lora.target_modules: no module 'qkv_proj' in the model (its layers: down_proj, embed_tokens"),
    ("lora module not in the tiny default", ["train", "--out", "{out}", "policy.lora=true",
                                             "policy.lora.target_modules=c_attn", *T], "no module 'c_attn'"),
    ("lora module not a layer", ["sft", "--out", "{out}", "--model", "{tiny}", "policy.lora=true",
                                 "policy.lora.target_modules=[mlp]"], "'mlp' is a Qwen2MLP, not a layer LoRA can wrap"),
    ("lora module for RRO", ["rro", "run", "--out", "{out}", "--model", "{tiny}", "policy.lora=true",
                             "policy.lora.target_modules=[qproj]"], "no module 'qproj'"),
    ("lora where it used to be", ["rro", "train", "--out", "{out}", "--model", "{tiny}", "rro.dpo.lora_r=8"],
     "rro.dpo: lora_r moved to policy.lora.r"),
    ("lora switched on in a resume", ["train", "--resume", "{run}", "rl.steps=5", "policy.lora=true"],
     "policy.lora.enabled cannot change in a resumed run"),
    ("export into an existing directory", ["export", "{tiny}", "--out", "{directory}"], "already exists"),
    ("export with an unknown dtype", ["export", "{tiny}", "--out", "{out}", "--dtype", "fp8"],
     "--dtype must be one of auto, float32"),
    ("export of a broken adapter", ["export", "{bad_adapter}", "--out", "{out}"], "no base_model_name_or_path"),
    ("lora eval on a broken adapter", ["eval", "--model", "{bad_adapter}", "--episodes", "2"],
     "no base_model_name_or_path"),
]


@pytest.fixture
def inputs(tmp_path, tiny_model_dir):
    """Prepared inputs: broken files and model dirs, and a run directory at step 3 (``run``)."""
    made = {"tiny": str(tiny_model_dir), "out": str(tmp_path / "out")}
    binary = tmp_path / "blob.bin"
    binary.write_bytes(bytes(range(256)) * 4)
    made["binary"] = str(binary)
    (tmp_path / "a_dir").mkdir()
    made["directory"] = str(tmp_path / "a_dir")
    for name, payload in (("bad_json_model", b"{not json"), ("list_json_model", b"[1, 2]"),
                          ("latin1_model", '{"model_type": "qwen2", "name": "caf\u00e9"}'.encode("latin-1"))):
        (tmp_path / name).mkdir()
        (tmp_path / name / "config.json").write_bytes(payload)
        made[name] = str(tmp_path / name)
    (tmp_path / "bad_adapter").mkdir()
    (tmp_path / "bad_adapter" / "adapter_config.json").write_text('{"r": 8}')
    made["bad_adapter"] = str(tmp_path / "bad_adapter")
    yaml_file = tmp_path / "run.yaml"
    yaml_file.write_text("rl:\n  steps: 5\n")
    made["yaml"] = str(yaml_file)
    run = tmp_path / "run"
    ckpt = run / "checkpoints" / "step_000003"
    ckpt.mkdir(parents=True)
    dump_config(build_config(None, [f"out_dir={run}", f"policy.model={tiny_model_dir}", "rl.steps=3"]),
                run / "config.yaml")
    for f in tiny_model_dir.iterdir():  # an intact checkpoint: the model, its states and its manifest
        shutil.copy(f, ckpt / f.name)
    torch.save({}, ckpt / "optimizer.pt")
    torch.save({"step": 3}, ckpt / "trainer_state.pt")
    write_manifest(ckpt, 3)
    (run / "checkpoints" / "latest").write_text("step_000003")
    made["run"] = str(run)
    return made


def _state(root):
    return sorted((str(p.relative_to(root)), p.stat().st_size, p.stat().st_mtime_ns) for p in root.rglob("*"))


def _case_id(case):
    return case.values[0] if hasattr(case, "marks") else case[0]  # pytest.param(...) or a plain tuple


@pytest.mark.parametrize("name, argv, needle", CASES, ids=[_case_id(c) for c in CASES])
def test_bad_input_is_one_line_exit_2_and_leaves_nothing(name, argv, needle, inputs, tmp_path, capsys,
                                                         monkeypatch):
    one_line_exit_2_nothing_left(name, argv, needle, inputs, tmp_path, capsys, monkeypatch)


def one_line_exit_2_nothing_left(name, argv, needle, inputs, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    args = [a.format(**inputs) for a in argv]
    before = _state(tmp_path)
    with pytest.raises(SystemExit) as exc:
        main(args)
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert exc.value.code == 2, err
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    assert needle in lines[0], lines[0]
    assert "Traceback" not in err and "Possible options" not in err
    assert not os.path.exists(inputs["out"]), f"{name}: left {os.listdir(inputs['out'])}"
    assert _state(tmp_path) == before, f"{name}: changed files under {tmp_path}"


def test_the_corpus_holds_every_row_of_the_table():
    rows = {int(_case_id(c).split()[0]) for c in CASES if _case_id(c)[0].isdigit()}
    assert {1, 2, 3, 4, 5, 12, 13, 14, 15, 17, 18} <= rows  # 16: tests/recipes/test_train.py (resume records)


def test_out_dir_that_already_holds_files_keeps_them(inputs, tmp_path, capsys):
    """A user error after ``out_dir`` was written puts ``config.yaml`` back as it was and keeps the rest."""
    out = tmp_path / "existing"
    out.mkdir()
    (out / "config.yaml").write_text("seed: 7\n")
    (out / "notes.txt").write_text("mine")
    with pytest.raises(SystemExit) as exc:
        main(["sft", "--out", str(out), "--model", inputs["tiny"], "sft.demos=2", "sft.max_length=16"])
    assert exc.value.code == 2
    assert sorted(p.name for p in out.iterdir()) == ["config.yaml", "notes.txt"]
    assert (out / "config.yaml").read_text() == "seed: 7\n"
    assert len(capsys.readouterr().err.strip().splitlines()) == 1


# --------------------------------------------------------------------------------------------------
# Issue 63, classes 2-4: credit owns three fields and nothing else; every number and every file is checked
# before work, with the source named; the Python API says what is wrong. (The byte-exact round-trip corpus
# is tests/credit/test_round_trip.py, the ranges generated from the schemas tests/test_config_ranges.py.)
# --------------------------------------------------------------------------------------------------

import errno  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402

import numpy as np  # noqa: E402

from creditflow import credit, envs  # noqa: E402
from creditflow.rollout.trajectory import Step, Trajectory  # noqa: E402

CASES_63 = [
    # class 2: credit never writes a number that is not finite
    ("2 credit on rewards of 1e308", ["credit", "-e", "grpo", "--in", "{huge}", "--out", "{out}", "reward_source=return"],
     "huge.jsonl:1: estimator 'grpo' cannot give it finite credit"),
    ("2 credit on a success that is a string", ["credit", "-e", "grpo", "--in", "{junk_success}", "--out", "{out}"],
     "junk.jsonl:1: field 'success' must be bool, got str"),
    ("2 credit on a reward too large for a float", ["credit", "-e", "grpo", "--in", "{big_int}", "--out", "{out}"],
     "steps[0]: field 'reward' must be a finite number, got an integer of 400 digits"),
    # class 3: options
    ("3 clip_eps_high -5", ["train", "--out", "{out}", "rl.clip_eps_high=-5", *T], "rl.clip_eps_high: Input should be"),
    ("3 temperature inf", ["train", "--out", "{out}", "generation.temperature=.inf", *T],
     "generation.temperature: Input should be a finite number"),
    ("3 lr inf", ["train", "--out", "{out}", "rl.lr=.inf", *T], "rl.lr: Input should be a finite number"),
    ("3 invalid_penalty nan", ["train", "--out", "{out}", "rollout.invalid_penalty=.nan", *T],
     "rollout.invalid_penalty: Input should be a finite number"),
    ("3 success_threshold nan", ["eval", "--model", "{tiny}", "env.success_threshold=.nan"],
     "env.success_threshold: Input should be a finite number"),
    ("3 seed beyond 32 bits", ["sft", "--out", "{out}", "seed=4294967296"], "seed: Input should be less than"),
    ("3 steps true", ["train", "--out", "{out}", *T, "rl.steps=true"], "rl.steps: expects a number, not true"),
    ("3 env reward nan", ["train", "--out", "{out}", "env.kwargs.step_penalty=.nan", *T],
     "option step_penalty must be a finite number, got nan"),
    ("3 knob nan", ["train", "--out", "{out}", "--algo", "rewardflow", "rl.credit.gamma=.nan", *T],
     "rl.credit: knob gamma expects a finite number"),
    ("3 warmup 2.5", ["rro", "train", "--out", "{out}", "--model", "{tiny}", "--data", "{good_prefs}",
                      "rro.dpo.warmup=2.5"], "rro.dpo.warmup: a ratio below 1 or a whole number of steps"),
    ("3 unknown scheduler", ["rro", "train", "--out", "{out}", "--model", "{tiny}", "--data", "{good_prefs}",
                             "rro.dpo.scheduler=cosine_with_min_lr"], "rro.dpo.scheduler: Input should be"),
    # class 3: files
    ("3 model without a tokenizer", ["train", "--out", "{out}", "--model", "{no_tokenizer}", *T], "no tokenizer"),
    ("3 truncated weights", ["eval", "--model", "{truncated}", "--episodes", "1"], "model.safetensors: has "),
    ("3 config.json that does not fit the weights", ["sft", "--out", "{out}", "--model", "{wrong_shape}"],
     "config.json describes"),
    ("3 bad preference line", ["rro", "train", "--out", "{out}", "--model", "{tiny}", "--data", "{bad_prefs}"],
     "preferences.jsonl:2: chosen[0]: content must be text, got int"),
]


@pytest.fixture
def inputs63(inputs, tmp_path, tiny_model_dir):
    made = dict(inputs)
    row = {"task_id": "t", "steps": [{"state": "A", "action": "a", "reward": 1e308}, {"state": "B", "action": "b",
                                                                                      "reward": 1e308}], "success": True}
    for name, text in (("huge", json.dumps(row) + "\n" + json.dumps({**row, "success": False}) + "\n"),
                       ("junk", json.dumps({**row, "success": "false"}) + "\n"),
                       ("big_int", '{"task_id": "t", "steps": [{"state": "A", "action": "a", "reward": 1'
                                   + "0" * 399 + '}], "success": true}\n')):
        (tmp_path / f"{name}.jsonl").write_text(text)
    made.update(huge=str(tmp_path / "huge.jsonl"), junk_success=str(tmp_path / "junk.jsonl"),
                big_int=str(tmp_path / "big_int.jsonl"))
    for name, harm in (("no_tokenizer", lambda d: [(d / f).unlink() for f in ("tokenizer.json", "tokenizer_config.json")]),
                       ("truncated", lambda d: (d / "model.safetensors").write_bytes(
                           (d / "model.safetensors").read_bytes()[:-64])),
                       ("wrong_shape", lambda d: (d / "config.json").write_text(json.dumps(
                           {**json.loads((d / "config.json").read_text()), "intermediate_size": 48})))):
        shutil.copytree(tiny_model_dir, tmp_path / name)
        harm(tmp_path / name)
        made[name] = str(tmp_path / name)
    pair = {"prompt": [{"role": "user", "content": "s"}], "chosen": [{"role": "assistant", "content": "up"}],
            "rejected": [{"role": "assistant", "content": "down"}]}
    for name, rows in (("good_prefs", [pair]), ("bad_prefs", [pair, {**pair, "chosen": [{"role": "assistant",
                                                                                          "content": 3}]}])):
        (tmp_path / name).mkdir()
        (tmp_path / name / "preferences.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        made[name] = str(tmp_path / name)
    return made


@pytest.mark.parametrize("name, argv, needle", CASES_63, ids=[c[0] for c in CASES_63])
def test_issue_63_bad_input_is_one_line_exit_2_and_leaves_nothing(name, argv, needle, inputs63, tmp_path, capsys,
                                                                  monkeypatch):
    one_line_exit_2_nothing_left(name, argv, needle, inputs63, tmp_path, capsys, monkeypatch)


# class 3: a full disk is one line, and computed results are not lost with the final write


def test_eval_on_a_full_disk_prints_its_metrics_and_keeps_the_trajectories(tiny_model_dir, tmp_path, capsys,
                                                                           monkeypatch):
    import creditflow.cli.runs as cli  # the eval command's module

    real = cli.write_jsonl
    out = tmp_path / "full" / "trajs.jsonl"

    def full(path, trajs):
        if str(path) == str(out):
            raise OSError(errno.ENOSPC, "No space left on device", str(path))
        return real(path, trajs)

    monkeypatch.setattr(cli, "write_jsonl", full)
    with pytest.raises(SystemExit) as exc:
        main(["eval", "--model", str(tiny_model_dir), "--episodes", "1", "--out", str(out),
              "generation.max_new_tokens=4", "env.kwargs.max_steps=2"])
    captured = capsys.readouterr()
    assert exc.value.code == 2 and "eval/success_rate" in json.loads(captured.out)
    lines = [line for line in captured.err.splitlines() if line.startswith("error: ")]  # after the progress bar
    assert len(lines) == 1 and "cannot write (No space left on device); the trajectories are in " in lines[0], lines
    assert "Traceback" not in captured.err
    spare = lines[0].rsplit(" are in ", 1)[1].removesuffix(" instead")
    try:
        assert len(open(spare).read().splitlines()) == 1 and not out.exists()
    finally:
        os.unlink(spare)


def test_eval_with_nowhere_to_write_still_prints_its_metrics(tiny_model_dir, tmp_path, capsys, monkeypatch):
    import creditflow.cli.runs as cli  # the eval command's module

    def full(path, trajs):
        raise OSError(errno.ENOSPC, "No space left on device", str(path))

    monkeypatch.setattr(cli, "write_jsonl", full)
    with pytest.raises(SystemExit) as exc:
        main(["eval", "--model", str(tiny_model_dir), "--episodes", "1", "--out", str(tmp_path / "t.jsonl"),
              "generation.max_new_tokens=4", "env.kwargs.max_steps=2"])
    captured = capsys.readouterr()
    assert exc.value.code == 2 and "eval/success_rate" in json.loads(captured.out)
    lines = [line for line in captured.err.splitlines() if line.startswith("error: ")]
    assert len(lines) == 1 and "could not be saved elsewhere either" in lines[0] and "Traceback" not in captured.err


@pytest.mark.parametrize("error", [
    OSError(errno.ENOSPC, "No space left on device", "runs/x/metrics.jsonl"),
    OSError(errno.EDQUOT, "Disk quota exceeded"),
    RuntimeError("[enforce fail at inline_container.cc:672] . PytorchStreamWriter failed writing file data/0: "
                 "file write failed"),
])
def test_a_full_disk_anywhere_is_one_line(error, capsys, monkeypatch):
    import creditflow.recipes.train as recipe  # the CLI's train runs the API's, which runs the recipe

    def run_train(cfg, resume=False):
        raise error

    monkeypatch.setattr(recipe, "run_train", run_train)
    with pytest.raises(SystemExit) as exc:
        main(["train", "rl.steps=1"])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert err.startswith("error: ") and "free some space and run the command again" in err


def test_other_errors_are_not_taken_for_a_full_disk(monkeypatch):
    import creditflow.recipes.train as recipe

    monkeypatch.setattr(recipe, "run_train", lambda cfg, resume=False: (_ for _ in ()).throw(RuntimeError("a bug")))
    with pytest.raises(RuntimeError, match="a bug"):
        main(["train", "rl.steps=1"])


# class 4: the Python API names the argument, what it expects and what it got

BASE = dict(group_ids=["g", "g"], traj_ids=["a", "b"], step_index=[0, 0], state_keys=["s", "s"], rewards=[1.0, 0.0],
            success=[True, False])


def _traj(**changes):
    step = Step("s", "o", "a", reward=changes.pop("reward", 1.0), valid=changes.pop("valid", True))
    return Trajectory("t", [step], **changes)


API_CASES = [
    ("success NaN", lambda: credit.score_arrays("grpo", **{**BASE, "success": [math.nan, 0.0]}), TypeError,
     r"success must be booleans \(True/False, or 0/1\), one per row; row 0 is nan \(float\)"),
    ("success strings", lambda: credit.score_arrays("grpo", **{**BASE, "success": ["False", "True"]}), TypeError,
     r"success must be booleans .*row 0 is 'False' \(str\)"),
    ("success 2", lambda: credit.score_arrays("grpo", **{**BASE, "success": [2, 0]}), TypeError, "row 0 is 2"),
    ("valid strings", lambda: credit.score_arrays("grpo", **BASE, valid=["yes", "no"]), TypeError,
     "valid must be booleans"),
    ("empty batch", lambda: credit.score_arrays("grpo", **{k: [] for k in BASE}), ValueError,
     "no rows to score: every column is empty"),
    ("2-D rewards", lambda: credit.score_arrays("grpo", **{**BASE, "rewards": np.ones((2, 1))}), TypeError,
     r"rewards must be one-dimensional \(one entry per row\), got an array of shape \(2, 1\)"),
    ("2-D success", lambda: credit.score_arrays("grpo", **{**BASE, "success": np.ones((2, 2), bool)}), TypeError,
     "success must be one-dimensional"),
    ("unhashable state", lambda: credit.score_arrays("rewardflow", **{**BASE, "state_keys": [["s"], ["s"]]}),
     TypeError, r"state_keys must be hashable values .*row 0 is \['s'\] \(list\)"),
    ("unhashable group", lambda: credit.score_arrays("grpo", **{**BASE, "group_ids": [{"g": 1}, {"g": 1}]}),
     TypeError, "group_ids must be hashable"),
    ("rewards as text", lambda: credit.score_arrays("grpo", **{**BASE, "rewards": ["1", "0"]}), TypeError,
     r"rewards must be numbers, one per row; row 0 is '1' \(str\)"),
    ("rewards a number", lambda: credit.score_arrays("grpo", **{**BASE, "rewards": 1.0}), TypeError,
     "rewards must be a list, tuple or 1-D array with one entry per row, got 1.0"),
    ("rewards bools", lambda: credit.score_arrays("grpo", **{**BASE, "rewards": [True, False]}), TypeError,
     "rewards must be numbers"),
    ("observations not text", lambda: credit.score_arrays("rewardflow", **BASE, observations=[1, 2]), TypeError,
     "observations must be strings"),
    ("step_index floats", lambda: credit.score_arrays("grpo", **{**BASE, "step_index": [0.0, 0.5]}), TypeError,
     "step_index must be integers"),
    ("estimator a list", lambda: credit.score_arrays(["grpo"], **BASE), TypeError,
     r"estimator must be a name \(str\)"),
    ("unknown estimator", lambda: credit.score_arrays("ppo", **BASE), ValueError, "unknown estimator 'ppo'"),
    ("knob NaN", lambda: credit.score_arrays("rewardflow", **BASE, gamma=math.nan), ValueError,
     "knob gamma expects a finite number, got nan"),
    ("huge rewards", lambda: credit.score_arrays("grpo", **{**BASE, "rewards": [1e308, -1e308]}), ValueError,
     r"trajectory 'a': estimator 'grpo' cannot give it finite credit"),
    ("score one trajectory", lambda: credit.score(_traj(), estimator="grpo"), TypeError,
     r"trajectories must be a list .* got Trajectory \(for one trajectory, pass \[trajectory\]\)"),
    ("score one dict", lambda: credit.score({"task_id": "t", "steps": []}), TypeError, "got dict"),
    ("score success text", lambda: credit.score([_traj(success="False")]), TypeError,
     r"trajectory 0: success must be True or False, got 'False' \(str\)"),
    ("score reward text", lambda: credit.score([_traj(reward="1")]), TypeError,
     r"trajectory 0: steps\[0\]: reward must be a number, got '1' \(str\)"),
    ("score valid None", lambda: credit.score([_traj(valid=None)]), TypeError,
     r"steps\[0\]: valid must be True or False, got None"),
    ("score dict success NaN", lambda: credit.score([{"task_id": "t", "steps": [], "success": math.nan}]), ValueError,
     "trajectory 0: field 'success' must be bool, got float"),
    ("score steps None", lambda: credit.score([Trajectory("t", None)]), TypeError,
     r"trajectory 0: steps must be a list of creditflow Step objects, got None"),
    ("score step a dict", lambda: credit.score([{"task_id": "t", "steps": []}, Trajectory("t", [{"state": "s"}])]),
     TypeError, r"trajectory 1: steps\[0\] must be a creditflow Step, got \{'state': 's'\} \(dict\)"),
    ("knobs a list", lambda: credit.validate_knobs("grpo", ["eps=1"]), TypeError,
     "knobs must be a mapping of knob names to values, got list"),
    ("overrides a string", lambda: build_config(None, "rl.lr=1e-5"), TypeError,
     r"overrides must be a list of key=value strings, got the string 'rl.lr=1e-5'"),
    ("compute on dicts", lambda: credit.compute("grpo", [{"task_id": "t", "steps": []}]), TypeError,
     r"score\(\) takes JSONL-schema dicts"),
    ("envs.make a list", lambda: envs.make(["sokoban"]), TypeError, "env name must be a string"),
    ("envs.make NaN", lambda: envs.make("sokoban", step_penalty=math.nan), ValueError,
     "option step_penalty must be a finite number, got nan"),
]


@pytest.mark.parametrize("call, kind, pattern", [c[1:] for c in API_CASES], ids=[c[0] for c in API_CASES])
def test_the_python_api_says_what_is_wrong(call, kind, pattern):
    with pytest.raises(kind, match=pattern) as exc:
        call()
    assert "\n" not in str(exc.value)


def test_zero_one_numbers_are_booleans_and_results_stay_finite():
    """0/1 as success (a framework's int tensor) is accepted; nothing NaN comes back."""
    got = credit.score_arrays("grpo", **{**BASE, "success": np.array([1, 0])}, reward_source="success")
    assert np.isfinite(got).all() and got[0] > 0 > got[1]


# Issue 63, class 1: what a crash (or a damaged disk) leaves in a run directory. --resume continues from the
# newest intact checkpoint with one line saying which it skipped and why, drops a torn metrics row, and
# removes what killed writes left; a partial model directory is never taken for a whole one.
# --------------------------------------------------------------------------------------------------

import signal  # noqa: E402

from creditflow.atomic import CRASH_AT  # noqa: E402
from creditflow.policy.tiny import build_tiny_policy, tiny_model_built  # noqa: E402
from creditflow.trainer.metrics import read_metrics  # noqa: E402

# checkpoint.optimizer=all: both checkpoints keep AdamW's state, so a resume that falls back to step 1 is exact
# (the default keeps it in the newest only: tests/recipes/test_first_hour.py)
RUN2 = ["rl.steps=2", "rl.save_every=1", "rollout.tasks_per_step=1", "rollout.group_size=2", "rollout.max_steps=3",
        "rl.eval_episodes=1", "rl.eval_every=0", "generation.max_new_tokens=6", "tensorboard=false",
        "checkpoint.optimizer=all"]


@pytest.fixture(scope="module")
def two_checkpoints(tmp_path_factory, tiny_model_dir):
    """A finished 2-step run with checkpoints at steps 1 and 2, each with its optimizer state."""
    out = tmp_path_factory.mktemp("crashed") / "run"
    with pytest.raises(SystemExit) as exc:
        main(["train", "--model", str(tiny_model_dir), "--out", str(out), *RUN2])
    assert exc.value.code == 0
    return out


def _copy(run, tmp_path):
    shutil.copytree(run, tmp_path / "run")
    return tmp_path / "run"


def _resume(run, capsys, steps=3):
    with pytest.raises(SystemExit) as exc:
        main(["train", "--resume", str(run), f"rl.steps={steps}"])
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return exc.value.code, err


def _truncate(path):
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


DAMAGES = {  # what happens to the newest checkpoint (step 2), and the reason the note must give
    "truncated weights": (lambda c: _truncate(c / "model.safetensors"), "model.safetensors has"),
    "garbage loop state": (lambda c: (c / "trainer_state.pt").write_bytes(b"garbage" * 100),
                           "trainer_state.pt has"),
    "truncated optimizer state": (lambda c: _truncate(c / "optimizer.pt"), "optimizer.pt has"),
    "tokenizer missing": (lambda c: (c / "tokenizer.json").unlink(), "tokenizer.json is missing"),
    "weights rewritten in place": (lambda c: (c / "model.safetensors").write_bytes(
        bytes(b ^ 1 for b in (c / "model.safetensors").read_bytes())), "model.safetensors does not match its SHA-256"),
    "manifest garbage": (lambda c: (c / "manifest.json").write_text("{"), "manifest.json is unreadable"),
    "manifest of the wrong shape": (lambda c: (c / "manifest.json").write_text(json.dumps(  # issue 76, class 4
        {**json.loads((c / "manifest.json").read_text()), "files": []})), "manifest.json is unreadable or not a"),
}


@pytest.mark.slow
@pytest.mark.parametrize("damage", sorted(DAMAGES))
def test_resume_skips_a_damaged_newest_checkpoint_with_one_line(damage, two_checkpoints, tmp_path, capsys):
    run = _copy(two_checkpoints, tmp_path)
    harm, reason = DAMAGES[damage]
    harm(run / "checkpoints" / "step_000002")
    code, err = _resume(run, capsys, steps=2)
    assert code == 0, err
    notes = [line for line in err.splitlines() if line.startswith("note: checkpoint damaged")]
    assert len(notes) == 1 and f"step_000002: {reason}" in notes[0] and "resuming from step_000001" in notes[0], err
    assert [r["step"] for r in read_metrics(run / "metrics.jsonl")] == [0, 1, 2]  # step 2 redone


def test_resume_with_every_checkpoint_damaged_is_one_line(two_checkpoints, tmp_path, capsys):
    run = _copy(two_checkpoints, tmp_path)
    for step in ("step_000001", "step_000002"):
        _truncate(run / "checkpoints" / step / "optimizer.pt")
    before = _state(run)
    code, err = _resume(run, capsys)
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1, err
    assert lines[0].startswith("error: ") and "no intact checkpoint (step_000002: optimizer.pt has" in lines[0]
    assert "step_000001: optimizer.pt has" in lines[0]
    assert _state(run) == before


@pytest.mark.slow
def test_resume_drops_a_torn_metrics_row_and_what_killed_writes_left(two_checkpoints, tmp_path, capsys):
    run = _copy(two_checkpoints, tmp_path)
    shutil.rmtree(run / "checkpoints" / "step_000002")  # killed after logging step 2, before its checkpoint ...
    with (run / "metrics.jsonl").open("a") as fh:  # ... and halfway through the next row
        fh.write('{"step": 3, "train/loss": 0.12')
    (run / "checkpoints" / "latest").write_text("step_0000")  # a marker that names nothing
    (run / "checkpoints" / ".step_000002.tmp").mkdir()  # a checkpoint being written
    (run / "checkpoints" / ".step_000002.tmp" / "config.json").write_text("{")
    (run / ".config.yaml.x1y2.tmp").write_text("half")  # a file being replaced
    assert [r["step"] for r in read_metrics(run / "metrics.jsonl")] == [0, 1, 2]  # readers skip the torn row
    code, err = _resume(run, capsys)
    assert code == 0, err
    assert "damaged" not in err and "resumed from" in err
    assert [r["step"] for r in read_metrics(run / "metrics.jsonl")] == [0, 1, 2, 3]
    assert (run / "metrics.jsonl").read_text().endswith("\n")
    assert not list(run.glob(".*")) and not list((run / "checkpoints").glob(".*"))
    assert (run / "checkpoints" / "latest").read_text() == "step_000003"


@pytest.mark.slow
def test_checkpoints_without_a_manifest_are_checked_by_reading_them(two_checkpoints, tmp_path, capsys):
    """Checkpoints written before manifests existed resume as before; a broken one is skipped the same way."""
    run = _copy(two_checkpoints, tmp_path)
    for step in ("step_000001", "step_000002"):
        (run / "checkpoints" / step / "manifest.json").unlink()
    (run / "checkpoints" / "step_000002" / "trainer_state.pt").write_bytes(b"\x80garbage")
    code, err = _resume(run, capsys)
    assert code == 0, err
    assert "step_000002: trainer_state.pt is unreadable" in err and "resuming from step_000001" in err


@pytest.mark.parametrize("command", [["eval", "--episodes", "1", "--model"], ["export", "--out", "{out}"]])
def test_eval_or_export_of_a_run_whose_newest_checkpoint_is_damaged_is_one_line(command, two_checkpoints, tmp_path,
                                                                                 capsys):
    run = _copy(two_checkpoints, tmp_path)
    _truncate(run / "checkpoints" / "step_000002" / "model.safetensors")
    argv = [a.format(out=tmp_path / "exported") for a in command]
    with pytest.raises(SystemExit) as exc:
        main(argv + [str(run)] if argv[0] == "eval" else [argv[0], str(run), *argv[1:]])
    lines = capsys.readouterr().err.strip().splitlines()
    assert exc.value.code == 2 and len(lines) == 1, lines
    assert lines[0] == (f"error: {run}/checkpoints/step_000002 is damaged (model.safetensors has "
                        f"{(run / 'checkpoints' / 'step_000002' / 'model.safetensors').stat().st_size} bytes, its "
                        f"manifest says {(two_checkpoints / 'checkpoints' / 'step_000002' / 'model.safetensors').stat().st_size}); "
                        f"the newest intact checkpoint is {run}/checkpoints/step_000001 (give it as the model)")
    assert not (tmp_path / "exported").exists()


def test_a_bad_metrics_line_that_is_not_the_last_is_one_line(two_checkpoints, tmp_path, capsys):
    run = _copy(two_checkpoints, tmp_path)
    lines = (run / "metrics.jsonl").read_text().splitlines()
    lines[1] = lines[1][:20]
    (run / "metrics.jsonl").write_text("\n".join(lines) + "\n")
    code, err = _resume(run, capsys)
    assert code == 2 and err.strip().startswith("error: ") and len(err.strip().splitlines()) == 1, err
    assert f"{run / 'metrics.jsonl'}:2: not a metrics row" in err


def test_a_run_without_a_checkpoint_resumes_from_step_0(two_checkpoints, tmp_path, capsys):
    """Killed before its first checkpoint: --resume starts it again in its directory."""
    run = _copy(two_checkpoints, tmp_path)
    shutil.rmtree(run / "checkpoints")
    code, err = _resume(run, capsys, steps=1)
    assert code == 0, err
    assert f"no checkpoint in {run} yet: the run starts again from step 0" in err
    assert [r["step"] for r in read_metrics(run / "metrics.jsonl")] == [0, 1]


def test_a_tiny_policy_killed_between_weights_and_tokenizer_leaves_nothing(tmp_path):
    """The tiny policy's directory appears whole or not at all, so a partial one is never reused."""
    corpus = ["up down left right", "push the box onto the target"] * 20
    target = tmp_path / "tiny_model"
    pid = os.fork()
    if pid == 0:
        os.environ[CRASH_AT] = "tiny.model"
        try:
            build_tiny_policy(target, corpus, vocab_size=300, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                              num_attention_heads=2, num_key_value_heads=1)
        finally:
            os._exit(0)
    assert os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == -signal.SIGKILL
    assert not target.exists() and not tiny_model_built(target)
    left = tmp_path / ".tiny_model.tmp"
    assert (left / "model.safetensors").exists() and not (left / "tokenizer.json").exists()
    build_tiny_policy(target, corpus, vocab_size=300, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                      num_attention_heads=2, num_key_value_heads=1)
    assert tiny_model_built(target) and not left.exists()
    (target / "creditflow.json").unlink()  # a partial directory from an older version: weights, no record
    assert not tiny_model_built(target)
