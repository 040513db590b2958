"""The learning race without an LM: a tabular softmax trained by each estimator's advantages.

The policy (:class:`~creditflow.auditing.policy.Tabular`) has one logit per (task, ``state_key``, action), all
zero at the start. Each iteration samples ``groups`` tasks from the run's pool (``pool``: by default a fresh pool
per seed, :func:`pool_of`), rolls out ``group_size``
episodes of each, scores them with the arm's estimator (reward: success at the end) and takes ``epochs``
full-batch steps on the PPO-clip objective (:func:`~creditflow.auditing.policy.ppo_clip_step`; each step's
weight 1/G: the mean over a group of each rollout's summed objective). Every ``eval_every`` iterations the
greedy policy plays every pool task once from its start; the success curve is that share against the
training episodes used so far. Outputs: the curve, its area (the mean of the curve's points after the first),
the final success and the episodes to reach 50% success (None when never reached).

Arms: every estimator arm (:func:`~creditflow.auditing.estimators.arms`), plus ``grpo+crps`` and
``grpo+expreplay``: GRPO's advantages with CRPS's start-state curriculum or the ExpReplay baseline
(``creditflow.curriculum``: the success buffer, the insertion gate, Eq. 13's replay mixture and the suffix
controller, with the trainer's defaults of ``curriculum.*``). A replay group starts from a stored success's
state s_t0 (restored by snapshot) and its episodes count against the same budget.

Seeds pair the arms: seed ``s`` draws the tasks of iteration i from its own stream (the same tasks for
every arm, replay groups aside) and the actions from another.

A fair race (issue 85): each seed plays its own pool (:func:`pool_of`; the records before it shared one pool
across seeds), and every arm runs at each learning rate of a grid. The rate an arm is reported at is the one
with the best mean AUC on *tuning* seeds (:func:`tuning_key`: their own random streams and pools, disjoint from
every reported seed's), chosen by :func:`best_rates` before the reported seeds are looked at; the reported seeds
run every rate too, so a page shows each arm at its own rate and at the common one.

:class:`SnapshotTrainer` trains the same policy on an audit seed's tasks until its sampled success there reaches
a target: the learning behaviour policies of the audit (:class:`~creditflow.auditing.policy.TabularSnapshot`).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Callable, Mapping, Sequence

import numpy as np

from creditflow.auditing.errors import AuditError
from creditflow.auditing.estimators import Arm, arm_advantages, arms as estimator_arms, episode_rows
from creditflow.auditing.policy import Tabular, ppo_clip_step
from creditflow.auditing.sim import Episode, Sim
from creditflow.config import CurriculumConfig
from creditflow.curriculum.crps import (
    BufferEntry,
    SuccessBuffer,
    SuffixController,
    group_success_rate,
    insertion_gate,
    replay_mixture,
)
from creditflow.curriculum.replay import ExpReplay

CURRICULA = {"crps": SuffixController, "expreplay": ExpReplay}
BASE = "grpo"  # the estimator the curricula run on (the CRPS paper's baseline)


@dataclass
class RaceSettings:
    pool: list[int]  # task seeds
    groups: int = 4  # tasks per iteration
    group_size: int = 8
    episodes: int = 1280  # training-episode budget
    lr: float = 1.0
    epochs: int = 2
    clip: float = 0.2
    eval_every: int = 2  # iterations


@dataclass(frozen=True)
class RaceArm:
    name: str
    arm: Arm
    curriculum: str | None = None


def race_arms(only: Sequence[str] | None = None, knobs: Mapping[str, Mapping] | None = None) -> list[RaceArm]:
    """Every estimator arm, and GRPO + each curriculum (``only``: these names; ``knobs`` as
    :func:`~creditflow.auditing.estimators.arms`)."""
    est = estimator_arms(knobs=knobs)
    base = {a.name: a for a in est}.get(BASE)
    out = [RaceArm(a.name, a) for a in est]
    if base is not None:
        out += [RaceArm(f"{BASE}+{c}", base, c) for c in CURRICULA]
    if only is not None:
        known = {a.name for a in out}
        bad = [o for o in only if o not in known]
        if bad:
            raise AuditError(f"unknown race arm {bad[0]!r}; available: {', '.join(sorted(known))}")
        out = [a for a in out if a.name in only]
    return out


AdvantageFn = Callable[[Sequence[Episode], Tabular], np.ndarray]


def greedy_success(sim: Sim, policy: Tabular, pool: Sequence[int], rng: np.random.Generator) -> float:
    """The success rate of ``policy``, greedy, on one episode from each task of ``pool``."""
    policy.greedy = True
    try:
        wins = sim.run([(sim.start(s), None) for s in pool], policy, rng)
    finally:
        policy.greedy = False
    return float(np.mean(wins))


TUNE_STREAM = 85_085  # the first word of a tuning seed's random streams (a reported seed's is the seed itself)


def tuning_key(i: int) -> tuple[int, int]:
    """The random-stream key of tuning seed ``i``: never that of a reported seed (whose key is ``(s,)``)."""
    return (TUNE_STREAM, int(i))


def pool_of(offset: int, size: int, index: int) -> list[int]:
    """The env seeds of pool number ``index``: ``offset + index * size + j`` (j < size). Reported seed s plays
    pool s; tuning seed i plays pool −(i + 1), below ``offset``, so no tuning pool is a reported seed's."""
    return [int(offset) + int(index) * int(size) + j for j in range(int(size))]


