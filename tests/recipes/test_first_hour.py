"""A researcher's first hour, round 2 (issue 90): runs that say when a step teaches nothing, the starting point
printed, resume from any folder, bounded checkpoints, experiment tracking."""

import glob
import json
import os
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from creditflow.cli import main
from creditflow.config import build_config
from creditflow.errors import UserError
from creditflow.policy.load import load_policy
from creditflow.recipes.resolve import config_for_resume
from creditflow.recipes.train import run_train
from creditflow.trainer import forward as forward_module
from creditflow.trainer import nosignal
from creditflow.trainer.forward import Forward
from creditflow.trainer.metrics import TRACKERS_FILE, read_metrics
from creditflow.trainer.rl import fill_ref_logprobs, policy_update
from creditflow.trainer.sequences import rows_from
from tests.trainer.rollouts import window_rollout

SMALL = ["rollout.tasks_per_step=2", "rollout.group_size=2", "rl.eval_episodes=2", "rl.eval_every=1",
         "generation.max_new_tokens=6", "rollout.max_steps=3", "rl.lr=1e-3", "logging.report_to=none"]


def cli(args, capsys):
    with pytest.raises(SystemExit) as exc:
        main(args)
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err
    return exc.value.code, captured.out, captured.err


class Passes:
    """Counts the policy's forward passes through :class:`Forward` (the update's and the reference's)."""

    def __init__(self, monkeypatch):
        self.trained, self.logprobs = 0, 0
        real_trained, real_logprobs = Forward.trained_logits, Forward.logprobs

        def trained(fwd, *args, **kwargs):
            self.trained += 1
            return real_trained(fwd, *args, **kwargs)

        def logprobs(fwd, *args, **kwargs):
            self.logprobs += 1
            return real_logprobs(fwd, *args, **kwargs)

        monkeypatch.setattr(forward_module.Forward, "trained_logits", trained)
        monkeypatch.setattr(forward_module.Forward, "logprobs", logprobs)


# --------------------------------------------------------------------------------------------------
# 1. a step with no signal says so and skips its forward and backward pass
# --------------------------------------------------------------------------------------------------


def test_a_step_without_signal_warns_and_skips_its_backward_pass(tmp_path, tiny_model_dir, monkeypatch, capsys):
    """The untrained tiny policy: every action invalid, no success, every advantage 0. With the default KL term
    (the policy is still its reference, so the term has no gradient) the update runs no pass at all."""
    passes = Passes(monkeypatch)
    out = tmp_path / "empty"
    code, _, err = cli(["train", "--model", str(tiny_model_dir), "--out", str(out), "rl.steps=2", *SMALL], capsys)
    assert code == 0, err
    rows = read_metrics(out / "metrics.jsonl")
    assert [r["train/update_skipped"] for r in rows[1:]] == [1.0, 1.0]
    assert rows[1]["train/invalid_frac"] == 1.0 and rows[1]["train/adv_std"] == 0 and rows[1]["train/grad_norm"] == 0
    assert passes.trained == 0 and passes.logprobs == 0  # neither the update's nor the reference's forward
    warnings = [line for line in err.splitlines() if line.startswith("warning: step")]
    assert len(warnings) == 1, err  # said once while the reasons stay the same; the progress line says it each step
    assert warnings[0].startswith("warning: step 1 carries no learning signal (every advantage 0, no rollout "
                                  "succeeded, 100% invalid actions); its forward and backward pass were skipped")
    assert "Likely cause: the policy's responses are mostly not actions the env takes" in warnings[0]
    assert sum("| no signal: every advantage 0" in line for line in err.splitlines()) == 2


def test_a_step_with_signal_runs_its_update(tmp_path, tiny_model_dir, monkeypatch, capsys):
    """The same run with advantages that are not all 0 (a stand-in estimator): no warning, the update runs."""
    from creditflow import credit

    def alternating(trajectories, knobs):
        for i, traj in enumerate(trajectories):
            for step in traj.steps:
                step.advantage = 1.0 if i % 2 else -1.0
        return {}

    monkeypatch.setattr(credit, "get_estimator", lambda name: alternating)
    passes = Passes(monkeypatch)
    out = tmp_path / "signal"
    code, _, err = cli(["train", "--model", str(tiny_model_dir), "--out", str(out), "rl.steps=1", *SMALL], capsys)
    assert code == 0, err
    assert read_metrics(out / "metrics.jsonl")[1]["train/update_skipped"] == 0.0
    assert passes.trained > 0 and passes.logprobs > 0
    assert "carries no learning signal" not in err and "weak signal: no rollout succeeded" in err


