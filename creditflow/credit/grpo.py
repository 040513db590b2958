"""GRPO: group-normalised terminal return (CRPS paper, 002, Eq. 4; Shao et al. 2024).

A^(g) = (R^(g) - mu_R) / (sigma_R + eps), mu_R and sigma_R^2 the group's mean and population variance.
Every response token of trajectory g gets A^(g).
"""

from __future__ import annotations

import numpy as np


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