def check_pools(offset: int, size: int, seeds: int, tune_seeds: int, num_tasks: int | None) -> None:
    """The reported pools (0 .. seeds − 1) and the tuning pools (−1 .. −tune_seeds) hold distinct tasks: env seeds
    above 0 and, for an env with ``num_tasks`` (seed z plays task z % num_tasks), distinct modulo it; else one
    :class:`AuditError` line."""
    if tune_seeds and int(offset) - int(tune_seeds) * int(size) < 0:
        raise AuditError(f"race_offset {offset} leaves no room below it for {tune_seeds} tuning pools of {size} tasks")
    if num_tasks:
        need = (int(seeds) + int(tune_seeds)) * int(size)
        if need > int(num_tasks):
            raise AuditError(f"the race needs {need} distinct tasks ({seeds} reported + {tune_seeds} tuning seeds x "
                             f"a pool of {size}) but the env has {num_tasks}: make race_pool or the seeds smaller")


def race_run(sim: Sim, arm: RaceArm | None, seed, settings: RaceSettings,
             advantage_fn: AdvantageFn | None = None) -> dict:
    """One seed of one arm: ``{"curve": [[episodes, success], ...], "auc", "final", "episodes_to_half"}``.
    ``seed``: an int, or a tuple of ints (a tuning seed's :func:`tuning_key`) that keys the random streams.
    ``advantage_fn(episodes, policy) -> (S,) advantages`` replaces the arm's estimator (tests inject known-good or
    known-bad credit through it)."""
    st = settings
    key = list(seed) if isinstance(seed, (tuple, list)) else [int(seed)]
    tasks_rng = np.random.default_rng([*key, 1])
    act_rng = np.random.default_rng([*key, 2])
    eval_rng = np.random.default_rng([*key, 3])
    cur_rng = np.random.default_rng([*key, 4])
    policy = Tabular()
    cfg = CurriculumConfig()
    controller = None
    buffer = SuccessBuffer(cfg.capacity, cfg.eviction)
    paths: dict[int, list] = {}  # buffer uid -> the nodes of its success
    if arm is not None and arm.curriculum:
        controller = CURRICULA[arm.curriculum](
            band=(cfg.band[0], cfg.band[1]), ema_lambda=cfg.ema_lambda, delta=cfg.delta, beta_min=cfg.beta_min,
            beta_max=cfg.beta_max, k_min=cfg.k_min, k_max=cfg.k_max, mastery_threshold=cfg.mastery_threshold,
            mastery_patience=cfg.mastery_patience)
    used = 0
    curve = [[0, greedy_success(sim, policy, st.pool, eval_rng)]]
    iteration = 0
    while used < st.episodes:
        tasks = [int(t) for t in tasks_rng.choice(st.pool, size=st.groups, replace=len(st.pool) < st.groups)]
        replays = (replay_mixture(cur_rng, st.groups, cfg.p_replay, len(buffer)) if controller is not None
                   else [False] * st.groups)
        starts, entries = [], []
        for task, rep in zip(tasks, replays):
            entry = buffer.sample(cur_rng) if rep else None
            entries.append(entry)
            starts.append(paths[entry.uid][controller.start_of(entry)] if entry is not None else sim.start(task))
        episodes = sim.groups([n.seed for n in starts], st.group_size, policy, act_rng, starts=starts)
        cols = episode_rows(episodes)
        adv = advantage_fn(episodes, policy) if advantage_fn is not None else arm_advantages(arm.arm, cols)
        rows = np.empty(cols.n, dtype=np.int64)
        picks = np.empty(cols.n, dtype=np.int64)
        i = 0
        for ep in episodes:
            for s in ep.steps:
                rows[i] = policy.row((s.node.seed, s.node.key), s.node.admissible)
                picks[i] = policy.actions[rows[i]].index(s.action)
                i += 1
        ppo_clip_step(policy, rows, picks, adv, np.full(cols.n, 1.0 / st.group_size), st.lr, st.epochs, st.clip)
        if controller is not None:
            _curriculum(sim, controller, buffer, paths, episodes, entries, st.group_size, iteration)
        used += len(episodes)
        iteration += 1
        if iteration % st.eval_every == 0 or used >= st.episodes:
            curve.append([used, greedy_success(sim, policy, st.pool, eval_rng)])
    scores = curve_summary(curve, 0.5)
    return {"curve": curve, "auc": scores["auc"], "final": scores["final"], "episodes_to_half": scores["reached_at"],
            "states": len(policy.rows)}


