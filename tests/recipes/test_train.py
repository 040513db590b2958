"""The train recipe: run directories, stable metric keys, checkpoints, exact resume, resume records,
interrupts."""

import json

import pytest

from creditflow.cli import main
from creditflow.config import build_config
from creditflow.errors import UserError
from creditflow.recipes import sft as sft_recipe
from creditflow.recipes.resolve import config_for_resume
from creditflow.recipes.train import run_train
from creditflow.trainer.metrics import read_metrics
from creditflow.trainer.rl import RLTrainer

SMALL = ["rollout.tasks_per_step=2", "rollout.group_size=2", "rl.eval_episodes=2", "rl.eval_every=1",
         "generation.max_new_tokens=6", "rollout.max_steps=3", "rl.lr=1e-3", "tensorboard=false"]


def run(tmp_path, name, steps, extra=(), model=None):
    cfg = build_config(None, [f"out_dir={tmp_path / name}", f"policy.model={model}", f"rl.steps={steps}",
                              *SMALL, *extra])
    return run_train(cfg, log=lambda *_: None)


def strip_times(rows):
    return [{k: v for k, v in r.items() if not k.startswith("time/")} for r in rows]


def test_few_step_smoke_run_logs_stable_keys_and_checkpoints(tmp_path, tiny_model_dir):
    out, trainer, last = run(tmp_path, "smoke", 2, ["rl.save_every=1"], model=tiny_model_dir)
    rows = read_metrics(out / "metrics.jsonl")
    assert [r["step"] for r in rows] == [0, 1, 2]
    for key in ("eval/success_rate", "eval/score", "eval/steps"):
        assert key in rows[0] and key in rows[-1]
    for key in ("train/success_rate", "train/reward", "env_steps", "train/loss", "train/kl", "train/entropy",
                "train/clip_frac", "train/grad_norm", "credit/groups"):
        assert key in rows[1], key
    assert rows[2]["env_steps"] > rows[1]["env_steps"] > 0
    assert (out / "checkpoints" / "latest").read_text() == "step_000002"
    ckpt = out / "checkpoints" / "step_000002"
    assert (ckpt / "config.json").exists() and (ckpt / "optimizer.pt").exists()
    assert (out / "config.yaml").exists() and (out / "tb").exists() is False


@pytest.mark.parametrize("algo", ["grpo", "rloo"])
def test_resume_continues_exactly(tmp_path, tiny_model_dir, algo):
    extra = [f"rl.algo={algo}", "rl.save_every=1", "rollout.group_size=3", "rl.minibatches=2"]
    full_out, _, _ = run(tmp_path, "full", 3, extra, model=tiny_model_dir)
    part_out, _, _ = run(tmp_path, "part", 1, extra, model=tiny_model_dir)
    # simulate a crash after step 2 was logged but before its checkpoint: resume must drop that row
    with (part_out / "metrics.jsonl").open("a") as fh:
        fh.write(json.dumps({"step": 2, "bogus": 1}) + "\n")
    cfg = config_for_resume(part_out, ["rl.steps=3"])
    run_train(cfg, resume=True, log=lambda *_: None)
    full = strip_times(read_metrics(full_out / "metrics.jsonl"))
    part = strip_times(read_metrics(part_out / "metrics.jsonl"))
    assert [r["step"] for r in part] == [0, 1, 2, 3]
    assert part == full


def test_refuses_to_overwrite_a_run(tmp_path, tiny_model_dir):
    run(tmp_path, "once", 0, model=tiny_model_dir)
    with pytest.raises(UserError, match="already holds a run"):
        run(tmp_path, "once", 0, model=tiny_model_dir)


