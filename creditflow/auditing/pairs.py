"""RRO's preference pairs against Q^π, without DPO.

At every state s_t of episodes sampled under π, both samplers of :mod:`creditflow.pairs.rro` run under the
same π, each with its own draws: the reward-rising sampler (one candidate a ~ π(·|s_t) at a time, until one's
process reward reaches r_{t−1}, at most N_max) and fixed-size exploration (N candidates). A candidate's process
reward is the success rate of ``m`` continuations after it (the RRO paper's MC estimate), r_{t−1} that of
``m`` continuations from s_t. Each kept pair (chosen, rejected) is then judged by Q^π: ``truth_m`` further
continuations after each of its two actions give Q̂ and a standard error (as in :mod:`creditflow.auditing.accuracy`).

Per sampler: ``steps``, ``samples`` (candidates sampled: the paper's "# samples"), ``pairs`` (kept by the
sampler's rule), ``distinct`` (pairs whose two actions differ; a pair of one action twice teaches nothing),
``resolved`` (distinct pairs whose Q̂ differ by more than 2 standard errors), ``correct`` (resolved pairs whose
chosen action has the higher Q̂); ``accuracy`` = correct / resolved, ``samples_per_step`` and
``correct_per_sample`` = correct / samples.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from creditflow.auditing.accuracy import q_estimates
from creditflow.auditing.sim import Node, Sim
from creditflow.pairs.rro import fixed_size_sampler, rising_sampler

SAMPLERS = ("rising", "fixed")


def rro_pairs(sim: Sim, nodes: Sequence[Node], policy, rng: np.random.Generator, m: int = 5,
              candidates: int = 5, truth_m: int = 64) -> dict:
    """Both samplers at every node (module docstring); returns ``{sampler: counts and rates}``."""
    n = len(nodes)
    # candidate draws: N per node per sampler, from π at the node (the policy needs the env for an expert)
    draws = {name: sim.draw(nodes, policy, rng, candidates) for name in SAMPLERS}
    flat_nodes = [node for node in nodes for _ in range(2 * candidates)]
    flat_actions = [a for i in range(n) for name in SAMPLERS for a in draws[name][i]]
    rewards, _ = q_estimates(sim, flat_nodes + list(nodes), flat_actions + [None] * n, m, policy, rng)
    before = rewards[n * 2 * candidates:]
    per = rewards[:n * 2 * candidates].reshape(n, 2, candidates)
    picked = {name: [] for name in SAMPLERS}
    for i in range(n):
        for j, name in enumerate(SAMPLERS):
            stream = _Stream(draws[name][i], per[i, j])
            if name == "rising":
                picked[name].append(rising_sampler(stream.propose, stream.estimate, float(before[i]), candidates))
            else:
                picked[name].append(fixed_size_sampler(stream.propose, stream.estimate, candidates))
    # Q^π of every action a kept pair uses, by truth_m fresh continuations
    need = sorted({(i, s.chosen_candidate[1]) for name in SAMPLERS for i, s in enumerate(picked[name]) if s.keep}
                  | {(i, s.rejected_candidate[1]) for name in SAMPLERS for i, s in enumerate(picked[name]) if s.keep})
    q, se = q_estimates(sim, [nodes[i] for i, _ in need], [a for _, a in need], truth_m, policy, rng) if need \
        else (np.zeros(0), np.zeros(0))
    truth = {key: (float(v), float(e)) for key, v, e in zip(need, q, se)}
    out = {}
    for name in SAMPLERS:
        counts = {"steps": n, "samples": 0, "pairs": 0, "distinct": 0, "resolved": 0, "correct": 0}
        for i, s in enumerate(picked[name]):
            counts["samples"] += s.samples
            if not s.keep:
                continue
            counts["pairs"] += 1
            a, b = s.chosen_candidate[1], s.rejected_candidate[1]
            if a == b:
                continue
            counts["distinct"] += 1
            (qa, ea), (qb, eb) = truth[(i, a)], truth[(i, b)]
            if abs(qa - qb) > 2.0 * np.hypot(ea, eb):
                counts["resolved"] += 1
                counts["correct"] += int(qa > qb)
        counts["accuracy"] = counts["correct"] / counts["resolved"] if counts["resolved"] else float("nan")
        counts["samples_per_step"] = counts["samples"] / n if n else float("nan")
        counts["correct_per_sample"] = counts["correct"] / counts["samples"] if counts["samples"] else float("nan")
        out[name] = counts
    return out


class _Stream:
    """Pre-drawn candidates handed out in order: candidate k is ``(k, action)`` so equal actions stay apart."""

    def __init__(self, cands: list[str], vals: np.ndarray):
        self.cands, self.vals, self.k = cands, vals, 0

    def propose(self, n: int) -> list[tuple[int, str]]:
        out = [(self.k + j, self.cands[self.k + j]) for j in range(n)]
        self.k += n
        return out

    def estimate(self, cs: list[tuple[int, str]]) -> list[float]:
        return [float(self.vals[k]) for k, _ in cs]