def best_rates(tuning: Mapping[str, Mapping[float, Sequence[float]]]) -> dict[str, float]:
    """Per arm, the learning rate with the highest mean AUC over its tuning seeds (``arm -> {lr: [auc, ...]}``);
    a tie goes to the smaller rate. Reported seeds never enter this choice."""
    out = {}
    for arm, by_lr in tuning.items():
        scored = [(float(np.mean(v)), -float(lr), float(lr)) for lr, v in by_lr.items() if len(v)]
        if scored:
            out[arm] = max(scored)[2]
    return out


class SnapshotTrainer:
    """Trains the race's tabular softmax from zero on an audit seed's tasks with ``arm``'s advantages (GRPO by
    default: outcome-only credit, which shapes the policy by no estimator's state structure), ``lr``, the race's
    PPO-clip step, ``group_size`` rollouts of every task an iteration; after every iteration the sampled policy
    plays ``probe`` episodes of each task, and the first time that success reaches a target the policy is copied
    and frozen there. One training serves every target of a seed (20%, 50% and 80% are three points of one
    learning curve); it stops at the largest target asked for or after ``max_episodes`` training episodes (the
    snapshot is then the last policy, recorded as not reached).

    :meth:`snapshot` returns the frozen :class:`~creditflow.auditing.policy.Tabular` and what the record keeps:
    the training episodes, the probe success at the freeze, and whether the target was reached."""

    def __init__(self, arm: str = "grpo", lr: float = 0.3, group_size: int = 8, probe: int = 16,
                 max_episodes: int = 6400, targets: Sequence[float] = (0.2, 0.5, 0.8), knobs: Mapping | None = None):
        self.arm, self.lr, self.group_size, self.probe = arm, float(lr), int(group_size), int(probe)
        self.max_episodes, self.targets = int(max_episodes), tuple(sorted(float(t) for t in targets))
        self.knobs = knobs
        self._done: dict[tuple, dict] = {}

    def snapshot(self, sim: Sim, tasks: Sequence[int], seed: int, target: float) -> tuple[Tabular, dict]:
        key = (id(sim), tuple(int(t) for t in tasks), int(seed))
        targets = tuple(sorted(set(self.targets) | {float(target)}))
        if key not in self._done or float(target) not in self._done[key]:
            self._done[key] = self._train(sim, list(key[1]), int(seed), targets)
        return self._done[key][float(target)]

    def _train(self, sim: Sim, tasks: list[int], seed: int, targets: Sequence[float]) -> dict:
        (arm,) = [a for a in estimator_arms(knobs=self.knobs) if a.name == self.arm] or [None]
        if arm is None:
            raise AuditError(f"snapshot trainer: unknown estimator arm {self.arm!r}")
        act_rng = np.random.default_rng([seed, 21])
        probe_rng = np.random.default_rng([seed, 22])
        policy = Tabular()
        starts = [sim.start(t) for t in tasks]
        out: dict = {}
        used = 0

        def probe() -> float:
            return float(np.mean(sim.run([(n, None) for n in starts for _ in range(self.probe)], policy, probe_rng)))

        success = probe()
        while True:
            for t in targets:
                if t not in out and success >= t:
                    out[t] = (policy.copy(), {"target": t, "episodes": used, "probe_success": success, "reached": True,
                                              "trainer": self.arm, "lr": self.lr})
            if len(out) == len(targets) or used >= self.max_episodes:
                break
            episodes = sim.groups(tasks, self.group_size, policy, act_rng)
            cols = episode_rows(episodes)
            adv = arm_advantages(arm, cols)
            rows = np.array([policy.row((s.node.seed, s.node.key), s.node.admissible) for ep in episodes
                             for s in ep.steps], dtype=np.int64)
            picks = np.array([policy.actions[r].index(s.action) for r, s in
                              zip(rows, (s for ep in episodes for s in ep.steps))], dtype=np.int64)
            ppo_clip_step(policy, rows, picks, adv, np.full(cols.n, 1.0 / self.group_size), self.lr)
            used += len(episodes)
            success = probe()
        for t in targets:
            if t not in out:
                out[t] = (policy.copy(), {"target": t, "episodes": used, "probe_success": success, "reached": False,
                                          "trainer": self.arm, "lr": self.lr})
        return out


