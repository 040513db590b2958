"""The train recipe: run directories, stable metric keys, checkpoints, exact resume."""

import json

import pytest

from creditflow.config import build_config
from creditflow.train.metrics import read_metrics
from creditflow.recipes.train import config_for_resume, run_train

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
    from creditflow.errors import UserError

    run(tmp_path, "once", 0, model=tiny_model_dir)
    with pytest.raises(UserError, match="already holds a run"):
        run(tmp_path, "once", 0, model=tiny_model_dir)
