"""Behaviour policies of the audit: the env's expert mixed with uniform valid actions, and a tabular softmax.

A policy acts on a batch of states at once: ``act(items, rng) -> actions``, each item ``(seed, state_key,
admissible_actions, env)`` (the env in that state, for an expert that plans from it). ``probs(item)`` gives
π(·|s) over the item's admissible actions. Both are Markov in ``(seed, state_key)``, so Q^π(s, a) is well
defined and Monte Carlo from a restored state estimates it.

- :class:`EpsilonExpert`: with probability 1 − ε the expert's next action (``env.expert_actions()[0]`` from
  the current state, cached per state), else a uniform admissible action. Where the expert has no plan (a dead
  end) it is uniform. ε = 1 is the uniform policy and needs no expert.
- :class:`Tabular`: a softmax over the admissible actions with one logit per (``state_key``, action), stored
  in one padded table so a batch of states is one gather; the learning race trains it
  (:func:`ppo_clip_step`).
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from creditflow.auditing.errors import AuditError
from creditflow.envs.check import _short
from creditflow.envs.checked import CheckedEnv

Item = tuple  # (seed, state_key, admissible actions, env)


def sample_rows(probs: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """One index per row of ``probs`` (rows sum to 1), by one uniform draw per row."""
    u = rng.random(probs.shape[0])[:, None]
    cdf = np.cumsum(probs, axis=1)
    return np.minimum((cdf < u * cdf[:, -1:]).sum(axis=1), probs.shape[1] - 1)


class EpsilonExpert:
    """π(a|s) = (1 − ε) 1[a = expert(s)] + ε / |A(s)|; uniform where the expert has no plan."""

    def __init__(self, epsilon: float):
        if not 0.0 <= float(epsilon) <= 1.0:
            raise AuditError(f"epsilon must be in [0, 1], got {epsilon!r}")
        self.epsilon = float(epsilon)
        self.name = f"expert, ε={self.epsilon:g}" if self.epsilon < 1 else "uniform"
        self._plan: dict[tuple, str | None] = {}

    def expert(self, seed, key: str, actions: Sequence[str], env) -> str | None:
        cache = (seed, key)
        if cache not in self._plan:
            plan_fn = getattr(env, "expert_actions", None)
            if not callable(plan_fn):
                raise AuditError(f"env {getattr(env, 'name', type(env).__name__)!r} has no expert (expert_actions): "
                                 "use epsilon 1 (uniform) or the tabular policy")
            self._plan[cache] = _first(plan_fn(), seed, actions, env)
        return self._plan[cache]

    def probs(self, item: Item) -> np.ndarray:
        seed, key, actions, env = item
        n = len(actions)
        p = np.full(n, 1.0 / n)
        if self.epsilon < 1.0:
            best = self.expert(seed, key, actions, env)
            if best is not None:
                p *= self.epsilon
                p[list(actions).index(best)] += 1.0 - self.epsilon
        return p

    def act(self, items: Sequence[Item], rng: np.random.Generator) -> list[str]:
        n = max(len(item[2]) for item in items)
        table = np.zeros((len(items), n))
        for i, item in enumerate(items):
            table[i, :len(item[2])] = self.probs(item)
        picks = sample_rows(table, rng)
        return [item[2][k] for item, k in zip(items, picks)]


def _first(plan, seed, actions: Sequence[str], env) -> str | None:
    """The first action of an expert's ``plan`` (None: no plan, a dead end), checked before use: a plan is a list
    of strings (never a string, whose first character is no action) and its first action one the state offers,
    or the ε-expert would be another policy than the one named. A broken rule is one line naming the env, the
    task and the step (:meth:`~creditflow.envs.checked.CheckedEnv.fail` for a user's env)."""
    if plan is None or (isinstance(plan, (list, tuple)) and not plan):
        return None
    if not isinstance(plan, (list, tuple)) or not all(isinstance(a, str) for a in plan):
        rule = f"expert_actions() must return a list of strings, got {_short(plan)}"
    elif plan[0] not in actions:
        shown = ", ".join(map(repr, actions[:6])) + (", ..." if len(actions) > 6 else "")
        rule = (f"expert_actions() plans {_short(plan[0])} first, which the state does not offer (its actions: "
                f"{shown}); the ε-expert plays the expert's next action among those offered")
    else:
        return plan[0]
    if isinstance(env, CheckedEnv):
        raise env.fail_here(rule)
    raise AuditError(f"env {getattr(env, 'name', type(env).__name__)!r}: task seed {seed}: {rule}")


class Tabular:
    """Softmax over admissible actions, one logit per (state_key, action); ``greedy`` picks the argmax (the
    first of equal logits)."""

    name = "tabular softmax"

    def __init__(self, capacity: int = 1024, width: int = 4):
        self.logits = np.zeros((capacity, width))
        self.count = np.zeros(capacity, dtype=np.int64)  # actions per row
        self.rows: dict[str, int] = {}
        self.actions: list[list[str]] = []  # row -> its actions, in first-seen order
        self.greedy = False

    def row(self, key: str, actions: Sequence[str]) -> int:
        r = self.rows.get(key)
        if r is None:
            r = self.rows[key] = len(self.actions)
            self.actions.append([])
            if r >= self.logits.shape[0]:
                self._grow(rows=2 * self.logits.shape[0])
        known = self.actions[r]
        if len(known) < len(actions) or any(a not in known for a in actions):
            for a in actions:
                if a not in known:
                    known.append(a)
            if len(known) > self.logits.shape[1]:
                self._grow(cols=max(len(known), 2 * self.logits.shape[1]))
            self.count[r] = len(known)
        return r

    def _grow(self, rows: int | None = None, cols: int | None = None) -> None:
        rows = rows or self.logits.shape[0]
        cols = cols or self.logits.shape[1]
        logits = np.zeros((rows, cols))
        logits[:self.logits.shape[0], :self.logits.shape[1]] = self.logits
        count = np.zeros(rows, dtype=np.int64)
        count[:self.count.size] = self.count
        self.logits, self.count = logits, count

    def table_probs(self, rows: np.ndarray) -> np.ndarray:
        """π over each row's actions (padded with zeros), shape (len(rows), width)."""
        logits = self.logits[rows]
        mask = np.arange(logits.shape[1])[None, :] < self.count[rows][:, None]
        z = np.where(mask, logits, -np.inf)
        z = z - z.max(axis=1, keepdims=True)
        e = np.where(mask, np.exp(z), 0.0)
        return e / e.sum(axis=1, keepdims=True)

    def _rows_cols(self, items: Sequence[Item]) -> tuple[np.ndarray, list[np.ndarray]]:
        rows = np.array([self.row(key, actions) for _, key, actions, _ in items], dtype=np.int64)
        return rows, [np.array([self.actions[r].index(a) for a in actions]) for r, (_, _, actions, _) in
                      zip(rows, items)]

    def probs(self, item: Item) -> np.ndarray:
        rows, cols = self._rows_cols([item])
        return self.table_probs(rows)[0, cols[0]]

    def act(self, items: Sequence[Item], rng: np.random.Generator) -> list[str]:
        rows = np.array([self.row(key, actions) for _, key, actions, _ in items], dtype=np.int64)
        p = self.table_probs(rows)
        offered = [set(item[2]) for item in items]
        exact = all(len(self.actions[r]) == len(o) for r, o in zip(rows, offered))
        if not exact:  # a state offering a subset of its row's actions: renormalise over what it offers
            for i, (r, o) in enumerate(zip(rows, offered)):
                keep = np.array([a in o for a in self.actions[r]] + [False] * (p.shape[1] - len(self.actions[r])))
                p[i] = np.where(keep, p[i], 0.0)
                p[i] /= p[i].sum()
        picks = p.argmax(axis=1) if self.greedy else sample_rows(p, rng)
        return [self.actions[r][k] for r, k in zip(rows, picks)]


def ppo_clip_step(policy: Tabular, rows: np.ndarray, cols: np.ndarray, advantages: np.ndarray,
                  weights: np.ndarray, lr: float, epochs: int = 2, clip: float = 0.2) -> None:
    """Gradient ascent on the PPO-clip objective (``creditflow.trainer.loss.ppo_clip_objective``'s formula)
    Σ_i w_i min(ρ_i A_i, clip(ρ_i, 1 − ε, 1 + ε) A_i), ρ_i = π(a_i|s_i) / π_old(a_i|s_i), over the logits.

    Its gradient for sample i is w_i A_i ρ_i (onehot(a_i) − π(·|s_i)) where the clip is inactive and 0 where it
    is active (ρ > 1 + ε with A > 0, ρ < 1 − ε with A < 0). ``epochs`` full-batch steps of size ``lr`` on the
    same samples; π_old is the policy that sampled them (the first epoch has ρ = 1: plain policy gradient)."""
    rows = np.asarray(rows, dtype=np.int64)
    cols = np.asarray(cols, dtype=np.int64)
    adv = np.asarray(advantages, dtype=np.float64)
    idx = np.arange(rows.size)
    old = policy.table_probs(rows)[idx, cols]
    for _ in range(epochs):
        p = policy.table_probs(rows)
        ratio = p[idx, cols] / old
        clipped = ((adv > 0) & (ratio > 1 + clip)) | ((adv < 0) & (ratio < 1 - clip))
        coef = np.where(clipped, 0.0, adv * ratio) * weights
        grad = -p * coef[:, None]
        grad[idx, cols] += coef
        np.add.at(policy.logits, rows, lr * grad)
