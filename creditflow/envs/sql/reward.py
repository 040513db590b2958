"""InterCode-SQL's reward, reimplemented without scipy.

On ``submit`` InterCode grades the result of the *last executed query* against the gold query's result
(``intercode/envs/sql/sql_env.py``, ``get_reward``):

1. Both results must be row lists; an error message or "no result set" (``None``) scores 0.
2. Every row is stringified (``str(tuple(row))``) so that mixed types compare safely.
3. ``IoU = Σ_r min(a_r, g_r) / Σ_r max(a_r, g_r)`` over the multisets of stringified rows (``a_r``/``g_r``:
   how often row ``r`` occurs in the agent's/gold result). Both empty ⇒ 1.
4. If the intersection is not empty, the intersecting rows are listed in the order each result gives them
   (each row kept as often as it is in the intersection, earliest occurrences first), and Kendall's τ-b is
   taken between the two lists *position by position* (values ranked as strings, as scipy ranks them).
   When τ is defined the reward is ``round(τ · IoU, 2)``; when it is not (fewer than two intersecting
   rows, or one list made of a single repeated row) the reward is the unrounded IoU.

τ can be negative, so the reward lies in [-1, 1]; success is ``reward == 1``.

Worked example (also in docs/environments.md): gold ``[(1,'a'), (2,'b'), (3,'c')]``, agent
``[(3,'c'), (2,'b'), (4,'d')]``. Intersection {(2,'b'), (3,'c')} (2 rows), union 4 rows ⇒ IoU = 0.5. In
agent order the intersecting rows are [(3,'c'), (2,'b')], in gold order [(2,'b'), (3,'c')]: the one pair
is discordant, τ = -1, reward = round(-1 × 0.5, 2) = -0.5.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from typing import Any

import numpy as np

__all__ = ["intercode_reward", "kendall_tau_b", "stringify_rows"]


def stringify_rows(rows: Sequence[Any]) -> list[str]:
    """``str(tuple(row))`` for every row (lists from JSON become tuples, as a DB-API cursor returns)."""
    out = []
    for row in rows:
        if isinstance(row, list):
            row = tuple(row)
        out.append(str(row))
    return out


def _ordered_intersection(items: list[str], budget: Counter) -> list[str]:
    """Items of ``items`` in order, each kept while the intersection budget for it lasts."""
    left = Counter(budget)
    kept = []
    for item in items:
        if left[item] > 0:
            left[item] -= 1
            kept.append(item)
    return kept


def kendall_tau_b(x: Sequence[Any], y: Sequence[Any]) -> float:
    """Kendall's τ-b between paired sequences ``x`` and ``y`` (NaN when undefined).

    τ_b = (n_c - n_d) / sqrt((n0 - n1)(n0 - n2)), n0 = n(n-1)/2, n1/n2 = pairs tied in x/y; the same
    statistic as ``scipy.stats.kendalltau`` (default variant 'b'). Values of any sortable type are
    compared through their ranks.
    """
    if len(x) != len(y):
        raise ValueError(f"kendall_tau_b: lengths differ ({len(x)} != {len(y)})")
    n = len(x)
    if n < 2:
        return math.nan
    rx = _ranks(x)
    ry = _ranks(y)
    s = 0  # n_c - n_d
    tie_x = tie_y = 0
    chunk = max(1, 4_000_000 // n)
    for start in range(0, n, chunk):
        stop = min(n, start + chunk)
        dx = np.sign(rx[start:stop, None] - rx[None, :])
        dy = np.sign(ry[start:stop, None] - ry[None, :])
        s += int((dx * dy).sum())
        tie_x += int((dx == 0).sum())
        tie_y += int((dy == 0).sum())
    # every unordered pair was seen twice; the diagonal (n self-pairs) counts as a tie in both
    s //= 2
    n0 = n * (n - 1) // 2
    n1 = (tie_x - n) // 2
    n2 = (tie_y - n) // 2
    denom = (n0 - n1) * (n0 - n2)
    if denom <= 0:
        return math.nan
    return s / math.sqrt(denom)


def _ranks(values: Sequence[Any]) -> np.ndarray:
    """Dense ranks of ``values`` in sorted order (ties share a rank)."""
    order = {v: i for i, v in enumerate(sorted(set(values)))}
    return np.fromiter((order[v] for v in values), dtype=np.int64, count=len(values))


def intercode_reward(agent_rows: Any, gold_rows: Any) -> float:
    """InterCode-SQL reward of ``agent_rows`` against ``gold_rows`` (see the module docstring).

    ``agent_rows``/``gold_rows``: a list of rows (tuples or lists) for a query that returned a result
    set; anything else (``None`` for no result set, an error string) scores 0.0.
    """
    if not isinstance(agent_rows, (list, tuple)) or not isinstance(gold_rows, (list, tuple)):
        return 0.0
    agent = stringify_rows(agent_rows)
    gold = stringify_rows(gold_rows)
    count_agent, count_gold = Counter(agent), Counter(gold)
    intersection = count_agent & count_gold
    union = count_agent | count_gold  # multiset union: max of the counts
    if not union:
        return 1.0  # both results empty
    reward = sum(intersection.values()) / sum(union.values())
    if intersection:
        agent_order = _ordered_intersection(agent, intersection)
        gold_order = _ordered_intersection(gold, intersection)
        tau = kendall_tau_b(agent_order, gold_order)
        if not math.isnan(tau):
            reward = round(tau * reward, 2)
    return float(reward)
