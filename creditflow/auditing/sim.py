"""Episodes for the audit: restorable states, lockstep rollouts over arrays of envs, success outcomes.

A :class:`Node` is a state an episode passed through: the env seed, the actions from reset that reach it, and
the env's ``snapshot()`` there where the env has snapshot/restore (else the state is restored by verified
replay of the actions). :meth:`Sim.run` runs many episodes at once: ``jobs`` are ``(node, first_action)``
pairs (``None``: the policy picks the first action too), stepped in lockstep in chunks of ``chunk`` envs, the
policy acting on the whole chunk in one call. Envs are pooled by seed, so a restore never rebuilds a task.
Restoring by snapshot hands the stored snapshot to ``env.restore`` as it is: nothing but the state is copied
(``restore`` must leave its argument reusable, as the rollout engine already requires).

The outcome of an episode is success under the run's :class:`~creditflow.rollout.trajectory.SuccessRule` (the
env's ``won``, or ``score >= threshold``): the audit's reward is 1 at the end of a successful episode and 0
everywhere else, so Q^π(s, a) is the chance of success after taking ``a`` in ``s`` and then following π.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np

from creditflow.auditing.errors import AuditError
from creditflow.envs.base import ReplayMismatch, has_snapshot, replay
from creditflow.policy.prompts import env_name
from creditflow.rollout.trajectory import SuccessRule


@dataclass(frozen=True, eq=False)
class Node:
    """A state of task ``seed``: reached by ``actions`` from reset (``t`` of them); ``snap`` where the env has
    snapshots; ``key`` its ``state_key``; ``admissible`` the actions it offers."""

    seed: int
    actions: tuple[str, ...]
    snap: object | None
    key: str
    observation: str
    admissible: tuple[str, ...]

    @property
    def t(self) -> int:
        return len(self.actions)


@dataclass
class StepRecord:
    """One recorded step: the state before it (``node``), the action, what followed."""

    node: Node
    action: str
    valid: bool
    next_key: str


@dataclass
class Episode:
    """A recorded episode of task ``seed`` in ``group``, from ``start`` (its first node)."""

    seed: int
    group: str
    steps: list[StepRecord]
    success: bool
    final_key: str


@dataclass
class _Slot:
    env: object
    seed: int
    observation: str
    info: dict
    actions: list[str]
    first: str | None
    start: Node
    steps: list[StepRecord] = field(default_factory=list)
    done: bool = False
    success: bool = False


class Sim:
    """Runs episodes of ``env_factory()`` envs; ``chunk`` envs step in lockstep."""

    def __init__(self, env_factory: Callable[[], object], success_rule: SuccessRule = SuccessRule(),
                 chunk: int = 128):
        self.factory = env_factory
        self.rule = success_rule
        self.chunk = int(chunk)
        probe = env_factory()
        self.name = env_name(probe)
        self.snapshots = has_snapshot(probe)
        self._pool: dict[int, list] = {}
        self._starts: dict[int, Node] = {}
        self.env_steps = 0

    # -- envs -----------------------------------------------------------------------------------------------
    def _take(self, seed: int):
        idle = self._pool.get(seed)
        if idle:
            return idle.pop()
        env = self.factory()
        env.reset(seed=seed)
        return env

    def _give(self, seed: int, env) -> None:
        self._pool.setdefault(seed, []).append(env)

    def start(self, seed: int) -> Node:
        """The start state of task ``seed``."""
        if seed not in self._starts:
            env = self._take(seed)
            obs, info = env.reset(seed=seed)
            self._starts[seed] = self._node(env, seed, (), obs, info)
            self._give(seed, env)
        return self._starts[seed]

    def _node(self, env, seed: int, actions: tuple, obs: str, info: dict) -> Node:
        adm = info.get("admissible_actions")
        if not adm:
            raise AuditError(f"env {self.name!r} offers no admissible_actions at a state of seed {seed}: the audit's "
                             "policies choose among them (free-text envs need candidate actions)")
        return Node(seed, actions, env.snapshot() if self.snapshots else None, str(info.get("state_key", "")),
                    obs, tuple(adm))

    def _bring(self, env, node: Node) -> tuple[str, dict]:
        """Put ``env`` (already reset to ``node.seed`` once) in ``node``'s state."""
        if not node.actions:
            return env.reset(seed=node.seed)
        if node.snap is not None:
            return env.restore(node.snap)
        try:
            res = replay(env, node.seed, list(node.actions))
        except ReplayMismatch as exc:
            raise AuditError(f"env {self.name!r} cannot restore a state: it has no snapshot/restore and replaying "
                             f"seed {node.seed}'s actions failed ({exc})") from None
        if res.done or str(res.info.get("state_key", "")) != node.key or res.observation != node.observation:
            raise AuditError(f"env {self.name!r} cannot restore a state: it has no snapshot/restore and replaying "
                             f"{node.t} actions of seed {node.seed} reached another state (not deterministic)")
        return res.observation, res.info

    # -- episodes -------------------------------------------------------------------------------------------
    def run(self, jobs: Sequence[tuple[Node, str | None]], policy, rng: np.random.Generator,
            record: bool = False) -> list:
        """Run every job ``(node, first_action)`` to its end under ``policy``; returns, per job, its success
        (``record=False``) or its :class:`Episode` (``record=True``, group ``""``)."""
        out: list = []
        for lo in range(0, len(jobs), self.chunk):
            out += self._run_chunk(jobs[lo:lo + self.chunk], policy, rng, record)
        return out

    def _run_chunk(self, jobs, policy, rng, record: bool) -> list:
        slots = []
        for node, first in jobs:
            env = self._take(node.seed)
            obs, info = self._bring(env, node)
            slots.append(_Slot(env, node.seed, obs, info, list(node.actions), first, node))
        active = slots
        while active:
            need = [s for s in active if s.first is None]
            chosen = iter(policy.act([(s.seed, str(s.info.get("state_key", "")), s.info.get("admissible_actions"),
                                       s.env) for s in need], rng) if need else [])
            for s in active:
                action = s.first if s.first is not None else next(chosen)
                s.first = None
                adm = s.info.get("admissible_actions") or ()
                if not isinstance(action, str) or action not in adm:
                    raise AuditError(f"policy {getattr(policy, 'name', policy)!r} took no admissible action in a "
                                     f"state of seed {s.seed} (got {action!r}); a policy must pick one of the "
                                     "env's admissible_actions")
                node = None
                if record:
                    node = s.start if not s.steps else self._node(s.env, s.seed, tuple(s.actions), s.observation,
                                                                  s.info)
                obs, _, terminated, truncated, info = s.env.step(action)
                self.env_steps += 1
                s.actions.append(action)
                if record:
                    s.steps.append(StepRecord(node, action, bool(info.get("action_valid", True)),
                                              str(info.get("state_key", ""))))
                s.observation, s.info = obs, info
                if terminated or truncated:
                    s.done = True
                    s.success = self.rule.outcome(info)[0]
            active = [s for s in active if not s.done]
        for s in slots:
            self._give(s.seed, s.env)
        if not record:
            return [s.success for s in slots]
        return [Episode(s.seed, "", s.steps, s.success, str(s.info.get("state_key", ""))) for s in slots]

    def groups(self, seeds: Sequence[int], group_size: int, policy, rng: np.random.Generator,
               starts: Sequence[Node] | None = None, prefix: str = "") -> list[Episode]:
        """``group_size`` recorded episodes of every task in ``seeds`` (from ``starts[i]``, default its start),
        group ``f"{prefix}{i}"`` for the i-th task."""
        nodes = list(starts) if starts is not None else [self.start(s) for s in seeds]
        jobs = [(node, None) for node in nodes for _ in range(group_size)]
        episodes = self.run(jobs, policy, rng, record=True)
        for k, ep in enumerate(episodes):
            ep.group = f"{prefix}{k // group_size}"
        return episodes

    def draw(self, nodes: Sequence[Node], policy, rng: np.random.Generator, n: int) -> list[list[str]]:
        """``n`` actions drawn from π at each node (the env brought to the node, for a policy that plans)."""
        out = []
        for node in nodes:
            env = self._take(node.seed)
            self._bring(env, node)
            out.append(policy.act([(node.seed, node.key, node.admissible, env)] * n, rng))
            self._give(node.seed, env)
        return out