def test_resume_records_overrides_with_the_step_they_took_effect(tmp_path, tiny_model_dir):
    out, _, _ = run(tmp_path, "rec", 1, ["rl.save_every=1"], model=tiny_model_dir)
    run_train(config_for_resume(out, ["rl.steps=2", "rl.algo=rloo"]), resume=True, log=lambda *_: None)
    saved = build_config(out / "config.yaml")
    assert saved.rl.algo == "rloo" and saved.rl.steps == 2  # config.yaml holds the settings in force now
    assert [r.model_dump() for r in saved.resumes] == [
        {"from_step": 2, "changed": {"rl.algo": ["grpo", "rloo"], "rl.steps": [1, 2]}}]
    run_train(config_for_resume(out, ["rl.steps=3"]), resume=True, log=lambda *_: None)
    saved = build_config(out / "config.yaml")
    assert [(r.from_step, r.changed) for r in saved.resumes] == [
        (2, {"rl.algo": ["grpo", "rloo"], "rl.steps": [1, 2]}), (3, {"rl.steps": [2, 3]})]
    assert [r["step"] for r in read_metrics(out / "metrics.jsonl")] == [0, 1, 2, 3]
    with pytest.raises(UserError, match="already at step 3 and rl.steps is 3, nothing to do"):
        config_for_resume(out, [])
    with pytest.raises(UserError, match="conflicts with --resume"):
        config_for_resume(out, [f"out_dir={tmp_path / 'elsewhere'}", "rl.steps=4"])
    assert config_for_resume(out, [f"out_dir={out}", "rl.steps=4"]).out_dir == str(out)  # the same dir is fine


def test_a_fresh_run_without_steps_reports_its_step_0_evaluation(tmp_path, tiny_model_dir, capsys):
    with pytest.raises(SystemExit) as exc:
        main(["train", "--model", str(tiny_model_dir), "--out", str(tmp_path / "zero"), "rl.steps=0", *SMALL])
    assert exc.value.code == 0
    done = capsys.readouterr().out.strip().splitlines()[-1]
    assert done.startswith("done: step 0, eval success ") and "nan" not in done


def test_interrupted_train_says_what_was_saved_and_how_to_resume(tmp_path, tiny_model_dir, monkeypatch, capsys):
    real_step = RLTrainer.train_step

    def second_step_interrupted(trainer):
        if trainer.step == 1:
            raise KeyboardInterrupt
        return real_step(trainer)

    monkeypatch.setattr(RLTrainer, "train_step", second_step_interrupted)
    out = tmp_path / "stopped"
    with pytest.raises(SystemExit) as exc:
        main(["train", "--model", str(tiny_model_dir), "--out", str(out), "rl.steps=3", "rl.save_every=1", *SMALL])
    assert exc.value.code == 130
    err = capsys.readouterr().err.strip().splitlines()
    assert any(line.startswith("step 1/3: succ ") and " s, eta 0:" in line for line in err)  # not a terminal
    assert err[-1] == (f"interrupted after 1 of 3 steps; the newest checkpoint is {out}/checkpoints/step_000001; "
                       f"continue with: creditflow train --resume {out}")


def test_interrupted_sft_says_nothing_was_saved(tmp_path, tiny_model_dir, monkeypatch, capsys):
    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(sft_recipe, "train_sft", interrupted)
    out = tmp_path / "sft"
    with pytest.raises(SystemExit) as exc:
        main(["sft", "--model", str(tiny_model_dir), "--out", str(out), "sft.demos=2"])
    assert exc.value.code == 130
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        f"interrupted during SFT; nothing saved yet ({out}/sft_model is written when SFT ends)")
    assert not (out / "sft_tmp").exists()


def test_logprob_gap_is_measured_on_request_and_skipped_for_hf_by_default(tmp_path, tiny_model_dir):
    """hf samples with the trained weights, so its gap is float noise: no extra forward pass unless asked."""
    out, _, _ = run(tmp_path, "default", 1, ["rl.eval_every=0"], model=tiny_model_dir)
    assert "train/rollout_logprob_gap" not in read_metrics(out / "metrics.jsonl")[-1]
    out, _, _ = run(tmp_path, "asked", 1, ["rl.eval_every=0", "rl.logprob_gap=true"], model=tiny_model_dir)
    assert read_metrics(out / "metrics.jsonl")[-1]["train/rollout_logprob_gap"] < 1e-4