@pytest.mark.parametrize("kl", [0.0, 0.05])
def test_a_skipped_update_has_the_gradient_of_the_full_one(tiny_model_dir, kl):
    """Zero advantages on a fresh optimizer: without a KL term the skipped update leaves the weights as the full
    forward/backward does; with it, at the reference, the full pass finds only float noise."""
    results = []
    for skip in (False, True):
        model, tok = load_policy(tiny_model_dir, "cpu")
        trajs = window_rollout(model, tok)
        for traj in trajs:
            for step in traj.steps:
                step.advantage = 0.0
        rows = rows_from(trajs, "window")
        cfg = build_config(None, [f"rl.kl_coef={kl}", "rl.lr=1e-2"])
        fwd = Forward.from_sections(cfg.rl, cfg.rollout, cfg.policy, tok.pad_token_id)
        fill_ref_logprobs(model, rows, fwd)  # the reference: the policy itself, as at a fresh start
        opt = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.0)  # the trainer's default
        stats = policy_update(model, opt, rows, cfg.rl, fwd, np.random.default_rng(0), skip=skip)
        results.append((stats["train/grad_norm"], [p.detach().clone() for p in model.parameters()], dict(opt.state)))
    (norm_full, full, _), (norm_skipped, skipped, state) = results
    assert norm_skipped == 0 and not state  # before any step with signal AdamW has no moments: no step is taken
    if kl == 0:  # no term has a gradient: the same weights, bit for bit
        assert norm_full == 0 and all(torch.equal(a, b) for a, b in zip(full, skipped))
    else:  # the KL term at its reference: a gradient of float noise only (which AdamW would scale up to lr)
        assert norm_full < 1e-3


def test_no_signal_lines_name_the_cause():
    row = {"train/adv_mean": 0.0, "train/adv_std": 0.0, "train/success_rate": 1.0, "train/invalid_frac": 0.0,
           "train/update_skipped": 1.0}
    assert nosignal.short(row) == "no signal: every advantage 0, every rollout succeeded"
    assert "the tasks are too easy" in nosignal.warning(3, row)
    row = {"train/adv_mean": 0.1, "train/adv_std": 0.5, "train/success_rate": 0.0, "train/invalid_frac": 0.95,
           "train/update_skipped": 0.0}
    assert nosignal.short(row) == "weak signal: no rollout succeeded, 95% invalid actions"
    assert "skipped" not in nosignal.warning(1, row) and "not actions the env takes" in nosignal.warning(1, row)
    assert nosignal.warning(1, {"train/adv_mean": 0.1, "train/adv_std": 0.5, "train/success_rate": 0.5,
                                "train/invalid_frac": 0.2}) is None


# --------------------------------------------------------------------------------------------------
# 2. the starting point
# --------------------------------------------------------------------------------------------------


def test_train_prints_the_held_out_success_it_starts_from(tmp_path, tiny_model_dir, capsys):
    out = tmp_path / "start"
    code, _, err = cli(["train", "--model", str(tiny_model_dir), "--out", str(out), "rl.steps=1",
                        "rl.test_episodes=2", "rl.save_every=1", *SMALL], capsys)
    assert code == 0, err
    first = read_metrics(out / "metrics.jsonl")[0]
    lines = err.splitlines()
    start = [line for line in lines if line.startswith("π_start")]
    assert start == [f"π_start (the policy RL starts from): held-out success {first['eval/success_rate']:.3f} on 2 "
                     f"validation tasks of sokoban, {first['test/success_rate']:.3f} on 2 test tasks (100% of its "
                     "actions invalid)"]
    assert lines.index(start[0]) < min(i for i, line in enumerate(lines) if line.startswith("step 1/1"))
    code, _, err = cli(["train", "--resume", str(out), "rl.steps=2"], capsys)
    assert code == 0 and "the run started from: held-out success" in err and "(metrics.jsonl, step 0)" in err


def test_sft_prints_the_held_out_success_it_reached_unless_told_not_to(tmp_path, tiny_model_dir, capsys):
    base = ["--model", str(tiny_model_dir), "sft.demos=4", "sft.epochs=1", "rl.eval_episodes=3",
            "generation.max_new_tokens=6", "rollout.max_steps=3"]
    code, _, err = cli(["sft", "--out", str(tmp_path / "a"), *base], capsys)
    assert code == 0, err
    metrics = json.loads((tmp_path / "a" / "sft_metrics.json").read_text())
    assert metrics["eval/episodes"] == 3
    assert (f"π_SFT: held-out success {metrics['eval/success_rate']:.3f} on 3 validation tasks of sokoban"
            in err.splitlines()[-1])
    code, _, err = cli(["sft", "--out", str(tmp_path / "b"), "--no-eval", *base], capsys)
    assert code == 0 and "π_SFT: held-out" not in err and "not evaluated: sft.evaluate=false" in err
    assert "eval/success_rate" not in json.loads((tmp_path / "b" / "sft_metrics.json").read_text())


