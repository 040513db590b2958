"""The learning race without an LM: a tabular softmax trained by each estimator's advantages.

The policy (:class:`~creditflow.auditing.policy.Tabular`) has one logit per (``state_key``, action), all zero at
the start. Each iteration samples ``groups`` tasks from a fixed pool (``pool``), rolls out ``group_size``
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
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Callable, Mapping, Sequence

import numpy as np

from creditflow.auditing.errors import AuditError
from creditflow.auditing.estimators import Arm, advantages, arms as estimator_arms, columns
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


def evaluate(sim: Sim, policy: Tabular, pool: Sequence[int], rng: np.random.Generator) -> float:
    policy.greedy = True
    try:
        wins = sim.run([(sim.start(s), None) for s in pool], policy, rng)
    finally:
        policy.greedy = False
    return float(np.mean(wins))


def race_run(sim: Sim, arm: RaceArm | None, seed: int, settings: RaceSettings,
             advantage_fn: AdvantageFn | None = None) -> dict:
    """One seed of one arm: ``{"curve": [[episodes, success], ...], "auc", "final", "episodes_to_half"}``.
    ``advantage_fn(episodes, policy) -> (S,) advantages`` replaces the arm's estimator (tests inject known-good or
    known-bad credit through it)."""
    st = settings
    tasks_rng = np.random.default_rng([seed, 1])
    act_rng = np.random.default_rng([seed, 2])
    eval_rng = np.random.default_rng([seed, 3])
    cur_rng = np.random.default_rng([seed, 4])
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
    curve = [[0, evaluate(sim, policy, st.pool, eval_rng)]]
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
        cols = columns(episodes)
        adv = advantage_fn(episodes, policy) if advantage_fn is not None else advantages(arm.arm, cols)
        rows = np.empty(cols.n, dtype=np.int64)
        picks = np.empty(cols.n, dtype=np.int64)
        i = 0
        for ep in episodes:
            for s in ep.steps:
                rows[i] = policy.row(s.node.key, s.node.admissible)
                picks[i] = policy.actions[rows[i]].index(s.action)
                i += 1
        ppo_clip_step(policy, rows, picks, adv, np.full(cols.n, 1.0 / st.group_size), st.lr, st.epochs, st.clip)
        if controller is not None:
            _curriculum(sim, controller, buffer, paths, episodes, entries, st.group_size, iteration)
        used += len(episodes)
        iteration += 1
        if iteration % st.eval_every == 0 or used >= st.episodes:
            curve.append([used, evaluate(sim, policy, st.pool, eval_rng)])
    scores = curve_summary(curve, 0.5)
    return {"curve": curve, "auc": scores["auc"], "final": scores["final"], "episodes_to_half": scores["reached_at"],
            "states": len(policy.rows)}


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
