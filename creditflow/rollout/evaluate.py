"""Held-out evaluation (one episode per seed) and the rollout metrics every run logs."""

from __future__ import annotations

import numpy as np

from creditflow.policy.backends.base import SamplingParams
from creditflow.rollout.engine import RolloutEngine, TaskSpec
from creditflow.rollout.trajectory import Trajectory


def evaluate_seeds(engine: RolloutEngine, seeds: list[int], sampling: SamplingParams,
                   env_name: str) -> tuple[dict, list[Trajectory]]:
    """Greedy (by default) held-out evaluation: one episode per seed."""
    specs = [TaskSpec(task_id=f"{env_name}/{s}", seed=s) for s in seeds]
    trajs = engine.rollout(specs, 1, sampling=sampling)
    return rollout_metrics(trajs, "eval"), trajs


def rollout_metrics(trajs: list[Trajectory], prefix: str) -> dict:
    if not trajs:
        return {}
    n_steps = [len(t) for t in trajs]
    invalid = sum(1 for t in trajs for s in t.steps if not s.valid)
    # a step that left the env's state unchanged (Sokoban: walking into a wall); the tiny greedy policy's
    # typical failure is repeating one such move until the episode ends
    noop = sum(1 for t in trajs for s in t.steps if s.state and s.state == s.next_state)
    return {
        f"{prefix}/success_rate": float(np.mean([t.success for t in trajs])),
        f"{prefix}/score": float(np.mean([t.score for t in trajs])),
        f"{prefix}/reward": float(np.mean([t.total_reward for t in trajs])),
        f"{prefix}/steps": float(np.mean(n_steps)),
        f"{prefix}/invalid_frac": invalid / max(1, sum(n_steps)),
        f"{prefix}/noop_frac": noop / max(1, sum(n_steps)),
        # episodes a step limit ended (the env's max_steps or rollout.max_steps), not the env's own end
        f"{prefix}/truncated_frac": float(np.mean([t.truncated for t in trajs])),
        f"{prefix}/episodes": len(trajs),
    }
