"""Behaviour policies of the audit, and the tabular softmax the race trains.

A policy acts on a batch of states at once: ``act(items, rng) -> actions``, each item ``(seed, state_key,
admissible_actions, env)`` (the env in that state, for an expert that plans from it). ``probs(item)`` gives
π(·|s) over the item's admissible actions. These are Markov in ``(seed, state_key)`` (the task and the state),
so Q^π(s, a) is well defined and Monte Carlo from a restored state estimates it. Optional hooks a policy may
have (:mod:`creditflow.auditing.run` and :class:`~creditflow.auditing.sim.Sim` call them):
``prepare(sim, tasks, seed) -> dict | None`` before an audit seed's episodes (a policy that is trained on the
seed's tasks first, :class:`TabularSnapshot`; what it returns is recorded), ``history = True`` (``act`` also gets
each state's path, ``contexts=``: an LM's prompt shows its last steps), ``invalid_actions = True`` (it may act
with ``INVALID_ACTION_PREFIX + text``, as the rollout engine does for an unparseable response) and
``free_text = True`` (at a state with no admissible actions it writes any action, as an LM does).

Which policy favours which estimator (docs/audit.md): under a policy that mostly walks a shortest path, V^π
falls with the distance to success, which is what the graph estimators' γ^d and ω^d compute; the others are
there so that no estimator wins by construction.

- :class:`EpsilonExpert`: with probability 1 − ε the expert's next action (``env.expert_actions()[0]`` from
  the current state, cached per state), else a uniform admissible action. Where the expert has no plan (a dead
  end) it is uniform. The distance-greedy policy.
- :class:`Uniform`: ε = 1, needs no expert.
- :class:`DetourExpert`: the ε-expert whose preferred action is, at a random share ``rate`` of the states
  (drawn once per (task, ``state_key``)), a fixed other admissible action, a one-step detour: a competent
  policy whose value is not a function of the distance to success.
- :class:`TabularSnapshot`: the race's tabular softmax trained on the audit seed's own tasks from zero and
  frozen where its sampled success there first reaches ``target`` (a learning policy, :class:`SnapshotTrainer`).
- :class:`Tabular`: a softmax over the admissible actions with one logit per (task, ``state_key``, action),
  stored in one padded table so a batch of states is one gather; the learning race trains it
  (:func:`ppo_clip_step`). Rows are keyed by (task seed, ``state_key``): two tasks whose state keys coincide
  (a household key names no game) never share logits.

The LM as the behaviour policy is ``creditflow.recipes.audit.ModelPolicy`` (it needs torch).
"""

from __future__ import annotations

import zlib
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

    @property
    def label(self) -> str:
        """The policy's name in a record (``eps=0.5``; the records made before issue 85 use the same)."""
        return f"eps={self.epsilon:g}"

    def act(self, items: Sequence[Item], rng: np.random.Generator) -> list[str]:
        return _act_by_probs(self, items, rng)


def _act_by_probs(policy, items: Sequence[Item], rng: np.random.Generator) -> list[str]:
    n = max(len(item[2]) for item in items)
    table = np.zeros((len(items), n))
    for i, item in enumerate(items):
        table[i, :len(item[2])] = policy.probs(item)
    picks = sample_rows(table, rng)
    return [item[2][k] for item, k in zip(items, picks)]


class Uniform(EpsilonExpert):
    """π(a|s) = 1 / |A(s)|: favours no estimator by construction; needs no expert. Groups mix outcomes only where
    random play sometimes succeeds (the coverage part says how often)."""

    def __init__(self):
        super().__init__(1.0)

    @property
    def label(self) -> str:
        return "uniform"


def state_draw(*parts) -> np.random.Generator:
    """A generator seeded by ``parts`` (ints and strings; strings by CRC-32): the same draw in every process, so a
    choice made "once per (task, state)" is the same in the groups, the Monte-Carlo continuations and a rerun."""
    return np.random.default_rng([p if isinstance(p, int) else zlib.crc32(str(p).encode()) for p in parts])


