"""RLOO: REINFORCE leave-one-out baseline (Kool et al. 2019; Ahmadian et al. 2024).

A^(i) = R^(i) - 1/(G-1) * sum_{j != i} R^(j)  ==  G/(G-1) * (R^(i) - mean(R)).
A group of one has no baseline: its advantage is 0. RLOO divides by no std, so it has no ``ddof``.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from creditflow.credit.batch import StepBatch
from creditflow.credit.registry import Credit, Knobs, register_estimator
from creditflow.credit.returns import ReturnSource, trajectory_credit


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

    source: ClassVar[str] = 'the leave-one-out baseline'

    reward_source: ReturnSource = "return"
    """R of a trajectory: return (summed step rewards), score (final graded score) or success (0/1)."""


@register_estimator("rloo", knobs=RLOOKnobs)
def rloo(batch: StepBatch, knobs: RLOOKnobs) -> Credit:
    """RLOO: every step gets its trajectory's leave-one-out advantage."""
    return trajectory_credit(batch, knobs.reward_source, rloo_advantages)
