"""Grouped normalisation shared by RewardFlow (Eq. 6-8) and GiGPO (its Eq. 3 and 7).

``grouped_normalize(x, groups)`` returns ``(x - mean_g) / (std_g + eps)`` (or ``x - mean_g``), with the
mean and the standard deviation taken over the members of each group. ``ddof=1`` (default) is the
*sample* std (RewardFlow Eq. 6 "sample standard deviation with small positive eps", as ``torch.std`` in
both official code bases and in verl); ``ddof=0`` the population std (1/G, as CRPS Eq. 4 writes GRPO).
A group of one has no baseline to compare with and gets 0 (RewardFlow §4.2: single-action states are
"uninformative (always zero)"); a group whose values are all equal gets exactly 0.

Everything is vectorised: one stable sort by group id, then ``np.add.reduceat`` per segment.
"""

from __future__ import annotations

import numpy as np

NORMALIZE_STD = ("std", "mean_std")  # divide by std + eps
NORMALIZE_MEAN = ("mean",)  # only subtract the group mean


def grouped_normalize(values, groups, *, divide_std: bool = True, eps: float = 1e-6, ddof: int = 1) -> np.ndarray:
    """Normalise ``values`` within the groups given by integer ids ``groups`` (same length).

    Returns a float64 array aligned with ``values``. Singletons and zero-variance groups give 0.
    """
    x = np.asarray(values, dtype=np.float64)
    g = np.asarray(groups)
    n = x.size
    out = np.zeros(n, dtype=np.float64)
    if n == 0:
        return out
    order = np.argsort(g, kind="stable")
    gs = g[order]
    xs = x[order]
    starts = np.flatnonzero(np.r_[True, gs[1:] != gs[:-1]])
    counts = np.diff(np.r_[starts, n])
    mean = np.add.reduceat(xs, starts) / counts
    seg = np.repeat(np.arange(starts.size), counts)
    dev = xs - mean[seg]
    # exact zero for constant groups (the mean of equal floats can differ from them by one ulp)
    constant = np.maximum.reduceat(xs, starts) == np.minimum.reduceat(xs, starts)
    dev[constant[seg]] = 0.0
    if divide_std:
        ss = np.add.reduceat(dev * dev, starts)
        std = np.sqrt(ss / np.maximum(counts - ddof, 1))  # ddof=1: sample std; ddof=0: population std
        dev = dev / (std[seg] + eps)
    dev[(counts == 1)[seg]] = 0.0  # singleton: no comparison possible
    out[order] = dev
    return out
