"""The golden run: a fixed-seed, 2-step slice of the main job whose metrics and weights must not change
when code is only moved or refactored (issue: "behaviour stays the same").

Two legs, both through the CLI so that they exercise the real wiring:

* ``demo``: ``creditflow demo`` (tiny policy, SFT, then RL) with the settings it had when the golden was
  recorded, pinned here so that a change of the demo's defaults does not move the golden: GRPO on success,
  16 x 4, lr 4e-4, 2 mini-batches, traj-mean, no KL; and a smaller budget: 64 SFT demos x 1 epoch, 2 RL
  steps, 16 held-out levels.
* ``rewardflow_crps``: ``creditflow train`` from the demo's pi_SFT with RewardFlow, a KL term (so the
  reference model and its log-probs run) and CRPS replay (warm-started buffer, p_replay 0.5).

``python -m tests.golden.golden_run --write`` re-records ``golden_run.json``; do that only for a change
that is meant to alter behaviour, and say so in the commit. The numbers are tied to the torch build and
CPU kind they were recorded on (one torch thread).
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

from creditflow.recipes.demo import EARLIER_GRPO_DEMO

GOLDEN = Path(__file__).with_name("golden_run.json")

# policy.share_prefix=false: the golden was recorded with every prompt and row computed in full and sampled by
# transformers' generate; sharing is exact up to float rounding and draws from the RNG in another order, so it
# has its own equivalence tests (tests/trainer/test_rl.py, tests/policy/test_hf_backend.py). policy.decode=auto
# keeps transformers' generate there (the lean decoder: tests/policy/test_lean_decode.py)
PLAIN = ["policy.share_prefix=false"]
DEMO = [*EARLIER_GRPO_DEMO, *PLAIN, "rl.steps=2", "sft.demos=64", "sft.epochs=1", "rl.eval_episodes=16",
        "rl.eval_every=1", "rl.test_episodes=0", "rl.save_every=0", "tensorboard=false"]
RF_CRPS = [*PLAIN, "rl.algo=rewardflow", "rl.credit={}", "rl.kl_coef=0.01", "curriculum.name=crps",
           "curriculum.warm_start_demos=8", "curriculum.p_replay=0.5", "rollout.tasks_per_step=4",
           "rollout.group_size=4", "rl.steps=2", "rl.eval_episodes=8", "rl.eval_every=1", "rl.save_every=0",
           "rl.lr=4e-4", "generation.max_new_tokens=16", "env.kwargs.describe_positions=true", "tensorboard=false"]


def _cli(args: list[str]) -> None:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false", "HF_HUB_OFFLINE": "1"}
    proc = subprocess.run([sys.executable, "-m", "creditflow", *args], capture_output=True, text=True, env=env,
                          timeout=1200)
    if proc.returncode != 0:
        raise RuntimeError(f"creditflow {' '.join(args[:3])} failed:\n{proc.stderr[-3000:]}")


def _metrics(run: Path) -> list[dict]:
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if line.strip()]
    return [{k: v for k, v in r.items() if not _timing(k)} for r in rows]


def _timing(key: str) -> bool:
    """Wall-clock metrics differ between runs by nature; everything else must not."""
    return key.startswith("time/") or key.endswith("time_ms")


def _weights(model_dir: Path) -> dict:
    from safetensors.numpy import load_file

    tensors = load_file(str(model_dir / "model.safetensors"))
    digest = hashlib.sha256()
    total = 0.0
    for name in sorted(tensors):
        arr = tensors[name]
        digest.update(name.encode())
        digest.update(arr.tobytes())
        total += float(abs(arr.astype("float64")).sum())
    return {"sha256": digest.hexdigest(), "abs_sum": total, "tensors": len(tensors)}


def _latest(run: Path) -> Path:
    return run / "checkpoints" / (run / "checkpoints" / "latest").read_text().strip()


def golden_run(root: Path) -> dict:
    demo, rf = Path(root) / "demo", Path(root) / "rf_crps"
    _cli(["demo", "--out", str(demo), *DEMO])
    _cli(["train", "--model", str(demo / "sft_model"), "--out", str(rf), *RF_CRPS])
    return {
        "demo": {"metrics": _metrics(demo), "sft_weights": _weights(demo / "sft_model"),
                 "final_weights": _weights(_latest(demo))},
        "rewardflow_crps": {"metrics": _metrics(rf), "final_weights": _weights(_latest(rf))},
    }


if __name__ == "__main__":
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        result = golden_run(Path(tmp))
    text = json.dumps(result, indent=1, sort_keys=True)
    if "--write" in sys.argv:
        GOLDEN.write_text(text + "\n")
        print(f"wrote {GOLDEN}")
    else:
        print(text)
