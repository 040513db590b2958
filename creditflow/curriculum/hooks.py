"""Wire CRPS / ExpReplay / diagnostics into the RL trainer through its ``Hooks`` extension points.

* ``make_specs`` — Eq. 13: each fresh group is replaced by a replay group with probability ``p_replay``
  (one uniform draw per group from the hook's own RNG, saved in checkpoints). A replay group is a
  ``TaskSpec`` starting from a buffer entry's :class:`StartState` s_t0, t0 = max(0, T - k) (Eq. 8): the
  first t0 stored actions, the matching stored observations (for verification and for rebuilding the
  prompt's history window) and, when the env has snapshot/restore, the stored snapshot of s_t0 (App. D
  (i)); otherwise the engine restores s_t0 by verified replay (App. D (ii)).
* ``after_rollout`` — replay groups update their entry (Eq. 10–12, mastery removal); a replay group with
  any episode whose restore failed verification (the engine names it: ``RolloutResult.unrestored``) is
  returned to be dropped (never trained on), its entry marked bad and counted; fresh groups offer their
  shortest success to the buffer under the gate acc(x) <= alpha_max (Eq. 6–7). Returns a
  :class:`~creditflow.rollout.hooks.Review`: the diagnostics (Eq. 14) and buffer/controller metrics of the
  kept groups, and the groups to drop.

Success (R = 1) is ``Trajectory.success``, decided once by the run's success rule
(``env.success_threshold``). This module imports the rollout layer only, never the trainer.
"""

from __future__ import annotations

import copy
from typing import Callable

import numpy as np

from creditflow.config import CurriculumConfig, EnvConfig
from creditflow.curriculum.crps import BufferEntry, SuccessBuffer, SuffixController, group_success_rate, \
    insertion_gate, replay_mixture
from creditflow.curriculum.diagnostics import group_diagnostics
from creditflow.curriculum.replay import ExpReplay
from creditflow.envs.base import ReplayMismatch, has_snapshot, replay
from creditflow.rollout.engine import RolloutResult, TaskSpec
from creditflow.rollout.expert import expert_trajectories
from creditflow.rollout.hooks import Hooks, Review
from creditflow.rollout.trajectory import SuccessRule, Trajectory, group_by

METRIC_KEYS = ("groups/all_zero_frac", "groups/all_one_frac", "groups/entropy", "crps/buffer_size",
               "crps/mean_k", "crps/replay_success_ema", "crps/restore_mismatches", "crps/replay_share")


def make_controller(cfg: CurriculumConfig) -> SuffixController | None:
    kwargs = dict(band=(cfg.band[0], cfg.band[1]), ema_lambda=cfg.ema_lambda, delta=cfg.delta,
                  beta_min=cfg.beta_min, beta_max=cfg.beta_max, k_min=cfg.k_min, k_max=cfg.k_max,
                  mastery_threshold=cfg.mastery_threshold, mastery_patience=cfg.mastery_patience)
    if cfg.name == "crps":
        return SuffixController(**kwargs)
    if cfg.name == "expreplay":
        return ExpReplay(**kwargs)
    return None


