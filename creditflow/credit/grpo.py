"""GRPO: group-normalised terminal return (CRPS paper, 002, Eq. 4; Shao et al. 2024).

A^(g) = (R^(g) - mu_R) / (sigma_R + eps), mu_R and sigma_R the group's mean and standard deviation: the sample
std (``ddof=1``, the default), as GRPO's implementations compute it (TRL's and verl's ``torch.std``) and as every
other estimator here does; CRPS Eq. 4 writes the population variance (1/G, ``ddof=0``, the ``ddof`` knob).
Every response token of trajectory g gets A^(g). A group of one rollout, or of equal returns, gets 0.
"""

from __future__ import annotations

import functools
from typing import ClassVar

import numpy as np
from pydantic import Field

from creditflow.credit.batch import StepBatch
from creditflow.credit.registry import Credit, Knobs, register_estimator
from creditflow.credit.returns import ReturnSource, trajectory_credit


def grpo_advantages(returns, eps: float = 1e-6, normalize_std: bool = True, ddof: int = 1) -> np.ndarray:
    """Eq. 4 (002): A = (R - mean) / (std + eps); ``normalize_std=False`` keeps only the mean shift."""
    r = np.asarray(returns, dtype=np.float64)
    if r.size == 0:
        return r
    centered = r - r.mean()  # Eq. 4: mu_R
    if not normalize_std or r.size <= ddof:  # a group of one has no spread: its centred value is 0
        return centered
    std = r.std(ddof=ddof)  # Eq. 4: sigma_R (ddof=1: sample std; ddof=0: 1/G, population std)
    if std == 0.0:  # all-equal group: no signal (the "reward extremity" of 002 Sec. 3.2)
        return centered
    return centered / (std + eps)


class GRPOKnobs(Knobs):
    """Knobs of ``grpo``."""

    source: ClassVar[str] = "CRPS paper Eq. 4; checked against SkyRL's GRPO"

    reward_source: ReturnSource = "return"
    """R of a trajectory: return (summed step rewards, 002 Eq. 4), score (final graded score) or success (0/1)."""
    eps: float = Field(1e-6, ge=0)
    """eps added to the group std (002 Eq. 4); default 1e-6."""
    normalize_std: bool = True
    """Divide by the group std (002 Eq. 4); false keeps only the mean shift (Dr. GRPO style)."""
    ddof: int = Field(1, ge=0, le=1)
    """Std of Eq. 4: 1 = sample std (TRL, verl: torch.std; every estimator's default), 0 = population std (1/G, as
    002 Eq. 4 writes it)."""


@register_estimator("grpo", knobs=GRPOKnobs)
def grpo(batch: StepBatch, knobs: GRPOKnobs) -> Credit:
    """GRPO (002 Eq. 4): every step gets its trajectory's group-normalised return."""
    per_group = functools.partial(grpo_advantages, eps=knobs.eps, normalize_std=knobs.normalize_std,
                                  ddof=knobs.ddof)
    return trajectory_credit(batch, knobs.reward_source, per_group)
