"""Monte-Carlo process reward (RRO paper §2, Eq. r_PRM; Algorithm 1, function ProcessReward).

    r_PRM(e_1:t) = (1/m) Σ_j r_ORM(u, e_1:t ⊕ ê^(j)_t+1:n),   ê^(j) ~ π(·|e_1:t)

The prefix is a :class:`~creditflow.rollout.trajectory.StartState` (seed + the env actions of
e_1:t, the observations to verify, an optional snapshot); the engine restores it (snapshot, else
verified replay), and the m continuations of *all* states asked for at once run through the batched
rollout engine in one lockstep call (Alg. 1 lines 3-7). The outcome reward r_ORM is the env's final
score in [0, 1] (``Trajectory.score``: graded score, or 1/0 success), as the paper's §2 ORM; the
estimate is its mean (line 8). A prefix whose last action already ended the episode has a known
outcome: the caller passes it and no rollouts are run. Estimates are cached by (task, action path), so
a candidate action that was sampled again, or the chosen action's prefix when it becomes e_1:t−1 of
the next step, costs no new rollouts.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from creditflow.rollout.engine import TaskSpec
from creditflow.rollout.trajectory import StartState


class PrefixRestoreError(Exception):
    """A prefix could not be restored (verified replay diverged): the caller skips the task."""


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
        self.cache: dict[tuple, float] = {}
        self.stats = MCStats()

    def clear(self) -> None:
        """Forget cached estimates (the collector does this between tasks)."""
        self.cache.clear()

    def estimate(self, task_id: str, states: list[StartState],
                 outcomes: list[float | None] | None = None) -> list[float]:
        """Process rewards of the prefixes of task ``task_id`` that end in ``states``, in order.

        ``outcomes[i]`` (optional) is the final score when the prefix's last action ended the episode:
        then r_PRM = r_ORM of the complete trajectory. Raises :class:`PrefixRestoreError` when a state
        cannot be restored."""
        t0 = time.perf_counter()
        outcomes = outcomes if outcomes is not None else [None] * len(states)
        self.stats.queries += len(states)
        todo: dict[tuple, StartState] = {}
        for state, outcome in zip(states, outcomes):
            key = (task_id, state.key)
            if key in self.cache or key in todo:
                self.stats.cache_hits += 1
            elif outcome is not None:  # episode over: r_PRM = r_ORM of the complete trajectory
                self.stats.terminal += 1
                self.cache[key] = float(outcome)
            else:
                todo[key] = state
        if todo:
            specs = [TaskSpec(task_id, state.seed, group_id=f"mc/{task_id}/{state.t}", start=state,
                              meta={"mc_prefix": i})
                     for i, state in enumerate(todo.values())]
            before = (self.engine.stats.generated_tokens, self.engine.stats.env_steps)
            trajs = self.engine.rollout(specs, group_size=self.m, sampling=self.sampling)  # Alg. 1 lines 3-7
            st = self.engine.stats
            self.stats.generated_tokens += st.generated_tokens - before[0]
            self.stats.env_steps += st.env_steps - before[1]
            results: list[list[float]] = [[] for _ in specs]
            for traj in trajs:
                results[traj.meta["mc_prefix"]].append(float(traj.score))  # r_ORM: final score in [0, 1]
            self.stats.rollouts += len(trajs)
            failed = [state for state, outs in zip(todo.values(), results) if not outs]
            for key, outs in zip(todo, results):
                if outs:
                    self.stats.estimated += 1
                    self.cache[key] = sum(outs) / len(outs)  # line 8: mean outcome reward
            if failed:  # replay diverged (all m starts of a prefix fail alike)
                self.stats.restore_failures += len(failed)
                self.stats.seconds += time.perf_counter() - t0
                raise PrefixRestoreError(f"could not restore the {failed[0].t}-action prefix of "
                                         f"{task_id} (verified replay diverged)")
        self.stats.seconds += time.perf_counter() - t0
        return [self.cache[(task_id, state.key)] for state in states]
