"""``creditflow train --algo rewardflow policy.backend=vllm``: a full smoke run through the CLI, with full
weights and with LoRA.

Every step logs ``train/rollout_logprob_gap``; it stays at float noise only if the engine received the
weights of every update (with lr 0.02 a stale engine shows a gap of ~1e-1 from step 2 on).
"""

import json
import subprocess
import sys

import pytest

pytest.importorskip("vllm")

pytestmark = [pytest.mark.vllm, pytest.mark.slow]


def test_rewardflow_with_a_colocated_vllm_engine(tiny_vllm_model_dir, tmp_path):
    out = tmp_path / "run"
    args = ["train", "--algo", "rewardflow", "--model", str(tiny_vllm_model_dir), "--out", str(out),
            "policy.backend=vllm", "policy.device=cpu", "policy.dtype=float32", "policy.vllm_kv_cache_gib=0.25",
            "policy.vllm_max_model_len=1024", "rl.steps=3", "rollout.tasks_per_step=2", "rollout.group_size=4",
            "rollout.max_steps=5", "generation.max_new_tokens=12", "rl.lr=0.02", "rl.kl_coef=0.01", "rl.tis_cap=2",
            "rl.eval_episodes=2", "rl.eval_every=3", "tensorboard=false"]
    proc = subprocess.run([sys.executable, "-m", "creditflow", *args], capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in rows if r.get("step", 0) > 0]
    assert [r["step"] for r in steps] == [1, 2, 3]
    for r in steps:
        assert r["train/rollout_logprob_gap"] < 1e-3, r
        assert 0 < r["train/tis_weight_mean"] <= 2
    assert "eval/success_rate" in steps[-1]
    assert (out / "checkpoints" / "latest").exists()


def test_lora_with_a_colocated_vllm_engine_and_eval_of_its_checkpoint(tiny_vllm_model_dir, tmp_path):
    """The engine starts from the base model and gets the merged weights after every update; ``eval --backend
    vllm`` of the adapter checkpoint starts an engine from the base and gives what the HF backend gives."""
    out = tmp_path / "run"
    args = ["train", "--model", str(tiny_vllm_model_dir), "--out", str(out), "policy.backend=vllm",
            "policy.device=cpu", "policy.dtype=float32", "policy.vllm_kv_cache_gib=0.25",
            "policy.vllm_max_model_len=1024", "policy.lora=true", "policy.lora.r=4", "rl.steps=2",
            "rollout.tasks_per_step=2", "rollout.group_size=4", "rollout.max_steps=4", "generation.max_new_tokens=12",
            "rl.lr=0.05", "rl.entropy_coef=0.05", "rl.eval_episodes=2", "rl.eval_every=0", "tensorboard=false"]
    proc = subprocess.run([sys.executable, "-m", "creditflow", *args], capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in rows if r.get("step", 0) > 0]
    assert [r["step"] for r in steps] == [1, 2] and steps[-1]["train/kl"] > 0  # the adapter moved
    assert all(r["train/rollout_logprob_gap"] < 1e-3 for r in steps), steps
    ckpt = out / "checkpoints" / "step_000002"
    assert (ckpt / "adapter_model.safetensors").exists()
    shown = {}
    for backend in ("vllm", "hf"):
        proc = subprocess.run([sys.executable, "-m", "creditflow", "eval", "--model", str(ckpt), "--episodes", "2",
                               "--backend", backend, "policy.device=cpu", "policy.dtype=float32",
                               "policy.vllm_kv_cache_gib=0.25", "policy.vllm_max_model_len=1024",
                               "generation.max_new_tokens=12", "rollout.max_steps=4"],
                              capture_output=True, text=True, timeout=900)
        assert proc.returncode == 0, proc.stderr[-3000:]
        shown[backend] = json.loads(proc.stdout)
    assert shown["vllm"] == shown["hf"]  # greedy: the same actions from the merged weights
