"""Reward-extremity diagnostics (paper 002, §5.2, Eq. 14) on group outcomes.

With binary outcomes and k successes among the G rollouts of a group, p(1) = k/G, p(0) = 1 - k/G and
H_group = -p(1) log2 p(1) - p(0) log2 p(0) (bits, 0 log 0 = 0). Per step we report the fraction of
all-zero groups (k = 0), of all-one groups (k = G) and H_batch = mean over groups of H_group.
"""

from __future__ import annotations

import math
from typing import Iterable, Sequence


def group_entropy(outcomes: Sequence[float | bool]) -> float:
    """Eq. 14: binary entropy (bits) of the group's empirical success distribution."""
    if not outcomes:
        return 0.0
    p1 = sum(1 for o in outcomes if bool(o)) / len(outcomes)
    return -sum(p * math.log2(p) for p in (p1, 1.0 - p1) if p > 0.0)


def group_diagnostics(groups: Iterable[Sequence[float | bool]], prefix: str = "groups") -> dict:
    """``{prefix}/all_zero_frac``, ``{prefix}/all_one_frac``, ``{prefix}/entropy`` (H_batch, bits) over
    non-empty groups of binary outcomes; all 0.0 when there are no groups."""
    groups = [list(g) for g in groups if len(g) > 0]
    n = len(groups)
    if n == 0:
        return {f"{prefix}/all_zero_frac": 0.0, f"{prefix}/all_one_frac": 0.0, f"{prefix}/entropy": 0.0}
    all_zero = sum(1 for g in groups if not any(bool(o) for o in g))
    all_one = sum(1 for g in groups if all(bool(o) for o in g))
    return {
        f"{prefix}/all_zero_frac": all_zero / n,
        f"{prefix}/all_one_frac": all_one / n,
        f"{prefix}/entropy": sum(group_entropy(g) for g in groups) / n,  # H_batch
    }