def curve_summary(curve: Sequence[Sequence[float]], threshold: float = 0.5) -> dict:
    """What a race reports of one run's success curve ``[[x, success], ...]`` (x: training episodes, or RL steps;
    the first point is the start, before any training): ``auc``, the mean of the points after the start (one
    point per evaluation, unweighted, no smoothing); ``final``, the last point; ``reached_at``, the x of the first
    point at or above ``threshold`` (the start included; None when never). The LM race
    (``benchmarks/lm_race.py``) reports its curves through this too."""
    values = [float(v) for _, v in curve]
    if len(values) < 2:
        raise AuditError(f"a race curve needs its start and at least one point after it, got {len(values)}")
    reached = next((x for x, v in curve if v >= threshold), None)
    return {"auc": float(np.mean(values[1:])), "final": values[-1], "reached_at": reached}


def _curriculum(sim: Sim, controller, buffer: SuccessBuffer, paths: dict, episodes: list[Episode],
                entries: list, g: int, iteration: int) -> None:
    """CRPS / ExpReplay after a rollout (as ``creditflow.curriculum.hooks``): replay groups update their entry
    (Eq. 10-12, mastery removal); fresh groups offer their shortest success under the gate (Eq. 6-7)."""
    cfg = CurriculumConfig()
    for k, entry in enumerate(entries):
        group = episodes[k * g:(k + 1) * g]
        acc = group_success_rate(ep.success for ep in group)
        if entry is not None:
            if entry.uid in buffer and controller.record(entry, acc):
                buffer.remove(entry.uid, "mastered")
                paths.pop(entry.uid, None)
            continue
        wins = [ep for ep in group if ep.success]
        if not wins or not insertion_gate(acc, True, cfg.alpha_max):
            continue
        task = f"{sim.name}/{group[0].seed}"
        if not buffer.accepts(task):
            continue
        best = min(wins, key=lambda ep: len(ep.steps))
        T = len(best.steps)
        uid = buffer.new_uid()
        evicted = buffer.add(BufferEntry(uid, task, sim.name, best.seed, "", [s.node.observation for s in best.steps],
                                         [s.action for s in best.steps], acc, controller.initial_k(acc, T),
                                         controller.ema_init(), inserted_step=iteration))
        paths[uid] = [s.node for s in best.steps]
        if evicted is not None:
            paths.pop(evicted, None)


def settings_dict(settings: RaceSettings) -> dict:
    return asdict(settings)