# --------------------------------------------------------------------------------------------------
# 4. resume from any folder
# --------------------------------------------------------------------------------------------------


def test_resume_works_from_another_folder(tmp_path, tiny_model_dir, monkeypatch, capsys):
    """A run started in byo/ with a relative --model resumes from the parent folder: config.yaml keeps the
    path absolute; a run directory of an earlier release (the path relative) is read from where it started."""
    byo = tmp_path / "byo"
    (byo / "models").mkdir(parents=True)
    os.symlink(tiny_model_dir, byo / "models" / "start")
    monkeypatch.chdir(byo)
    code, _, err = cli(["train", "--model", "models/start", "--out", "runs/rf", "rl.steps=1", *SMALL], capsys)
    assert code == 0, err
    saved = build_config(byo / "runs" / "rf" / "config.yaml")
    assert saved.policy.model == str(byo / "models" / "start")
    monkeypatch.chdir(tmp_path)
    code, _, err = cli(["train", "--resume", "byo/runs/rf", "rl.steps=2"], capsys)
    assert code == 0, err
    config = byo / "runs" / "rf" / "config.yaml"
    config.write_text(config.read_text().replace(f"model: {byo / 'models' / 'start'}", "model: models/start")
                      .replace("out_dir: byo/runs/rf", "out_dir: runs/rf"))  # as earlier releases wrote it
    assert config_for_resume("byo/runs/rf", ["rl.steps=3"]).policy.model == str(byo / "models" / "start")
    code, _, err = cli(["train", "--resume", "byo/runs/rf", "rl.steps=3"], capsys)
    assert code == 0, err
    assert [r["step"] for r in read_metrics(byo / "runs" / "rf" / "metrics.jsonl")] == [0, 1, 2, 3]
    config.write_text(config.read_text().replace(f"model: {byo / 'models' / 'start'}", "model: models/gone"))
    with pytest.raises(UserError) as info:
        config_for_resume("byo/runs/rf", ["rl.steps=4"])
    assert str(info.value) == (f"--resume 'byo/runs/rf': policy.model 'models/gone' in byo/runs/rf/config.yaml does "
                               f"not exist (a relative path there is read from the directory the run was started "
                               f"in, {tmp_path}); give policy.model=PATH, where that model is now")
    cfg = config_for_resume("byo/runs/rf", ["rl.steps=4", "policy.model=byo/models/start"])  # as the line says
    assert cfg.policy.model == "byo/models/start" and cfg.resumes[-1].changed["policy.model"] == [
        "models/gone", "byo/models/start"]


# --------------------------------------------------------------------------------------------------
# 5. bounded checkpoints
# --------------------------------------------------------------------------------------------------


def _checkpoints(out: Path) -> dict:
    return {p.name: (p / "optimizer.pt").exists() for p in sorted((out / "checkpoints").glob("step_*"))}


@pytest.mark.parametrize("settings,kept", [
    ([], {"step_000003": False, "step_000004": True}),
    (["checkpoint.keep_last=3", "checkpoint.optimizer=all"],
     {"step_000002": True, "step_000003": True, "step_000004": True}),
    (["checkpoint.keep_last=null"], {"step_000001": False, "step_000002": False, "step_000003": False,
                                     "step_000004": True}),
])
def test_checkpoint_keep_last_keeps_that_many_and_optimizer_state_where_resume_needs_it(settings, kept, tmp_path,
                                                                                      tiny_model_dir, capsys):
    out = tmp_path / "ckpt"
    code, _, err = cli(["train", "--model", str(tiny_model_dir), "--out", str(out), "rl.steps=4", "rl.save_every=1",
                        "rl.eval_every=0", *SMALL, *settings], capsys)
    assert code == 0, err
    assert _checkpoints(out) == kept
    sizes = [line for line in err.splitlines() if line.startswith("checkpoint step_")]
    assert len(sizes) == 1 and sizes[0].startswith("checkpoint step_000001: ") and " kB (" in sizes[0]


