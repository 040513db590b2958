"""GRPO: group-normalised terminal return (CRPS paper, 002, Eq. 4; Shao et al. 2024).

A^(g) = (R^(g) - mu_R) / (sigma_R + eps), mu_R and sigma_R^2 the group's mean and population variance.
Every response token of trajectory g gets A^(g).
"""

from __future__ import annotations

import numpy as np
from pydantic import Field

from creditflow.credit.registry import Knobs, register_estimator
from creditflow.credit.returns import ReturnSource, broadcast_advantages, group_return_metrics, trajectory_return
from creditflow.rollout.trajectory import Trajectory, group_by


def grpo_advantages(returns, eps: float = 1e-6, normalize_std: bool = True) -> np.ndarray:
    """Eq. 4 (002): A = (R - mean) / (std + eps); ``normalize_std=False`` keeps only the mean shift."""
    r = np.asarray(returns, dtype=np.float64)
    if r.size == 0:
        return r
    centered = r - r.mean()  # Eq. 4: mu_R
    if not normalize_std:
        return centered
    std = r.std()  # Eq. 4: sigma_R (1/G, population std)
    if std == 0.0:  # all-equal group: no signal (the "reward extremity" of 002 Sec. 3.2)
        return centered
    return centered / (std + eps)


class GRPOKnobs(Knobs):
    """Knobs of ``grpo``."""

    reward_source: ReturnSource = "return"
    """R of a trajectory: return (summed step rewards, 002 Eq. 4), score (final graded score) or success (0/1)."""
    eps: float = Field(1e-6, ge=0)
    """eps added to the group std (002 Eq. 4); default 1e-6."""
    normalize_std: bool = True
    """Divide by the group std (002 Eq. 4); false keeps only the mean shift (Dr. GRPO style)."""


@register_estimator("grpo", knobs=GRPOKnobs)
def grpo(trajectories: list[Trajectory], knobs: GRPOKnobs) -> dict:
    """GRPO (002 Eq. 4): every step gets its trajectory's group-normalised return."""
    groups = group_by(trajectories)
    for group in groups.values():
        returns = [trajectory_return(t, knobs.reward_source) for t in group]
        broadcast_advantages(group, grpo_advantages(returns, eps=knobs.eps, normalize_std=knobs.normalize_std))
    return group_return_metrics(groups, knobs.reward_source)
