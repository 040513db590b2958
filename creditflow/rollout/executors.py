"""Where the rollout engine's environment work runs: in this process, or on a Ray cluster.

The engine never touches an env directly; it hands its env work to an *env executor* in batches, one
call per phase: ``start`` (bring each episode's env to its :class:`StartState`: reset, snapshot restore
or verified replay), ``step`` (apply every active episode's action of this turn), ``truncate`` (tell the envs
whose episodes ``rollout.max_steps`` cut) and ``snapshot`` (copy the state of episodes that stop before their
end, for RRO's candidates). Episodes live in numbered
*slots*; a slot keeps its env between calls.

Determinism (RRO ``--executor ray``): generation always stays in the driver process, where the policy
and its seeded torch RNG live; only env work is distributed. Envs are deterministic functions of
(seed, actions) (DESIGN.md: local RNG only), the engine issues the same calls in the same order with
either executor, and results come back in request order, so the same seeds give the same trajectories,
process rewards and preference data whichever executor runs the envs (tested in
``tests/pairs/test_executors.py``). What Ray buys is parallel env work for envs whose steps are
expensive (SQL execution, TextWorld, ALFWorld); for Sokoban the in-process executor is faster.
"""

from __future__ import annotations

from typing import Callable, Protocol

from creditflow.envs.base import ReplayMismatch, has_snapshot, replay
from creditflow.envs.checked import CheckedEnv
from creditflow.errors import UserError
from creditflow.rollout.trajectory import StartState

StepResult = tuple[str, float, bool, bool, dict]  # observation, reward, terminated, truncated, info
StartJob = tuple[int, StartState]  # slot, the state its episode starts from


class EnvExecutor(Protocol):
    def start(self, jobs: list[StartJob]) -> list[tuple[str, dict] | None]:
        """Bring each slot's env to its start state; ``None`` where verified replay mismatched."""

    def step(self, jobs: list[tuple[int, str]]) -> list[StepResult]:
        """Apply ``action`` in ``slot`` for every ``(slot, action)``; results in request order."""

    def snapshot(self, slots: list[int]) -> list[object | None]:
        """``env.snapshot()`` of each slot (``None`` for envs without snapshot/restore)."""

    def truncate(self, slots: list[int]) -> list[tuple[float, dict] | None]:
        """``env.truncate()`` of each slot, whose episode the engine cut at ``rollout.max_steps`` (``None`` for envs
        without the method)."""

    def close(self) -> None: ...


def start_env(env, state: StartState) -> tuple[str, dict]:
    """Reset ``env`` to ``state.seed`` and move it to ``state``: by ``restore(state.snapshot)`` where the
    env has snapshots and one is given, else by verified replay (:func:`creditflow.envs.base.replay`).
    Raises ``ReplayMismatch`` when the replay diverges or the episode ends before the path is used up."""
    if state.actions and state.snapshot is not None and has_snapshot(env):
        env.reset(seed=state.seed)
        result = env.restore(state.snapshot)
        if isinstance(env, CheckedEnv):  # its steps count on from the restored one
            env.at_step(state.t)
        return result
    if state.actions:
        res = replay(env, state.seed, state.actions, state.observations or None)
        if res.done:
            raise ReplayMismatch(state.t, "<episode continues>", "<episode ended>")
        return res.observation, res.info
    return env.reset(seed=state.seed)


class _EnvSlots:
    """Envs by slot, created on first use with ``env_factory`` (shared by both executors)."""

    def __init__(self, env_factory: Callable[[], object]):
        self.env_factory = env_factory
        self.envs: dict[int, object] = {}

    def env(self, slot: int):
        if slot not in self.envs:
            self.envs[slot] = self.env_factory()
        return self.envs[slot]

    def start(self, jobs: list[StartJob]) -> list[tuple[str, dict] | None]:
        out = []
        for slot, state in jobs:
            try:
                out.append(start_env(self.env(slot), state))
            except ReplayMismatch:
                out.append(None)
        return out

    def step(self, jobs: list[tuple[int, str]]) -> list[StepResult]:
        return [self.env(slot).step(action) for slot, action in jobs]

    def snapshot(self, slots: list[int]) -> list[object | None]:
        return [self.env(s).snapshot() if has_snapshot(self.env(s)) else None for s in slots]

    def truncate(self, slots: list[int]) -> list[tuple[float, dict] | None]:
        out = []
        for slot in slots:
            truncate = getattr(self.env(slot), "truncate", None)
            out.append(truncate() if callable(truncate) else None)
        return out


