"""Advantage accuracy: every estimator's credit against A^π(s, a) = Q^π(s, a) − V^π(s), by Monte Carlo.

For every sampled step (s_t, a_t), from the restored state s_t: ``m`` continuations that take a_t and then
follow π (their success rate is Q̂), and ``m`` that follow π from s_t (the first action drawn from π too: V̂).
Â = Q̂ − V̂. Its standard error is √(q̃(1 − q̃)/m + ṽ(1 − ṽ)/m) with q̃ = (k + 1)/(m + 2) (the success
count ``k`` with one success and one failure added), so a step whose 2m continuations all agree still has a
non-zero standard error. All continuations of a batch of steps run at once (:meth:`Sim.run`).
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from creditflow.auditing.errors import AuditError
from creditflow.auditing.estimators import Arm, arm_advantages
from creditflow.auditing.metrics import all_metrics, resolved
from creditflow.auditing.sim import Episode, Node, Sim
from creditflow.credit.rows import Rows


def q_estimates(sim: Sim, nodes: Sequence[Node], actions: Sequence[str | None], m: int, policy,
                rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Success rate of ``m`` continuations from each node after its action (None: drawn from π), and its
    smoothed standard error (module docstring)."""
    if int(m) < 1:
        raise AuditError(f"M (Monte-Carlo continuations per estimate) must be at least 1, got {m}")
    jobs = [(node, action) for node, action in zip(nodes, actions) for _ in range(m)]
    wins = np.asarray(sim.run(jobs, policy, rng), dtype=np.float64).reshape(len(nodes), m)
    k = wins.sum(axis=1)
    smooth = (k + 1.0) / (m + 2.0)
    return k / m, np.sqrt(smooth * (1.0 - smooth) / m)


def true_advantages(sim: Sim, episodes: Sequence[Episode], m: int, policy, rng: np.random.Generator,
                    rows: Sequence[int] | None = None) -> dict:
    """Â^π of every step of ``episodes`` (episode after episode; ``rows``: only those steps, in that order), with
    Q̂, V̂ and the standard error."""
    nodes = [s.node for ep in episodes for s in ep.steps]
    taken = [s.action for ep in episodes for s in ep.steps]
    if rows is not None:
        nodes, taken = [nodes[i] for i in rows], [taken[i] for i in rows]
    q, se_q = q_estimates(sim, nodes + nodes, taken + [None] * len(nodes), m, policy, rng)
    n = len(nodes)
    return {"q": q[:n], "v": q[n:], "a": q[:n] - q[n:], "se": np.sqrt(se_q[:n] ** 2 + se_q[n:] ** 2)}


def subsample(n: int, size: int | None, rng: np.random.Generator) -> np.ndarray | None:
    """``size`` of the ``n`` steps drawn without replacement, in step order (None: every step, no draw)."""
    if size is None or size >= n:
        return None
    return np.sort(rng.choice(n, size=int(size), replace=False))


def accuracy(cols: Rows, truth: dict, arms: Sequence[Arm], rows: Sequence[int] | None = None) -> dict:
    """Per arm: :func:`creditflow.auditing.metrics.all_metrics` of its advantages against ``truth``. The
    advantages are computed on every step of ``cols`` (an estimator sees whole groups); with ``rows`` the metrics
    compare those steps only (``truth`` holds theirs, a random subsample: :func:`subsample`)."""
    out = {}
    groups, keys = cols.group_ids, cols.state_keys
    if rows is not None:
        groups, keys = [groups[i] for i in rows], [keys[i] for i in rows]
    for arm in arms:
        adv = arm_advantages(arm, cols)
        if rows is not None:
            adv = adv[np.asarray(rows)]
        out[arm.name] = all_metrics(adv, truth["a"], truth["se"], groups, keys)
    res = resolved(truth["a"], truth["se"])
    return {"steps": cols.n, **({"audited": len(rows)} if rows is not None else {}), "resolved": int(res.sum()), "positive": int((res & (truth["a"] > 0)).sum()),
            "negative": int((res & (truth["a"] < 0)).sum()), "mean_abs_a": float(np.mean(np.abs(truth["a"]))),
            "arms": out}
