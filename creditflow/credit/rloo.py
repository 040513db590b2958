"""RLOO: REINFORCE leave-one-out baseline (Kool et al. 2019; Ahmadian et al. 2024).

A^(i) = R^(i) - 1/(G-1) * sum_{j != i} R^(j)  ==  G/(G-1) * (R^(i) - mean(R)).
A group of one has no baseline: its advantage is 0.
"""

from __future__ import annotations

import numpy as np


def rloo_advantages(returns) -> np.ndarray:
    r = np.asarray(returns, dtype=np.float64)
    g = r.size
    if g < 2:
        return np.zeros_like(r)
    loo_mean = (r.sum() - r) / (g - 1)  # mean of the other G-1 returns
    return r - loo_mean
