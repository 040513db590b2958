"""Monte-Carlo process reward (RRO paper §2, Eq. r_PRM; Algorithm 1, function ProcessReward).

    r_PRM(e_1:t) = (1/m) Σ_j r_ORM(u, e_1:t ⊕ ê^(j)_t+1:n),   ê^(j) ~ π(·|e_1:t)

The prefix state is restored by the env's snapshot (when the prefix carries one and the env has
``restore``) or by verified replay of its actions; the m continuations of *all* prefixes asked for at
once run through the batched rollout engine in one lockstep call (Alg. 1 lines 3-7). The outcome
reward r_ORM is the env's final score in [0, 1] (``info["score"]``: graded score, or 1/0 success), as the
paper's §2 ORM; the estimate is its mean (line 8). A prefix whose last action already ended the episode
has a known outcome: its reward is that final score, no rollouts are run. Estimates are cached by
(task, action prefix), so a candidate action that was sampled again, or the chosen action's prefix
when it becomes e_1:t−1 of the next step, costs no new rollouts.

The engine is imported lazily by callers; this module needs no torch.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field


class PrefixRestoreError(Exception):
    """A prefix could not be restored (verified replay diverged): the caller skips the task."""


@dataclass
class Prefix:
    """A trajectory prefix e_1:t = [u, a_1, o_1, ..., a_t] of one task.

    ``actions`` are the actions the env received; ``observations[i]`` is the observation shown before
    ``actions[i]`` (``observations[0]`` = after reset), as in :class:`TaskSpec`.
    """

    task_id: str
    seed: int
    actions: list[str] = field(default_factory=list)
    observations: list[str] = field(default_factory=list)
    snapshot: object | None = None  # env snapshot of the state after the last action (skips replay)
    outcome: float | None = None  # the last action ended the episode: its final score r_ORM

    @property
    def key(self) -> tuple[str, tuple[str, ...]]:
        return (self.task_id, tuple(self.actions))


@dataclass
class MCStats:
    """Accounting of the estimator (cumulative; ``reset`` zeroes it)."""

    queries: int = 0  # prefixes asked for
    cache_hits: int = 0
    terminal: int = 0  # prefixes whose episode had ended (outcome known, no rollouts)
    estimated: int = 0  # prefixes estimated by rollouts
    rollouts: int = 0  # continuations run (m per estimated prefix)
    restore_failures: int = 0
    generated_tokens: int = 0
    env_steps: int = 0
    seconds: float = 0.0

    def reset(self) -> None:
        self.__init__()


class MCProcessReward:
    """r_PRM by ``m`` rollouts of the engine's policy (π_SFT by default: the engine it is given).

    ``sampling`` overrides the engine's training sampling params for the continuations.
    """

    def __init__(self, engine, m: int = 5, sampling=None):
        if m < 1:
            raise ValueError(f"mc rollouts m must be >= 1, got {m}")
        self.engine = engine
        self.m = int(m)
        self.sampling = sampling
        self.cache: dict[tuple[str, tuple[str, ...]], float] = {}
        self.stats = MCStats()

    def clear(self) -> None:
        """Forget cached estimates (the collector does this between tasks)."""
        self.cache.clear()

    def estimate(self, prefixes: list[Prefix]) -> list[float]:
        """Process rewards of ``prefixes``, in order. Raises :class:`PrefixRestoreError` when a prefix's
        state cannot be restored."""
        from creditflow.rollout.engine import TaskSpec

        t0 = time.perf_counter()
        self.stats.queries += len(prefixes)
        todo: dict[tuple, Prefix] = {}
        for p in prefixes:
            if p.key in self.cache or p.key in todo:
                self.stats.cache_hits += 1
            elif p.outcome is not None:  # episode over: r_PRM = r_ORM of the complete trajectory
                self.stats.terminal += 1
                self.cache[p.key] = float(p.outcome)
            else:
                todo[p.key] = p
        if todo:
            specs = [TaskSpec(task_id=p.task_id, seed=p.seed, group_id=f"mc/{p.task_id}/{len(p.actions)}",
                              prefix_actions=list(p.actions), prefix_observations=list(p.observations),
                              snapshot=p.snapshot, meta={"mc_prefix": i})
                     for i, p in enumerate(todo.values())]
            before = (self.engine.stats.generated_tokens, self.engine.stats.env_steps)
            trajs = self.engine.rollout(specs, group_size=self.m, sampling=self.sampling)  # Alg. 1 lines 3-7
            st = self.engine.stats
            self.stats.generated_tokens += st.generated_tokens - before[0]
            self.stats.env_steps += st.env_steps - before[1]
            outcomes: list[list[float]] = [[] for _ in specs]
            for traj in trajs:
                outcomes[traj.meta["mc_prefix"]].append(float(traj.score))  # r_ORM: final score in [0, 1]
            self.stats.rollouts += len(trajs)
            failed = [p for p, outs in zip(todo.values(), outcomes) if not outs]
            for p, outs in zip(todo.values(), outcomes):
                if outs:
                    self.stats.estimated += 1
                    self.cache[p.key] = sum(outs) / len(outs)  # line 8: mean outcome reward
            if failed:  # replay diverged (all m starts of a prefix fail alike)
                self.stats.restore_failures += len(failed)
                self.stats.seconds += time.perf_counter() - t0
                raise PrefixRestoreError(f"could not restore the {len(failed[0].actions)}-action prefix of "
                                         f"{failed[0].task_id} (verified replay diverged)")
        self.stats.seconds += time.perf_counter() - t0
        return [self.cache[p.key] for p in prefixes]