def test_checkpoint_keep_last_2_resumes_and_a_damaged_newest_falls_back_with_a_note(tmp_path, tiny_model_dir, capsys):
    out = tmp_path / "ckpt"
    code, _, err = cli(["train", "--model", str(tiny_model_dir), "--out", str(out), "rl.steps=3", "rl.save_every=1",
                        "rl.eval_every=0", "checkpoint.keep_last=2", *SMALL], capsys)
    assert code == 0 and _checkpoints(out) == {"step_000002": False, "step_000003": True}
    code, _, err = cli(["train", "--resume", str(out), "rl.steps=4"], capsys)
    assert code == 0 and "resumed from" in err and "note:" not in err
    assert _checkpoints(out) == {"step_000003": False, "step_000004": True}
    (out / "checkpoints" / "step_000004" / "optimizer.pt").write_bytes(b"damaged")
    code, _, err = cli(["train", "--resume", str(out), "rl.steps=5"], capsys)
    assert code == 0, err
    note = [line for line in err.splitlines() if line.startswith("note: checkpoint damaged")]
    assert len(note) == 1 and "resuming from step_000003" in note[0] and "AdamW's moments start afresh" in note[0]
    assert [r["step"] for r in read_metrics(out / "metrics.jsonl")] == [0, 1, 2, 3, 4, 5]


# --------------------------------------------------------------------------------------------------
# 6. experiment tracking (the trackers one by one: tests/trainer/test_tracking.py)
# --------------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_a_run_reports_to_wandb_offline(tmp_path, tiny_model_dir, monkeypatch):
    """A real ``train`` run with ``logging.report_to=[wandb]`` and ``WANDB_MODE=offline``: the run's files are in
    ``out/wandb``, every numeric name of metrics.jsonl is in its record, and a resume continues the same run."""
    pytest.importorskip("wandb")
    from creditflow.recipes.resolve import config_for_resume
    from creditflow.recipes.train import run_train

    for name, value in {"WANDB_MODE": "offline", "WANDB_SILENT": "true", "WANDB_CONFIG_DIR": str(tmp_path / "cfg"),
                        "WANDB_CACHE_DIR": str(tmp_path / "cache"), "WANDB_DATA_DIR": str(tmp_path / "data")}.items():
        monkeypatch.setenv(name, value)
    out = tmp_path / "run"
    cfg = build_config(None, [f"out_dir={out}", f"policy.model={tiny_model_dir}", "rl.steps=1", "rl.save_every=1",
                              "rollout.tasks_per_step=2", "rollout.group_size=2", "rl.eval_episodes=2",
                              "generation.max_new_tokens=6", "rollout.max_steps=3", "logging.report_to=[wandb]",
                              "logging.project=issue90"])
    run_train(cfg, log=lambda *_: None)
    run_id = json.loads((out / TRACKERS_FILE).read_text())["wandb"]
    (record,) = glob.glob(str(out / "wandb" / f"offline-run-*-{run_id}" / f"run-{run_id}.wandb"))
    names = {k for r in read_metrics(out / "metrics.jsonl") for k, v in r.items()
             if isinstance(v, float | int) and k != "step"}
    assert "train/update_skipped" in names and "eval/success_rate" in names
    for _ in range(120):  # wandb's core process may still be writing the last rows when finish() returns (load)
        data = open(record, "rb").read()
        if all(name.encode() in data for name in names):
            break
        time.sleep(0.5)
    assert all(name.encode() in data for name in names), sorted(n for n in names if n.encode() not in data)
    run_train(config_for_resume(out, ["rl.steps=2"]), resume=True, log=lambda *_: None)
    assert json.loads((out / TRACKERS_FILE).read_text())["wandb"] == run_id  # the same wandb run continues
    assert len(glob.glob(str(out / "wandb" / f"offline-run-*-{run_id}"))) == 2


def test_a_skipped_update_after_a_step_with_signal_still_steps_adamw(tiny_model_dir):
    """AdamW's moments from a step with signal still move the weights on a skipped step, as the full pass would."""
    results = []
    for skip in (False, True):
        model, tok = load_policy(tiny_model_dir, "cpu")
        trajs = window_rollout(model, tok)
        rows = rows_from(trajs, "window")
        cfg = build_config(None, ["rl.kl_coef=0", "rl.lr=1e-2"])
        fwd = Forward.from_sections(cfg.rl, cfg.rollout, cfg.policy, tok.pad_token_id)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.0)  # the trainer's default
        policy_update(model, opt, rows, cfg.rl, fwd, np.random.default_rng(0))  # a step with signal
        for row in rows:
            for s in row.samples:
                s.advantage = 0.0
        before = [p.detach().clone() for p in model.parameters()]
        policy_update(model, opt, rows, cfg.rl, fwd, np.random.default_rng(1), skip=skip)
        moved = any(not torch.equal(a, p) for a, p in zip(before, model.parameters()))
        results.append((moved, [p.detach().clone() for p in model.parameters()]))
    (moved_full, full), (moved_skipped, skipped) = results
    assert moved_full and moved_skipped and all(torch.equal(a, b) for a, b in zip(full, skipped))