class InProcessEnvExecutor(_EnvSlots):
    """Envs in this process, stepped one after another (the default)."""

    def close(self) -> None:
        self.envs.clear()


class RayEnvExecutor:
    """Envs spread over ``num_workers`` Ray actors (slot ``i`` lives on actor ``i % num_workers``).

    Each ``start``/``step`` sends one remote call per actor holding a requested slot and waits for all
    of them, so env work of one turn runs in parallel across actors. Connects to ``address`` when given
    (``"auto"`` = the cluster this machine belongs to), else starts a local Ray with ``num_cpus``.
    ``env_factory`` must be picklable (the runs' ``creditflow.envs.EnvFactory`` is; docs/environments.md says
    what that asks of an env given to the Python API).
    """

    def __init__(self, env_factory: Callable[[], object], num_workers: int | None = None,
                 address: str | None = None, num_cpus: int | None = None):
        try:
            import ray
        except ImportError:
            raise UserError("executor 'ray' needs Ray: pip install 'creditflow[ray]'") from None
        self._ray = ray
        self._started_ray = False
        if not ray.is_initialized():
            if address:
                ray.init(address=address, include_dashboard=False, log_to_driver=False)
            else:
                ray.init(num_cpus=num_cpus, include_dashboard=False, log_to_driver=False)
                self._started_ray = True
        total = max(1, int(ray.cluster_resources().get("CPU", 1)))
        n = int(num_workers or total)
        if n < 1:
            raise UserError(f"ray executor: num_workers must be >= 1, got {n}")
        worker = ray.remote(_EnvSlots).options(num_cpus=min(1.0, total / n))
        self.workers = [worker.remote(env_factory) for _ in range(n)]

    def _scatter(self, method: str, jobs: list, slot_of) -> list:
        n = len(self.workers)
        by_worker: dict[int, list[int]] = {}
        for i, job in enumerate(jobs):
            by_worker.setdefault(slot_of(job) % n, []).append(i)
        refs = {w: getattr(self.workers[w], method).remote([jobs[i] for i in idx]) for w, idx in by_worker.items()}
        out: list = [None] * len(jobs)
        for w, idx in by_worker.items():
            try:
                results = self._ray.get(refs[w])
            except self._ray.exceptions.RayTaskError as exc:  # a user error on a worker: its one line
                if isinstance(getattr(exc, "cause", None), UserError):
                    raise exc.cause from None
                raise
            for i, res in zip(idx, results):
                out[i] = res
        return out

    def start(self, jobs: list[StartJob]) -> list[tuple[str, dict] | None]:
        return self._scatter("start", jobs, lambda job: job[0])

    def step(self, jobs: list[tuple[int, str]]) -> list[StepResult]:
        return self._scatter("step", jobs, lambda job: job[0])

    def snapshot(self, slots: list[int]) -> list[object | None]:
        return self._scatter("snapshot", slots, lambda slot: slot)

    def truncate(self, slots: list[int]) -> list[tuple[float, dict] | None]:
        return self._scatter("truncate", slots, lambda slot: slot)

    def close(self) -> None:
        for w in self.workers:
            self._ray.kill(w)
        self.workers = []
        if self._started_ray:
            self._ray.shutdown()
            self._started_ray = False


def make_env_executor(kind: str, env_factory: Callable[[], object], *, num_workers: int | None = None,
                      address: str | None = None, num_cpus: int | None = None) -> EnvExecutor:
    if kind == "inprocess":
        return InProcessEnvExecutor(env_factory)
    if kind == "ray":
        return RayEnvExecutor(env_factory, num_workers=num_workers, address=address, num_cpus=num_cpus)
    raise UserError(f"unknown executor {kind!r}; use inprocess or ray")
