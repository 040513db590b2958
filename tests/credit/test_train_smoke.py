"""A short ``creditflow train --algo rewardflow|gigpo`` run: both estimators drive the PPO-clip loss.

Runs the real CLI entry point on the session's tiny test policy: one RL step and a tiny evaluation.
"""

import json
import math

import pytest

from creditflow.cli import main

QUICK = ["rollout.max_steps=4", "rollout.tasks_per_step=2", "rollout.group_size=4", "rl.steps=1",
         "rl.eval_every=1", "rl.eval_episodes=2", "rl.save_every=0", "generation.max_new_tokens=12"]


@pytest.mark.parametrize("algo, knobs", [("rewardflow", ["rl.credit.gamma=0.9"]), ("gigpo", ["rl.credit.gamma=0.95"])])
def test_train_smoke(algo, knobs, tmp_path, tiny_model_dir):
    out = tmp_path / "run"
    with pytest.raises(SystemExit) as exc:
        main(["train", "--algo", algo, "--model", str(tiny_model_dir), "--out", str(out), *QUICK, *knobs,
              "tensorboard=false"])
    assert exc.value.code == 0
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines() if line.strip()]
    train = [r for r in rows if "credit/time_ms" in r]
    assert train, rows
    row = train[-1]
    if algo == "rewardflow":
        for key in ("credit/graph_nodes", "credit/graph_edges", "credit/unique_state_ratio",
                    "credit/reach_success_frac"):
            assert key in row
    losses = [v for k, v in row.items() if "loss" in k and isinstance(v, (int, float))]
    assert losses and all(math.isfinite(v) for v in losses)
