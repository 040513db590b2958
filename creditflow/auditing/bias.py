"""Bias apart from noise: each estimator's *expected* credit against A^π, and its spread across groups.

Spearman per step (:mod:`creditflow.auditing.accuracy`) mixes two things: how far an estimator's credit is from
A^π on average (bias) and how much it moves from one group to the next (noise). A biased but steady credit can
outrank an unbiased noisy one per step without being closer to A^π in expectation. Here the two are apart.

From the same task starts, ``k`` independent groups of each task are drawn (round r: one group of every task,
scored as the trainer scores one batch). For every (task, ``state_key``, action) seen in at least two rounds:

- its mean credit c̄ = the mean over rounds of c_r, the mean credit of its steps in round r, and the credit's
  variance across rounds (ddof 1);
- its A^π: the mean, over its steps, of Â by Monte Carlo (``m`` + ``m`` continuations from each distinct
  (task, state, step, action), as in the accuracy part; a policy that reads its history is estimated per path),
  with the standard error of that mean.

Per arm: ``pearson`` and ``spearman`` of c̄ with Â over those triples (bias: 1 is credit that is on average an
increasing linear / monotone function of A^π; both are scale-free), ``noise_var`` the mean across-round
variance, and ``noise_share`` = noise_var / (noise_var + the variance of c̄ over triples): the share of the
credit's spread that is which-group noise rather than a difference between (state, action) pairs (0: every
group gives a pair the same credit). :func:`bias_noise_metrics` is the pure part, on arrays.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from creditflow.auditing.accuracy import q_estimates, subsample as draw
from creditflow.auditing.estimators import Arm, arm_advantages, episode_rows
from creditflow.auditing.metrics import Z, pearson, spearman
from creditflow.auditing.sim import Sim


def bias_noise_metrics(triples: Sequence, rounds: Sequence[int], credit: dict[str, np.ndarray], a: np.ndarray,
                       se: np.ndarray, estimate: Sequence[int] | None = None, z: float = Z) -> dict:
    """The per-arm bias and noise numbers of the module docstring from per-step arrays: ``triples[i]`` the
    (task, state, action) of step i, ``rounds[i]`` its round, ``credit[arm][i]`` its credit, ``a[i]`` and ``se[i]``
    its Monte-Carlo Â and standard error, ``estimate[i]`` which Monte-Carlo estimate it reads (steps of one
    distinct state share one; default: each step its own). Ā of a triple is the mean of its steps' Â; its
    standard error √(Σ_e (n_e se_e)²) / n, where n_e of its n steps read estimate e (one estimate's error is
    shared by its steps, independent estimates' errors add in quadrature). ``resolved``: triples seen in two
    rounds or more with |Ā| > z SE."""
    triples = list(triples)
    estimate = np.arange(len(triples)) if estimate is None else np.asarray(estimate, dtype=np.int64)
    rounds = np.asarray(rounds, dtype=np.int64)
    a, se = np.asarray(a, dtype=np.float64), np.asarray(se, dtype=np.float64)
    index: dict = {}
    tid = np.fromiter((index.setdefault(t, len(index)) for t in triples), dtype=np.int64, count=len(triples))
    n_t = len(index)
    # which triples are seen in at least two rounds
    pair = np.unique(np.stack([tid, rounds], axis=1), axis=0) if tid.size else np.zeros((0, 2), dtype=np.int64)
    seen = np.bincount(pair[:, 0], minlength=n_t) if pair.size else np.zeros(n_t, dtype=np.int64)
    keep = seen >= 2
    out = {"triples": int(keep.sum()), "steps": int(keep[tid].sum()) if tid.size else 0, "resolved": 0, "arms": {}}
    if not keep.any():
        for arm in credit:
            out["arms"][arm] = {"pearson": float("nan"), "spearman": float("nan"), "noise_var": float("nan"),
                                "noise_share": float("nan"), "signal_var": float("nan")}
        return out
    counts = np.bincount(tid, minlength=n_t).astype(np.float64)
    a_bar = np.bincount(tid, a, minlength=n_t) / counts
    # the standard error of a triple's mean Â: steps sharing one estimate are perfectly correlated; the shared
    # estimates are told apart by their (a, se) values, each weighted by its steps
    a_se = _mean_se(tid, estimate, se, n_t, counts)
    out["resolved"] = int((keep & (np.abs(a_bar) > z * a_se)).sum())
    # per (triple, round) mean credit
    cell: dict = {}
    cid = np.fromiter((cell.setdefault((t, r), len(cell)) for t, r in zip(tid.tolist(), rounds.tolist())),
                      dtype=np.int64, count=tid.size)
    cell_triple = np.empty(len(cell), dtype=np.int64)
    for (t, _), c in cell.items():
        cell_triple[c] = t
    cell_n = np.bincount(cid, minlength=len(cell)).astype(np.float64)
    rounds_of = np.bincount(cell_triple, minlength=n_t).astype(np.float64)
    kept = np.flatnonzero(keep)
    for arm, values in credit.items():
        v = np.asarray(values, dtype=np.float64)
        c_r = np.bincount(cid, v, minlength=len(cell)) / cell_n  # per (triple, round)
        c_bar = np.bincount(cell_triple, c_r, minlength=n_t) / rounds_of
        dev = (c_r - c_bar[cell_triple]) ** 2
        var = np.bincount(cell_triple, dev, minlength=n_t) / np.maximum(rounds_of - 1.0, 1.0)
        noise = float(np.mean(var[kept]))
        signal = float(np.var(c_bar[kept], ddof=1)) if kept.size > 1 else float("nan")
        total = noise + signal
        out["arms"][arm] = {"pearson": pearson(c_bar[kept], a_bar[kept]), "spearman": spearman(c_bar[kept], a_bar[kept]),
                            "noise_var": noise, "signal_var": signal,
                            "noise_share": noise / total if total > 0 else float("nan")}
    return out


def _mean_se(tid: np.ndarray, estimate: np.ndarray, se: np.ndarray, n_t: int, counts: np.ndarray) -> np.ndarray:
    """Standard error of each triple's mean Â (:func:`bias_noise_metrics`)."""
    shared: dict = {}
    for t, e, s in zip(tid.tolist(), estimate.tolist(), se.tolist()):
        c, _ = shared.get((t, e), (0, s))
        shared[(t, e)] = (c + 1, s)
    var = np.zeros(n_t)
    for (t, _), (c, s) in shared.items():
        var[t] += (c * s) ** 2
    return np.sqrt(var) / counts


@dataclass(frozen=True)
class BiasPlan:
    """How :func:`bias_noise` samples: ``k`` rounds of groups of ``group_size``, ``m`` Monte-Carlo continuations
    per estimate, and ``subsample`` repeated triples estimated (None: every step)."""

    k: int
    group_size: int
    m: int
    subsample: int | None = None


def bias_noise(sim: Sim, policy, tasks: Sequence[int], plan: BiasPlan, arms: Sequence[Arm],
               rng: np.random.Generator) -> dict:
    """``plan.k`` rounds of one group of every task in ``tasks`` under ``policy``, every arm's credit per round, Â of
    every distinct (task, state, step, action) by Monte Carlo, then :func:`bias_noise_metrics`. Returns its dict
    with ``rounds``, ``episodes`` and ``mc_states`` (the distinct states estimated) added.

    Only triples seen in two rounds or more enter the metrics. ``plan.subsample``: of those, that many drawn at random
    are estimated (every step of each, in every round) and compared, and no other step is; the dict says how many
    there were (``triples_seen``). None: every step is estimated, with no draw (as the committed records ran)."""
    k, group_size, m, subsample = plan.k, plan.group_size, plan.m, plan.subsample
    history = bool(getattr(policy, "history", False))
    steps, rounds = [], []
    credit: dict[str, list] = {arm.name: [] for arm in arms}
    success = []
    for r in range(int(k)):
        episodes = sim.groups(list(tasks), group_size, policy, rng, prefix=f"r{r}/")
        cols = episode_rows(episodes)
        for arm in arms:
            credit[arm.name].append(arm_advantages(arm, cols))
        steps += [s for ep in episodes for s in ep.steps]
        rounds += [r] * cols.n
        success += [ep.success for ep in episodes]
    triples = [(s.node.seed, s.node.key, s.action) for s in steps]
    arrays = {name: np.concatenate(v) for name, v in credit.items()}
    seen, chosen = _repeated(triples, rounds, subsample, rng)
    if chosen is not None:  # only the chosen triples' steps: their metrics are whole, the others' unread
        take = np.fromiter((t in chosen for t in triples), dtype=bool, count=len(triples))
        steps = [s for s, t in zip(steps, take) if t]
        triples = [t for t, keep in zip(triples, take) if keep]
        rounds = [r for r, keep in zip(rounds, take) if keep]
        arrays = {name: v[take] for name, v in arrays.items()}
    # one Monte-Carlo estimate per distinct state (and path, for a policy that reads its history) and action
    ident = [(s.node.seed, s.node.key, s.node.t, s.action, s.node.actions if history else None) for s in steps]
    unique: dict = {}
    for i, u in enumerate(ident):
        unique.setdefault(u, i)
    firsts = list(unique.values())
    nodes = [steps[i].node for i in firsts]
    q, se_q = q_estimates(sim, nodes + nodes, [steps[i].action for i in firsts] + [None] * len(nodes), m, policy, rng)
    n = len(nodes)
    a_u, se_u = q[:n] - q[n:], np.sqrt(se_q[:n] ** 2 + se_q[n:] ** 2)
    which = _positions(ident, unique)
    out = bias_noise_metrics(triples, rounds, arrays, a_u[which], se_u[which], which)
    out.update(rounds=int(k), episodes=len(success), success=float(np.mean(success)), mc_states=n)
    if subsample is not None:
        out["triples_seen"] = seen
    return out


def _repeated(triples: list, rounds: list, subsample: int | None, rng: np.random.Generator) -> tuple[int, set | None]:
    """With ``subsample``: how many triples are seen in two rounds or more, and the set of those to estimate
    (``subsample`` of them drawn at random, or all when there are no more). None: (0, None), no draw."""
    if subsample is None:
        return 0, None
    first: dict = {}
    for t, r in zip(triples, rounds):
        first.setdefault(t, set()).add(r)
    repeated = [t for t, rs in first.items() if len(rs) >= 2]
    pick = draw(len(repeated), subsample, rng)
    return len(repeated), set(repeated) if pick is None else {repeated[i] for i in pick}


def _positions(ident: list, unique: dict) -> np.ndarray:
    pos = {u: j for j, u in enumerate(unique)}
    return np.fromiter((pos[u] for u in ident), dtype=np.int64, count=len(ident))