class DetourExpert:
    """The ε-expert with detours: π(a|s) = (1 − ε) 1[a = expert(s)] + ε / |A(s)|, except at a share ``rate`` of the
    states (the detour states), where the (1 − ε) share is split: ``weight`` of it on a detour action d(s), the
    rest on the expert's. d(s) is an admissible action other than the expert's, drawn uniformly among those that
    move to another state without ending the episode unsolved (a one-step detour from the expert's path, not a
    bump into a wall; checked by a step and a restore where the env has snapshots). ``weight`` < 1 lets the
    policy leave the loop a detour makes with the expert's way back, so it stays competent. Which states detour, and where to, is drawn once per (task,
    ``state_key``) from ``seed``, so the policy is Markov and Monte Carlo from a restored state estimates its
    Q^π.

    Why it exists: under the ε-expert V^π falls with the distance to success (what RewardFlow's γ^d and
    GraphGPO's ω^d compute). Here two states at the same distance differ in value by whether they, or the states
    the expert leads through, detour (a detour next to a state whose expert move leads back is a two-state loop
    that only ε escapes), so V^π is no function of the distance while the policy still reaches the goal often. Any detour of a Markov
    policy comes down to this: a per-state deviation (a k-step detour needs memory of where it is in it).
    ``rate`` 0 is the ε-expert."""

    def __init__(self, rate: float = 0.5, epsilon: float = 0.2, seed: int = 0, weight: float = 0.5):
        for name, value in (("rate", rate), ("epsilon", epsilon), ("weight", weight)):
            if not 0.0 <= float(value) <= 1.0:
                raise AuditError(f"detour {name} must be in [0, 1], got {value!r}")
        self.rate, self.epsilon, self.seed, self.weight = float(rate), float(epsilon), int(seed), float(weight)
        self.name = f"detour expert, rate={self.rate:g}, ε={self.epsilon:g}"
        self._expert = EpsilonExpert(0.0)  # its plan cache and checks
        self._pref: dict[tuple, str | None] = {}

    @property
    def label(self) -> str:
        return f"detour={self.rate:g},eps={self.epsilon:g}" + (f",w={self.weight:g}" if self.weight != 0.5 else "")

    def preferred(self, seed, key: str, actions: Sequence[str], env) -> str | None:
        """The state's detour action (the expert's own where the state does not detour; None: a dead end)."""
        return self._choices(seed, key, actions, env)[1]

    def _choices(self, seed, key: str, actions: Sequence[str], env) -> tuple[str | None, str | None]:
        """(the expert's action, the state's detour action)."""
        cache = (seed, key)
        if cache not in self._pref:
            best = self._expert.expert(seed, key, actions, env)
            pick = best
            if best is not None and len(actions) > 1:
                draw = state_draw(self.seed, int(seed), key)
                if draw.random() < self.rate:
                    others = [a for a in actions if a != best]
                    others = _moving(env, key, others) or others
                    pick = others[int(draw.integers(len(others)))]
            self._pref[cache] = (best, pick)
        return self._pref[cache]

    def probs(self, item: Item) -> np.ndarray:
        seed, key, actions, env = item
        n = len(actions)
        best, pick = self._choices(seed, key, actions, env)
        if best is None:
            return np.full(n, 1.0 / n)
        p = np.full(n, self.epsilon / n)
        order = list(actions)
        if pick == best:
            p[order.index(best)] += 1.0 - self.epsilon
        else:
            p[order.index(best)] += (1.0 - self.epsilon) * (1.0 - self.weight)
            p[order.index(pick)] += (1.0 - self.epsilon) * self.weight
        return p

    def act(self, items: Sequence[Item], rng: np.random.Generator) -> list[str]:
        return _act_by_probs(self, items, rng)


def _moving(env, key: str, actions: Sequence[str]) -> list[str]:
    """Of ``actions``, those that lead to another state without ending the episode unsolved (a detour, not a bump
    into a wall or a fall into a dead end), found by one step each and a restore; ``[]`` where the env has no
    snapshot/restore."""
    snap, restore = getattr(env, "snapshot", None), getattr(env, "restore", None)
    if not (callable(snap) and callable(restore)):
        return []
    checked = isinstance(env, CheckedEnv)
    t = env.__dict__["_t"] if checked else None
    base = snap()
    out = []
    for a in actions:
        _, _, terminated, _, info = env.step(a)
        restore(base)
        if str(info.get("state_key", "")) != key and not (terminated and not info.get("won")):
            out.append(a)
    if checked:
        env.at_step(t)
    return out