class CurriculumHooks(Hooks):
    """CRPS (``name="crps"``), ExpReplay (``"expreplay"``) or diagnostics only (``"none"``)."""

    def __init__(self, cfg: CurriculumConfig, env_factory: Callable[[], object] | None = None,
                 env_name: str = "", seed: int = 0, success_rule: SuccessRule = SuccessRule()):
        self.cfg = cfg
        self.success_rule = success_rule
        self.env_factory = env_factory
        self.env_name = env_name
        self.controller = make_controller(cfg)
        self.buffer = SuccessBuffer(cfg.capacity, cfg.eviction)
        self.rng = np.random.default_rng([int(seed), 0xC295])  # own stream: Eq. 13 draws + entry sampling
        self.restore_mismatches = 0
        self._env = None

    @property
    def active(self) -> bool:
        return self.controller is not None

    @staticmethod
    def succeeded(traj: Trajectory) -> bool:
        """R(tau) = 1 (Eq. 2): the trajectory's success under the run's success rule."""
        return bool(traj.success)

    def _private_env(self):
        if self._env is None:
            if self.env_factory is None:
                raise ValueError("CurriculumHooks needs env_factory to insert entries")
            self._env = self.env_factory()
        return self._env

    # -- Eq. 13: which groups are replay groups --------------------------------------------------
    def make_specs(self, step: int, fresh: list[TaskSpec]) -> list[TaskSpec]:
        if not self.active:
            return fresh
        picks = replay_mixture(self.rng, len(fresh), self.cfg.p_replay, len(self.buffer))
        return [self.replay_spec(step, i, self.buffer.sample(self.rng)) if replay else spec
                for i, (spec, replay) in enumerate(zip(fresh, picks))]

    def replay_spec(self, step: int, slot: int, entry: BufferEntry) -> TaskSpec:
        t0 = self.controller.start_of(entry)  # Eq. 8
        return TaskSpec(
            task_id=entry.task_id,
            seed=entry.seed,
            group_id=f"step{step}/replay{slot}/{entry.task_id}",
            start=entry.start_state(t0),
            meta={"replay": True, "entry": entry.uid, "t0": t0, "k": entry.k},
        )

    # -- after the rollout: controller, buffer, diagnostics --------------------------------------
    def after_rollout(self, step: int, specs: list[TaskSpec], rollout: RolloutResult) -> Review:
        groups = group_by(rollout.trajectories)
        unrestored = set(rollout.unrestored)
        dropped: set[str] = set()
        replay_specs = [s for s in specs if s.meta.get("replay")]
        replay_accs = []
        for spec in replay_specs:
            group = groups.get(spec.group_id, [])
            if spec.group_id in unrestored:  # some episode could not be restored (App. D): mismatch
                dropped.add(spec.group_id)
                self.restore_mismatches += 1
                self.buffer.mark_bad(spec.meta["entry"])
                continue
            acc_replay = group_success_rate(self.succeeded(t) for t in group)  # Eq. 10
            replay_accs.append(acc_replay)
            entry = self.buffer.get(spec.meta["entry"])
            if entry is not None and self.controller.record(entry, acc_replay):  # Eq. 11-12, mastery
                self.buffer.remove(entry.uid, "mastered")
        if self.active:
            for spec in specs:
                if spec.meta.get("replay"):
                    continue
                group = groups.get(spec.group_id, [])
                wins = [t for t in group if self.succeeded(t) and t.meta.get("start_step", 0) == 0]
                acc = group_success_rate(self.succeeded(t) for t in group)  # Eq. 6
                if wins and insertion_gate(acc, True, self.cfg.alpha_max):  # Eq. 7
                    self.insert(min(wins, key=len), acc, step)  # the shortest success of the group
        groups = {g: ts for g, ts in groups.items() if g not in dropped}
        metrics = group_diagnostics([self.succeeded(t) for t in ts] for ts in groups.values())
        metrics.update({
            "crps/buffer_size": len(self.buffer),
            "crps/mean_k": self.buffer.mean_k(),
            "crps/replay_success_ema": self.buffer.mean_ema(),
            "crps/restore_mismatches": self.restore_mismatches,
            "crps/replay_share": len(replay_specs) / max(1, len(specs)),
            "crps/inserted": self.buffer.counts["inserted"],
            "crps/mastered": self.buffer.counts["mastered"],
            "crps/evicted": self.buffer.counts["evicted"],
        })
        if replay_accs:  # only on steps with replay groups (a 0.0 placeholder would bias averages)
            metrics["crps/replay_acc"] = float(np.mean(replay_accs))
        return Review(metrics, frozenset(dropped))

    # -- buffer insertion -----------------------------------------------------------------------
    def insert(self, traj: Trajectory, acc: float, step: int = 0) -> BufferEntry | None:
        """Add a successful full-episode trajectory as an entry (Eq. 5) with k0 from Eq. 9.

        The trace is replayed once on a private env (reset with z, re-apply the actions, compare every
        observation, require the success again): a trace that does not reproduce is never stored (counted
        as a restore mismatch). On the way, snapshots of every s_t are kept when the env has them.
        """
        if not traj.steps or not self.buffer.accepts(traj.task_id):
            return None
        seed = int(traj.meta.get("seed", 0))
        actions = [s.env_action for s in traj.steps]
        observations = [s.observation for s in traj.steps]
        try:
            instruction, snapshots = self._verify(seed, actions, observations)
        except ReplayMismatch:
            self.restore_mismatches += 1
            self.buffer.bad_tasks.add(traj.task_id)
            return None
        T = len(actions)
        entry = BufferEntry(uid=self.buffer.new_uid(), task_id=traj.task_id, env=self.env_name, seed=seed,
                            instruction=instruction, observations=observations, actions=actions, acc=float(acc),
                            k=self.controller.initial_k(acc, T), ema=self.controller.ema_init(),
                            inserted_step=step, snapshots=snapshots)
        self.buffer.add(entry)
        return entry

    def _verify(self, seed: int, actions: list[str], observations: list[str]) -> tuple[str, list | None]:
        """Verified replay of a success trace on the private env (App. D); its instruction and, when the
        env has them, the snapshots of s_0 .. s_{T-1}. Raises :class:`ReplayMismatch`."""
        env = self._private_env()
        instruction = str(env.reset(seed=seed)[1].get("task", ""))
        res = replay(env, seed, actions, observations, snapshots=has_snapshot(env))
        if not self.success_rule.outcome(res.info)[0]:
            raise ReplayMismatch(len(actions), "<success>", "<no success>")
        return instruction, res.snapshots

    def warm_start(self, trajectories: list[Trajectory], acc: float = 0.0) -> int:
        """Insert (expert) successes before training; returns how many entered."""
        if not self.active:
            return 0
        return sum(1 for t in trajectories if self.succeeded(t) and self.insert(t, acc) is not None)

    # -- checkpointing --------------------------------------------------------------------------
    def state_dict(self) -> dict:
        return {"name": self.cfg.name, "rng": copy.deepcopy(self.rng.bit_generator.state),
                "buffer": self.buffer.state_dict(), "restore_mismatches": self.restore_mismatches}

    def load_state_dict(self, state: dict) -> None:
        if not state:
            return
        self.rng.bit_generator.state = state["rng"]
        self.buffer.load_state_dict(state["buffer"])
        self.restore_mismatches = int(state.get("restore_mismatches", 0))


def build_hooks(curriculum: CurriculumConfig, env: EnvConfig, seed: int, env_factory: Callable[[], object],
                warm_start: bool = True) -> CurriculumHooks:
    """The hooks ``run_train`` uses when none are given: ``curriculum`` (+ optional expert warm start) on the
    run's ``env`` section, seeded by the run's ``seed``."""
    rule = SuccessRule(env.success_threshold)
    hooks = CurriculumHooks(curriculum, env_factory, env_name=env.name, seed=seed, success_rule=rule)
    if warm_start and hooks.active and curriculum.warm_start_demos > 0:
        hooks.warm_start(expert_trajectories(env_factory, list(range(curriculum.warm_start_demos)), rule))
    return hooks
