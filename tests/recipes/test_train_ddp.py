"""creditflow launched as 2 CPU processes (``accelerate launch`` with configs/accelerate/ddp.yaml, gloo): RL
training writes one run from rank 0, keeps the curriculum state equal on both processes and resumes
exactly; SFT and DPO (TRL) train data parallel; every other command refuses to run as copies.

The update itself against one process on the same rows, case by case, is tests/trainer/test_distributed.py.
"""

import json
import math
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from creditflow.cli import main
from creditflow.config import build_config
from creditflow.errors import UserError
from creditflow.recipes.resolve import config_for_resume
from creditflow.recipes.train import run_train
from creditflow.trainer.metrics import read_metrics

ROOT = Path(__file__).resolve().parents[2]
DDP = ROOT / "configs" / "accelerate" / "ddp.yaml"
SMALL = ["rollout.tasks_per_step=2", "rollout.group_size=2", "rl.eval_episodes=3", "rl.eval_every=1",
         "generation.max_new_tokens=6", "rollout.max_steps=3", "rl.lr=1e-3", "tensorboard=false", "rl.save_every=1",
         "policy.device=cpu"]
# CRPS with a warm-started buffer: replay groups from the first step, so the buffer changes every step. The
# untrained tiny policy gets zero advantages; the entropy bonus moves its weights every step regardless.
CRPS = ["curriculum.name=crps", "curriculum.warm_start_demos=4", "curriculum.p_replay=0.5", "rl.kl_coef=0.01",
        "rl.entropy_coef=0.01"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(args: list[str], processes: int = 2) -> subprocess.CompletedProcess:
    """``accelerate launch --config_file configs/accelerate/ddp.yaml -m creditflow ARGS`` (must succeed)."""
    cmd = [str(Path(sys.executable).with_name("accelerate")), "launch", "--config_file", str(DDP),
           "--num_processes", str(processes), "--main_process_port", str(_free_port()), "-m", "creditflow", *args]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false", "HF_HUB_OFFLINE": "1"}
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=900, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    return proc


def untimed(rows: list[dict]) -> list[dict]:
    return [{k: v for k, v in r.items() if not (k.startswith("time/") or k.endswith("time_ms"))} for r in rows]


def weights(ckpt: Path) -> dict[str, torch.Tensor]:
    return load_file(str(ckpt / "model.safetensors"))


@pytest.mark.slow
def test_two_processes_write_one_run_keep_crps_equal_and_resume_exactly(tmp_path, tiny_model_dir):
    base = ["train", "--model", str(tiny_model_dir), *SMALL, *CRPS]
    full, part = tmp_path / "full", tmp_path / "part"
    out = launch([*base, "--out", str(full), "rl.steps=3"])
    assert out.stdout.count("done: step 3") == 1  # rank 0 speaks for both
    launch([*base, "--out", str(part), "rl.steps=1"])
    launch(["train", "--resume", str(part), "rl.steps=3"])

    # rank 0 alone wrote the run: one row per step, each saying 2 processes, and nothing else in the directory
    rows = read_metrics(full / "metrics.jsonl")
    assert [r["step"] for r in rows] == [0, 1, 2, 3]
    assert all(r["dist/world_size"] == 2 for r in rows)
    assert sorted(p.name for p in full.iterdir()) == ["checkpoints", "config.yaml", "metrics.jsonl"]
    assert all(r["train/episodes"] == 4 for r in rows[1:])  # 2 tasks x 2 rollouts: both processes' groups
    assert all(r["eval/episodes"] == 3 for r in rows)  # held-out seeds split 2 + 1 and gathered

    # the resumed run continues exactly: same rows, same weights
    assert untimed(read_metrics(part / "metrics.jsonl")) == untimed(rows)
    a, b = weights(full / "checkpoints" / "step_000003"), weights(part / "checkpoints" / "step_000003")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    start = weights(tiny_model_dir)
    assert max(float((a[k] - start[k]).abs().max()) for k in a) > 1e-3  # the policy did change

    # the curriculum state is the same on both processes (checked at every checkpoint), and it moved
    state = torch.load(full / "checkpoints" / "step_000003" / "trainer_state.pt", weights_only=False)
    assert state["world_size"] == 2 and len(state["rng"]) == 2
    assert len(state["hooks_digests"]) == 2 and state["hooks_digests"][0] == state["hooks_digests"][1]
    assert not torch.equal(state["rng"][0]["torch"], state["rng"][1]["torch"])  # each samples its own rollouts
    assert state["rng"][0]["task_rng"] == state["rng"][1]["task_rng"]  # ... of the same task draws
    assert any(r["crps/replay_share"] > 0 for r in rows[1:]) and state["hooks"]["buffer"]["entries"]


@pytest.mark.slow
def test_two_processes_take_the_one_process_step_on_the_same_tasks(tmp_path, tiny_model_dir):
    """Greedy rollouts make both runs see the same trajectories of the same tasks (each process rolls out
    one of the two); the entropy bonus gives a gradient. Rollout metrics are equal, the update's stats and
    the weights after one AdamW step agree to float noise (lr 1e-4: Adam moves a weight whose gradient is
    at noise level by a share of lr, see tests/trainer/test_distributed.py)."""
    settings = ["rl.steps=1", *SMALL, "generation.temperature=0", "rl.entropy_coef=0.01", "rl.kl_coef=0",
                "rl.lr=1e-4", "rollout.tasks_per_step=4"]
    one, two = tmp_path / "one", tmp_path / "two"
    run_train(build_config(None, [f"out_dir={one}", f"policy.model={tiny_model_dir}", *settings]), log=lambda *_: None)
    launch(["train", "--model", str(tiny_model_dir), "--out", str(two), *settings])
    (row1,), (row2,) = [[r for r in read_metrics(d / "metrics.jsonl") if r["step"] == 1] for d in (one, two)]
    assert row1.pop("dist/world_size") == 1 and row2.pop("dist/world_size") == 2
    for key in untimed([row1])[0]:
        if key.startswith(("train/loss", "train/pg_loss", "train/entropy", "train/grad_norm", "train/ratio")):
            assert row2[key] == pytest.approx(row1[key], rel=1e-5, abs=1e-7), key
        else:
            assert row2[key] == row1[key], key
    a, b = weights(one / "checkpoints" / "step_000001"), weights(two / "checkpoints" / "step_000001")
    start = weights(tiny_model_dir)
    assert max(float((a[k] - start[k]).abs().max()) for k in a) > 5e-5  # a real step
    for k in a:
        torch.testing.assert_close(b[k], a[k], atol=1e-6, rtol=0, msg=k)


@pytest.fixture(scope="module")
def pref_dir(tmp_path_factory):
    """Fixed-size (N=4) preference pairs on Sokoban from a scripted random policy."""
    from creditflow.pairs.collect import PreferenceCollector
    from creditflow.pairs.preferences import PreferenceWriter
    from tests.pairs.helpers import SOKOBAN, RandomPolicyBackend, engine

    d = tmp_path_factory.mktemp("prefs")
    c = PreferenceCollector(engine(RandomPolicyBackend(), SOKOBAN), exploration="fixed", candidates=4,
                            mc_rollouts=4, seed=1, env_name="sokoban")
    c.collect([300_000 + i for i in range(8)], PreferenceWriter(d, {"exploration": "fixed"}))
    return d


@pytest.mark.slow
def test_sft_and_rro_train_run_data_parallel_under_two_processes(tmp_path, tiny_model_dir, pref_dir):
    """TRL under 2 processes: each optimizer step takes 2 x the per-device batch, and rank 0 saves."""
    from creditflow.policy.load import load_policy
    from creditflow.pairs.preferences import read_preferences

    sft = tmp_path / "sft"
    launch(["sft", "--model", str(tiny_model_dir), "--out", str(sft), "sft.demos=8", "sft.epochs=1",
            "sft.batch_size=4", "policy.device=cpu"])
    metrics = json.loads((sft / "sft_metrics.json").read_text())
    assert metrics["sft/steps"] == math.ceil(metrics["sft/examples"] / (2 * 4))
    assert sorted(p.name for p in sft.iterdir()) == ["config.yaml", "sft_metrics.json", "sft_model"]
    assert not (sft / "sft_model" / "training_args.bin").exists()
    load_policy(sft / "sft_model", "cpu")

    dpo = tmp_path / "dpo"
    proc = launch(["rro", "train", "--model", str(sft / "sft_model"), "--data", str(pref_dir), "--out", str(dpo),
                   "rro.dpo.epochs=1", "rro.dpo.batch_size=2", "rro.dpo.lr=1e-3", "policy.device=cpu"])
    assert proc.stdout.count("DPO:") == 1
    metrics = json.loads((dpo / "dpo_metrics.json").read_text())
    assert metrics["dpo/steps"] == math.ceil(len(read_preferences(pref_dir)) / (2 * 2))
    load_policy(dpo / "dpo_model", "cpu")


@pytest.mark.parametrize("argv", [["eval", "--model", "m"], ["demo"], ["rro", "collect"], ["rro", "run"],
                                  ["credit", "-e", "grpo", "--in", "a", "--out", "b"]])
def test_commands_that_run_in_one_process_refuse_copies(monkeypatch, capsys, argv):
    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "runs in one process, but 2 were launched" in err


def test_train_under_processes_checks_before_any_work(tmp_path, tiny_model_dir, monkeypatch):
    """What two launched processes cannot do is one line before any work (no process group is started)."""
    single = tmp_path / "single"
    cfg = build_config(None, [f"out_dir={single}", f"policy.model={tiny_model_dir}", "rl.steps=1", *SMALL])
    run_train(cfg, log=lambda *_: None)
    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.raises(UserError, match=r"written by 1 process\(es\), this run has 2; resume it with no launcher"):
        run_train(config_for_resume(single, ["rl.steps=2"]), resume=True, log=lambda *_: None)
    new = [f"out_dir={tmp_path / 'new'}", f"policy.model={tiny_model_dir}", *SMALL]
    with pytest.raises(UserError, match=r"rollout.tasks_per_step=3 must be divisible by the 2 launched"):
        run_train(build_config(None, [*new, "rollout.tasks_per_step=3"]), log=lambda *_: None)
    monkeypatch.setenv("ACCELERATE_USE_FSDP", "true")
    with pytest.raises(UserError, match="the FSDP launch config shards it"):
        run_train(build_config(None, new), log=lambda *_: None)
    with pytest.raises(SystemExit) as exc:  # sft on CPU: accelerate would quietly replicate instead of sharding
        main(["sft", "--model", str(tiny_model_dir), "--out", str(tmp_path / "sft"), "policy.device=cpu"])
    assert exc.value.code == 2
    assert not (tmp_path / "new").exists() and not (tmp_path / "sft").exists()