class TabularSnapshot:
    """The race's tabular softmax as the behaviour policy: for each audit seed, trained from zero on that seed's
    tasks (:meth:`prepare`, by ``trainer``: a :class:`~creditflow.auditing.race.SnapshotTrainer`, which one
    training serves every target of) and frozen where its sampled success on them first reaches ``target``.
    Sampled, not greedy: the groups the audit scores are sampled from it."""

    def __init__(self, target: float, trainer=None):
        if not 0.0 < float(target) < 1.0:
            raise AuditError(f"a tabular snapshot's target success must be in (0, 1), got {target!r}")
        if trainer is None:
            from creditflow.auditing.race import SnapshotTrainer

            trainer = SnapshotTrainer()
        self.target, self.trainer = float(target), trainer
        self.name = f"tabular snapshot at {100 * self.target:.0f}% success"
        self._tables: dict[int, Tabular] = {}  # task seed -> its frozen table

    @property
    def label(self) -> str:
        return f"tabular={self.target:g}"

    def prepare(self, sim, tasks: Sequence[int], seed: int) -> dict:
        table, info = self.trainer.snapshot(sim, tasks, seed, self.target)
        for t in tasks:
            self._tables[int(t)] = table
        return info

    def _table(self, task) -> "Tabular":
        table = self._tables.get(int(task))
        if table is None:
            raise AuditError(f"{self.name}: task {task} was not prepared (a snapshot is trained on the audit seed's "
                             "tasks by prepare(sim, tasks, seed) first)")
        return table

    def probs(self, item: Item) -> np.ndarray:
        return self._table(item[0]).probs(item)

    def act(self, items: Sequence[Item], rng: np.random.Generator) -> list[str]:
        by: dict[int, list[int]] = {}
        for i, item in enumerate(items):
            by.setdefault(id(self._table(item[0])), []).append(i)
        out: list = [None] * len(items)
        for idx in by.values():
            picks = self._table(items[idx[0]][0]).act([items[i] for i in idx], rng)
            for i, a in zip(idx, picks):
                out[i] = a
        return out


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
    """Softmax over admissible actions, one logit per (row key, action), a row per (task seed, ``state_key``);
    ``greedy`` picks the argmax (the first of equal logits)."""

    name = "tabular softmax"
    label = "tabular"

    def __init__(self, capacity: int = 1024, width: int = 4):
        self.logits = np.zeros((capacity, width))
        self.count = np.zeros(capacity, dtype=np.int64)  # actions per row
        self.rows: dict[str, int] = {}
        self.actions: list[list[str]] = []  # row -> its actions, in first-seen order
        self.greedy = False

    def copy(self) -> "Tabular":
        """A frozen copy (its own arrays): a snapshot that later training does not move."""
        out = Tabular.__new__(Tabular)
        out.logits, out.count = self.logits.copy(), self.count.copy()
        out.rows, out.actions, out.greedy = dict(self.rows), [list(a) for a in self.actions], False
        return out

    def row(self, key, actions: Sequence[str]) -> int:
        """The row of ``key`` ((task seed, ``state_key``) as the race and :meth:`act` key it), made on first use."""
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
        rows = np.array([self.row((seed, key), actions) for seed, key, actions, _ in items], dtype=np.int64)
        return rows, [np.array([self.actions[r].index(a) for a in actions]) for r, (_, _, actions, _) in
                      zip(rows, items)]

    def probs(self, item: Item) -> np.ndarray:
        rows, cols = self._rows_cols([item])
        return self.table_probs(rows)[0, cols[0]]

    def act(self, items: Sequence[Item], rng: np.random.Generator) -> list[str]:
        rows = np.array([self.row((seed, key), actions) for seed, key, actions, _ in items], dtype=np.int64)
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
