"""RLOO: REINFORCE leave-one-out baseline (Kool et al. 2019; Ahmadian et al. 2024).

A^(i) = R^(i) - 1/(G-1) * sum_{j != i} R^(j)  ==  G/(G-1) * (R^(i) - mean(R)).
A group of one has no baseline: its advantage is 0.
"""

from __future__ import annotations

import numpy as np

from creditflow.credit.registry import Knobs, register_estimator
from creditflow.credit.returns import ReturnSource, broadcast_advantages, group_return_metrics, trajectory_return
from creditflow.rollout.trajectory import Trajectory, group_by


def rloo_advantages(returns) -> np.ndarray:
    """Leave-one-out advantages of one group's returns (0 for a group of one)."""
    r = np.asarray(returns, dtype=np.float64)
    g = r.size
    if g < 2:
        return np.zeros_like(r)
    loo_mean = (r.sum() - r) / (g - 1)  # mean of the other G-1 returns
    return r - loo_mean


class RLOOKnobs(Knobs):
    """Knobs of ``rloo``."""

    reward_source: ReturnSource = "return"
    """R of a trajectory: return (summed step rewards), score (final graded score) or success (0/1)."""


@register_estimator("rloo", knobs=RLOOKnobs)
def rloo(trajectories: list[Trajectory], knobs: RLOOKnobs) -> dict:
    """RLOO: every step gets its trajectory's leave-one-out advantage."""
    groups = group_by(trajectories)
    for group in groups.values():
        returns = [trajectory_return(t, knobs.reward_source) for t in group]
        broadcast_advantages(group, rloo_advantages(returns))
    return group_return_metrics(groups, knobs.reward_source)
