"""Trajectory-level outcomes shared by the estimators: the scalar return R of a trajectory and the
helpers of the trajectory-level estimators (GRPO, RLOO) that give every step its trajectory's advantage.
"""

from __future__ import annotations

from typing import Literal, get_args

import numpy as np

from creditflow.credit.registry import CreditError
from creditflow.rollout.trajectory import Trajectory

ReturnSource = Literal["return", "score", "success"]
RETURN_SOURCES: tuple[str, ...] = get_args(ReturnSource)


def trajectory_return(traj: Trajectory, source: str = "return") -> float:
    """The scalar outcome R of a trajectory: summed step rewards, final score, or success (0/1)."""
    if source == "return":
        return traj.total_reward
    if source == "score":
        return float(traj.score)
    if source == "success":
        return 1.0 if traj.success else 0.0
    raise CreditError(f"reward_source must be one of {', '.join(RETURN_SOURCES)}, got {source!r}")


def broadcast_advantages(group: list[Trajectory], advantages: np.ndarray) -> None:
    """Give every step its trajectory's advantage; ``step_reward`` = the env reward."""
    for traj, adv in zip(group, advantages):
        for step in traj.steps:
            step.advantage = float(adv)
            step.step_reward = step.reward


def group_return_metrics(groups: dict[str, list[Trajectory]], source: str) -> dict:
    """Groups, fraction of groups whose returns are all equal (no signal), mean return."""
    returns = [[trajectory_return(t, source) for t in g] for g in groups.values()]
    flat = [r for g in returns for r in g]
    degenerate = sum(1 for g in returns if len(g) > 1 and max(g) == min(g))
    return {
        "credit/groups": len(returns),
        "credit/degenerate_group_frac": degenerate / max(1, len(returns)),
        "credit/return_mean": float(np.mean(flat)) if flat else 0.0,
    }
