"""How close an estimator's advantages are to the true advantage A^π: small NumPy functions.

For steps i with estimator advantage ``adv[i]`` and Monte-Carlo estimate ``a[i]`` of A^π with standard error
``se[i]``:

- :func:`spearman`: rank correlation of ``adv`` and ``a`` (average ranks for ties; 0 when either is constant);
- :func:`sign_agreement`: over the *resolved* steps (|a| > 2 se), the share where ``adv`` has the sign of
  ``a``; an advantage of exactly 0 has no sign and counts as a miss (it teaches nothing there);
- :func:`auc`: the chance that a resolved step with A^π > 0 gets a larger advantage than a resolved step with
  A^π < 0 (ties count one half): the Mann-Whitney AUC;
- the same three *within shared states* (:func:`within_state`): among steps of one group that share a
  ``state_key`` (the comparison GiGPO's step groups make), Spearman of the values centred within each shared
  state, and, over pairs of steps in one shared state whose A^π differ by more than 2 standard errors, the
  share whose advantages are ordered the same way (sign agreement: ties are misses; AUC: ties count one half).

Each returns ``nan`` where it has nothing to measure (no resolved steps, no shared state).
"""

from __future__ import annotations

import numpy as np

Z = 2.0  # "resolved": |A^π| more than Z standard errors from zero


def rankdata(x) -> np.ndarray:
    """Ranks 1..n of ``x``, ties given their average rank."""
    x = np.asarray(x, dtype=np.float64)
    order = np.argsort(x, kind="mergesort")
    ranks = np.empty(x.size)
    sx = x[order]
    start = np.r_[0, np.flatnonzero(np.diff(sx)) + 1]
    end = np.r_[start[1:], x.size]
    avg = (start + end + 1) / 2.0  # ranks start+1..end average
    ranks[order] = np.repeat(avg, end - start)
    return ranks


def spearman(adv, a) -> float:
    adv, a = np.asarray(adv, dtype=np.float64), np.asarray(a, dtype=np.float64)
    if adv.size < 2:
        return float("nan")
    ra, rb = rankdata(adv), rankdata(a)
    ra, rb = ra - ra.mean(), rb - rb.mean()
    denom = np.sqrt((ra * ra).sum() * (rb * rb).sum())
    return float((ra * rb).sum() / denom) if denom > 0 else 0.0


def resolved(a, se, z: float = Z) -> np.ndarray:
    """Steps whose A^π estimate is more than ``z`` standard errors from zero."""
    return np.abs(np.asarray(a)) > z * np.asarray(se)


def sign_agreement(adv, a, se, z: float = Z) -> float:
    adv, a = np.asarray(adv, dtype=np.float64), np.asarray(a, dtype=np.float64)
    keep = resolved(a, se, z)
    if not keep.any():
        return float("nan")
    return float(np.mean(np.sign(adv[keep]) == np.sign(a[keep])))


def auc(adv, a, se, z: float = Z) -> float:
    adv, a = np.asarray(adv, dtype=np.float64), np.asarray(a, dtype=np.float64)
    keep = resolved(a, se, z)
    pos, neg = adv[keep & (a > 0)], adv[keep & (a < 0)]
    if pos.size == 0 or neg.size == 0:
        return float("nan")
    ranks = rankdata(np.r_[pos, neg])
    u = ranks[:pos.size].sum() - pos.size * (pos.size + 1) / 2.0
    return float(u / (pos.size * neg.size))


def shared_states(groups, keys) -> np.ndarray:
    """(S,) id of each step's shared state ((group, state_key) held by at least two steps), −1 elsewhere."""
    index: dict = {}
    ids = np.fromiter((index.setdefault((g, k), len(index)) for g, k in zip(groups, keys)), dtype=np.int64,
                      count=len(keys))
    sizes = np.bincount(ids, minlength=len(index))
    return np.where(sizes[ids] >= 2, ids, -1)


def within_state(adv, a, se, groups, keys, z: float = Z) -> dict:
    """``{"spearman", "sign", "auc", "steps", "pairs"}`` within shared states (module docstring)."""
    adv, a, se = (np.asarray(v, dtype=np.float64) for v in (adv, a, se))
    ids = shared_states(groups, keys)
    inside = ids >= 0
    out = {"steps": int(inside.sum()), "pairs": 0, "spearman": float("nan"), "sign": float("nan"),
           "auc": float("nan")}
    if not inside.any():
        return out
    sid, x, y, s = ids[inside], adv[inside], a[inside], se[inside]
    _, inv = np.unique(sid, return_inverse=True)
    n = np.bincount(inv)
    cx = x - (np.bincount(inv, x) / n)[inv]
    cy = y - (np.bincount(inv, y) / n)[inv]
    out["spearman"] = spearman(cx, cy)
    order = np.argsort(inv, kind="mergesort")
    bounds = np.r_[0, np.cumsum(n)]
    dx, dy = [], []
    for g in range(n.size):
        members = order[bounds[g]:bounds[g + 1]]
        i, j = np.triu_indices(members.size, k=1)
        i, j = members[i], members[j]
        sure = np.abs(y[i] - y[j]) > z * np.sqrt(s[i] ** 2 + s[j] ** 2)
        dx.append(x[i][sure] - x[j][sure])
        dy.append(y[i][sure] - y[j][sure])
    dx, dy = np.concatenate(dx), np.concatenate(dy)
    out["pairs"] = int(dx.size)
    if dx.size:
        same = np.sign(dx) == np.sign(dy)
        out["sign"] = float(same.mean())
        out["auc"] = float((same + 0.5 * (dx == 0)).mean())
    return out


def all_metrics(adv, a, se, groups, keys, z: float = Z) -> dict:
    """Every metric of one estimator on one sample of steps."""
    w = within_state(adv, a, se, groups, keys, z)
    return {"spearman": spearman(adv, a), "sign": sign_agreement(adv, a, se, z), "auc": auc(adv, a, se, z),
            "within_spearman": w["spearman"], "within_sign": w["sign"], "within_auc": w["auc"]}


def bootstrap_interval(values, reps: int = 2000, seed: int = 0) -> list[float] | None:
    """95% percentile-bootstrap interval of the mean (``benchmarks/stats.py``'s rule; NaNs dropped)."""
    v = np.asarray([x for x in values if x == x], dtype=np.float64)
    if v.size < 2:
        return None
    picks = np.random.default_rng(seed).integers(0, v.size, size=(reps, v.size))
    lo, hi = np.percentile(v[picks].mean(axis=1), [2.5, 97.5])
    return [float(lo), float(hi)]


def pearson(x, y) -> float:
    """Linear correlation of ``x`` and ``y`` (0 when either is constant, nan for fewer than two values)."""
    x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    if x.size < 2:
        return float("nan")
    x, y = x - x.mean(), y - y.mean()
    denom = np.sqrt((x * x).sum() * (y * y).sum())
    return float((x * y).sum() / denom) if denom > 0 else 0.0
