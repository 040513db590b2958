"""``creditflow demo``: the main job, end to end on a laptop CPU.

Builds the tiny Qwen2-architecture policy, fine-tunes it on BFS-solver demonstrations (pi_SFT),
evaluates it on held-out levels, trains it with RewardFlow, evaluates again and writes a report folder
with the learning curve and a markdown summary. The defaults below take 21-30 minutes on 2 CPU cores
(docs/results/demo-seeds.md); every value can be overridden with ``key=value`` (``rl.steps=60`` cuts the RL part
by 40%, at about half the gain).
"""

from __future__ import annotations

import copy
import time
from pathlib import Path

from creditflow.config import build_config, set_dotted, setting
from creditflow.recipes.report import write_report
from creditflow.recipes.train import run_train

DEMO_DEFAULTS: dict = {
    "out_dir": "runs/demo",
    "env": {"name": "sokoban"},
    "sft": {"demos": 384, "epochs": 2.0, "lr": 1e-3, "batch_size": 16},
    "rollout": {"tasks_per_step": 8, "group_size": 8},
    "generation": {"max_new_tokens": 16},
    # RewardFlow (paper 003) on binary success, 8 tasks x 8 rollouts, one Adam step per RL step at lr 2e-4, 100
    # steps: +0.084 held-out greedy success over pi_SFT on 512 levels, mean of 5 seeds, 95% interval [+0.053,
    # +0.107] (+0.109, +0.082, +0.113, +0.023, +0.092; benchmarks/results/demo_seeds.json), in 25-30 min on 2 CPU
    # cores. 60 steps gave +0.041 to +0.062 over two reruns of the same seeds (demo_seeds_rf60.json,
    # demo_seeds_shared.json), the earlier GRPO defaults (16 x 4, lr 4e-4, 2 mini-batches, 30 steps) +0.019
    # (benchmarks/results/demo_sweep.md).
    # pi_SFT's greedy failures are wall-bumping loops; RewardFlow's action reward R(s') - R(s) (Eq. 4) is 0 for a
    # move that leaves the grid unchanged, so a bump scores below a move made from the same state, which GRPO's
    # one-number-per-trajectory advantage cannot do. Groups of 8 leave fewer all-fail/all-success groups
    # (no signal) than groups of 4. No KL term, as in the runs measured.
    "rl": {"algo": "rewardflow", "credit": {"reward_source": "success"}, "steps": 100, "lr": 2e-4,
           "minibatches": 1, "loss_agg": "traj-mean", "kl_coef": 0.0, "eval_every": 10, "eval_episodes": 128,
           "test_episodes": 128, "save_every": 10},
}

# The demo's RL settings until 2026-11-25 (GRPO on success, 16 x 4, lr 4e-4, 2 mini-batches), as overrides of
# the defaults above: the golden run and benchmarks/step_cost.py were recorded with them and keep them. GRPO's
# std was then the population std (ddof=0, its default until issue 74 made the sample std every estimator's).
EARLIER_GRPO_DEMO: list[str] = ["rl.algo=grpo", "rollout.tasks_per_step=16", "rollout.group_size=4", "rl.lr=4e-4",
                                "rl.minibatches=2", "rl.credit.ddof=0"]

# Per-env demo settings, under the user's config file and overrides.
# sokoban: the tiny from-scratch policy gets each box's offset in words next to the grid; from the bare grid
#   it needs far more SFT than a 15-minute CPU budget allows to learn where things are (docs/environments.md).
# webshop: search queries need a longer response budget, prompts with a results page run to ~1k tokens, and
#   the graded score (WebShop's reward) is the outcome GRPO compares, as in the RRO and CRPS papers.
DEMO_ENV_SETTINGS: dict[str, dict[str, object]] = {
    "sokoban": {"env.kwargs.describe_positions": True},
    "webshop": {"generation.max_new_tokens": 48, "sft.max_length": 2048, "rl.credit.reward_source": "score",
                "rl.eval_episodes": 64},
}

QUICK: list[str] = [
    "sft.demos=32", "sft.epochs=1", "rollout.tasks_per_step=2", "rollout.group_size=2", "rl.steps=2",
    "rl.eval_every=1", "rl.eval_episodes=4", "rl.test_episodes=4", "rl.save_every=0",
]


def run_demo(overrides: list[str], env: str | None = None, out_dir: str | None = None, quick: bool = False,
             config_file: str | None = None) -> Path:
    extra = list(QUICK if quick else []) + list(overrides)
    if env:
        extra.insert(0, setting("env.name", env))
    if out_dir:
        extra.insert(0, setting("out_dir", out_dir))
    env_name = build_config(config_file, extra, base=copy.deepcopy(DEMO_DEFAULTS), where="demo config").env.name
    base = copy.deepcopy(DEMO_DEFAULTS)
    for dotted, value in DEMO_ENV_SETTINGS.get(env_name, {}).items():
        set_dotted(base, dotted, value)
    cfg = build_config(config_file, extra, base=base, where="demo config")
    t0 = time.perf_counter()
    out, trainer, _ = run_train(cfg)
    minutes = (time.perf_counter() - t0) / 60
    report = write_report(out, title=f"creditflow demo: {cfg.rl.algo} on {cfg.env.name}",
                          extra={"env": cfg.env.name, "algo": cfg.rl.algo, "steps": cfg.rl.steps,
                                 "wall time (min)": f"{minutes:.1f}"})
    return report
