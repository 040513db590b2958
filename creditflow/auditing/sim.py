"""Episodes for the audit: restorable states, lockstep rollouts over arrays of envs, success outcomes.

A :class:`Node` is a state an episode passed through: the env seed, the actions from reset that reach it, and
the observations shown before each of those actions, the env's ``snapshot()`` there where the env has snapshot/restore (else the state is restored by verified
replay of the actions). :meth:`Sim.run` runs many episodes at once: ``jobs`` are ``(node, first_action)``
pairs (``None``: the policy picks the first action too), stepped in lockstep in chunks of ``chunk`` envs, the
policy acting on the whole chunk in one call. Envs are pooled by seed, so a restore never rebuilds a task.
Restoring by snapshot hands the stored snapshot to ``env.restore`` as it is: nothing but the state is copied
(``restore`` must leave its argument reusable, as the rollout engine already requires).

Free-text states (the env offers no ``admissible_actions``: WebShop's search page, every SQL query) are
audited over a *menu*: ``menu(seed, actions, observations, observation, info, env) -> candidate actions`` (the
env in that state; ``actions`` the path from reset, ``observations`` those shown before each of them), called once per (seed, ``state_key``) and kept, so the behaviour
policy stays Markov over a fixed finite action set there. ``creditflow.recipes.audit.PolicyMenu`` samples a
menu from a model (the RRO sampler's candidates) plus the env's expert action. Without a menu such a state is
an error.

The outcome of an episode is success under the run's :class:`~creditflow.rollout.trajectory.SuccessRule` (the
env's ``won``, or ``score >= threshold``): the audit's reward is 1 at the end of a successful episode and 0
everywhere else, so Q^π(s, a) is the chance of success after taking ``a`` in ``s`` and then following π.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np

from creditflow.auditing.errors import AuditError
from creditflow.envs.base import INVALID_ACTION_PREFIX, ReplayMismatch, has_snapshot, replay
from creditflow.envs.checked import CheckedEnv
from creditflow.policy.prompts import name_of_env
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
    observations: tuple[str, ...] = ()  # shown before each of ``actions``

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
    observations: list[str]
    first: str | None
    start: Node
    steps: list[StepRecord] = field(default_factory=list)
    done: bool = False
    success: bool = False


class Sim:
    """Runs episodes of ``env_factory()`` envs; ``chunk`` envs step in lockstep."""

    def __init__(self, env_factory: Callable[[], object], success_rule: SuccessRule = SuccessRule(),
                 chunk: int = 128, menu: Callable[..., Sequence[str]] | None = None):
        self.factory = env_factory
        self.rule = success_rule
        self.chunk = int(chunk)
        self.menu = menu
        self._menus: dict[tuple[int, str], tuple[str, ...]] = {}
        probe = env_factory()
        self.name = name_of_env(probe)
        self.snapshots = has_snapshot(probe)
        self.num_tasks = getattr(probe, "num_tasks", None)  # seed z plays task z % num_tasks, where an env says so
        self._pool: dict[int, list] = {}
        self._starts: dict[tuple, Node] = {}
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

    def start(self, seed: int, free: bool = False) -> Node:
        """The start state of task ``seed`` (``free``: for a policy that writes free text, :meth:`offer`)."""
        key = (seed, bool(free))
        if key not in self._starts:
            env = self._take(seed)
            obs, info = env.reset(seed=seed)
            self._starts[key] = self._node(env, seed, (), obs, info, free=free)
            self._give(seed, env)
        return self._starts[key]

    def offer(self, seed: int, actions: Sequence[str], observations: Sequence[str], obs: str, info: dict,
              env, free: bool = False) -> tuple[str, ...]:
        """The actions a policy chooses among in this state: the env's ``admissible_actions``, else the menu's
        candidates for (seed, ``state_key``); ``()`` at a free-text state for a policy that writes free text
        (``free``: an LM), which writes its own action there."""
        adm = info.get("admissible_actions")
        if adm:
            return tuple(adm)
        if free:
            return ()
        key = (seed, str(info.get("state_key", "")))
        if key not in self._menus:
            if self.menu is None:
                raise AuditError(f"env {self.name!r} offers no admissible_actions at a state of seed {seed} (a "
                                 "free-text step): give the audit a menu of candidate actions (--model DIR)")
            cands = tuple(dict.fromkeys(str(a) for a in self.menu(seed, tuple(actions), tuple(observations), obs, info, env)))
            if not cands:
                raise AuditError(f"the candidate menu gave no action at a free-text state of seed {seed}")
            self._menus[key] = cands
        return self._menus[key]

    def _node(self, env, seed: int, actions: tuple, obs: str, info: dict, observations: tuple = (),
              free: bool = False) -> Node:
        adm = self.offer(seed, actions, observations, obs, info, env, free)
        return Node(seed, actions, env.snapshot() if self.snapshots else None, str(info.get("state_key", "")),
                    obs, adm, tuple(observations))

    def _bring(self, env, node: Node) -> tuple[str, dict]:
        """Put ``env`` (already reset to ``node.seed`` once) in ``node``'s state."""
        if not node.actions:
            return env.reset(seed=node.seed)
        if node.snap is not None:
            restored = env.restore(node.snap)
            if isinstance(env, CheckedEnv):  # its steps count on from the restored one
                env.at_step(node.t)
            return restored
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
        free = bool(getattr(policy, "free_text", False))
        invalid = bool(getattr(policy, "invalid_actions", False))
        history = bool(getattr(policy, "history", False))
        slots = []
        for node, first in jobs:
            env = self._take(node.seed)
            obs, info = self._bring(env, node)
            slots.append(_Slot(env, node.seed, obs, info, list(node.actions), list(node.observations), first, node))
        active = slots
        while active:
            offers = {id(s): self.offer(s.seed, s.actions, s.observations, s.observation, s.info, s.env, free)
                      for s in active}
            need = [s for s in active if s.first is None]
            chosen = iter([])
            if need:
                items = [(s.seed, str(s.info.get("state_key", "")), offers[id(s)], s.env) for s in need]
                chosen = iter(policy.act(items, rng, contexts=[(tuple(s.actions), tuple(s.observations),
                                                                s.observation, s.info) for s in need])
                              if history else policy.act(items, rng))
            for s in active:
                action = s.first if s.first is not None else next(chosen)
                s.first = None
                adm = offers[id(s)]
                if not _allowed(action, adm, free, invalid):
                    raise AuditError(f"policy {getattr(policy, 'name', policy)!r} took no admissible action in a "
                                     f"state of seed {s.seed} (got {action!r}); a policy must pick one of the "
                                     "env's admissible_actions")
                node = None
                if record:
                    node = s.start if not s.steps else self._node(s.env, s.seed, tuple(s.actions), s.observation,
                                                                  s.info, tuple(s.observations), free)
                obs, _, terminated, truncated, info = s.env.step(action)
                self.env_steps += 1
                s.actions.append(action)
                s.observations.append(s.observation)
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
        free = bool(getattr(policy, "free_text", False))
        nodes = list(starts) if starts is not None else [self.start(s, free) for s in seeds]
        jobs = [(node, None) for node in nodes for _ in range(group_size)]
        episodes = self.run(jobs, policy, rng, record=True)
        for k, ep in enumerate(episodes):
            ep.group = f"{prefix}{k // group_size}"
        return episodes

    def draw(self, nodes: Sequence[Node], policy, rng: np.random.Generator, n: int) -> list[list[str]]:
        """``n`` actions drawn from π at each node (the env brought to the node, for a policy that plans)."""
        out = []
        history = bool(getattr(policy, "history", False))
        for node in nodes:
            env = self._take(node.seed)
            obs, info = self._bring(env, node)
            items = [(node.seed, node.key, node.admissible, env)] * n
            out.append(policy.act(items, rng, contexts=[(node.actions, node.observations, obs, info)] * n)
                       if history else policy.act(items, rng))
            self._give(node.seed, env)
        return out


def _allowed(action, offered: tuple, free: bool, invalid: bool) -> bool:
    """Whether a policy may take ``action`` where ``offered`` are the state's actions: one of them; or, for a
    policy that may act invalidly (an LM through the rollout engine), ``INVALID_ACTION_PREFIX + text``, which the
    env treats as a no-op; or any text at a free-text state (nothing offered) for a policy that writes free text."""
    if not isinstance(action, str):
        return False
    if action in offered:
        return True
    if invalid and action.startswith(INVALID_ACTION_PREFIX):
        return True
    return free and not offered
