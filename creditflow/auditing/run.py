"""``creditflow audit``: the four parts over seeds, one function per (part, seed) so a benchmark can resume.

- coverage and accuracy (:func:`accuracy_seed`): for audit seed s and behaviour policy π (the expert at ε, or
  any policy object), ``tasks`` tasks (env seeds ``task_offset + s * tasks + j``) × ``group_size`` rollouts,
  the coverage shares, then Â^π of every step by ``m`` + ``m`` continuations and every arm's metrics;
- the race (:func:`race_seed`): one arm, one seed (:mod:`creditflow.auditing.race`);
- RRO's pairs (:func:`rro_seed`): both samplers at every state of one rollout of each task
  (:mod:`creditflow.auditing.pairs`).

:func:`audit` runs the parts asked for and returns an :class:`AuditResult`: the per-seed values (its
``record``), and :meth:`AuditResult.lines`, the summary the command prints (means over seeds with 95% bootstrap
intervals, paired differences between arms seed by seed). Nothing here names an estimator: arms come from the
registry.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from itertools import combinations
from typing import Any, Callable, Sequence

import numpy as np

from creditflow.arguments import check_int, check_mapping, check_names, check_number, check_numbers
from creditflow.auditing.accuracy import accuracy, true_advantages
from creditflow.auditing.coverage import coverage, reading
from creditflow.auditing.errors import AuditError
from creditflow.auditing.estimators import Arm, arms, check_knobs, columns
from creditflow.auditing.metrics import bootstrap_interval
from creditflow.auditing.pairs import rro_pairs
from creditflow.auditing.policy import EpsilonExpert
from creditflow.auditing.race import RaceSettings, race_arms, race_run
from creditflow.auditing.sim import Sim
from creditflow.rollout.trajectory import SuccessRule

PARTS = ("coverage", "accuracy", "race", "rro")
METRICS = ("spearman", "sign", "auc", "within_spearman", "within_sign", "within_auc")


@dataclass
class AuditSettings:
    """Everything a run of the audit depends on (recorded with its results)."""

    parts: tuple = PARTS
    seeds: int = 20  # audit seeds of coverage, accuracy and RRO pairs
    epsilons: tuple = (0.5, 0.75, 0.9)  # the expert policy's ε values (groups mix outcomes at each)
    tasks: int = 4  # tasks (groups) per seed
    group_size: int = 8
    m: int = 32  # Monte-Carlo continuations per Q̂ and per V̂
    task_offset: int = 0
    race_seeds: int = 50
    race_pool: int = 8
    race_offset: int = 100_000
    race_groups: int = 4
    race_episodes: int = 1280
    race_lr: float = 1.0
    race_epochs: int = 2
    race_eval_every: int = 2
    rro_m: int = 5
    rro_candidates: int = 5
    rro_truth_m: int = 64
    estimators: list | None = None  # arm names; None: every registered estimator and preset
    race_arms: list | None = None  # None: every estimator arm (or those of ``estimators``) and GRPO + each curriculum
    knobs: dict | None = None  # arm -> knob values it runs with on top of its preset (e.g. {"graphgpo": {"omega": 0.8}})

    def check(self) -> None:
        """Every setting's type first (a :class:`~creditflow.errors.UserTypeError` naming it), then its value (an
        :class:`AuditError`); a selection given as one name (``parts="race"``) or one ε becomes a one-item one."""
        wrong: list[AuditError] = []

        def checked(name: str, check, *args, **kwargs) -> None:
            try:  # a UserTypeError is no AuditError: it stops here, before any value is judged
                setattr(self, name, check(getattr(self, name), name, *args, error=AuditError, **kwargs))
            except AuditError as exc:
                wrong.append(exc)

        for name in ("m", "rro_m", "rro_truth_m"):
            checked(name, check_int, what="(Monte-Carlo continuations per estimate)")
        for name in ("seeds", "tasks", "race_seeds", "race_pool", "race_groups", "race_episodes", "rro_candidates",
                     "race_eval_every", "race_epochs"):
            checked(name, check_int)
        for name in ("task_offset", "race_offset"):  # the first env seed
            checked(name, check_int, minimum=0)
        checked("group_size", check_int, minimum=2, what="(rollouts per group: estimators compare rollouts)")
        checked("race_lr", check_number, positive=True)
        checked("parts", check_names, PARTS, what="part")
        checked("epsilons", check_numbers, 0.0, 1.0)
        for name, what in (("estimators", "estimator"), ("race_arms", "race arm")):
            if getattr(self, name) is not None:
                checked(name, check_names, what=what)
                setattr(self, name, list(getattr(self, name)))
        if self.knobs is not None:
            self.knobs = check_mapping(self.knobs, "knobs", "arm names to knob values")
        if wrong:
            raise wrong[0]
        check_knobs(self.knobs)
        arms(self.estimators)
        race_arms(self.race_arms)

    def race(self) -> RaceSettings:
        return RaceSettings(pool=[self.race_offset + j for j in range(self.race_pool)], groups=self.race_groups,
                            group_size=self.group_size, episodes=self.race_episodes, lr=self.race_lr,
                            epochs=self.race_epochs, eval_every=self.race_eval_every)


def policies(settings: AuditSettings, policy=None) -> dict[str, Any]:
    """Behaviour policies by label: the given object, else the expert at each ε."""
    if policy is not None:
        if not callable(getattr(policy, "act", None)):
            raise AuditError(f"policy {policy!r} has no act(items, rng) method")
        return {getattr(policy, "name", type(policy).__name__): policy}
    return {f"eps={e:g}": EpsilonExpert(e) for e in settings.epsilons}


def accuracy_seed(sim: Sim, policy, seed: int, settings: AuditSettings, parts: Sequence[str] = ("coverage",
                  "accuracy")) -> dict:
    """Coverage and accuracy for one audit seed under ``policy``."""
    t0 = time.perf_counter()
    rng = np.random.default_rng([seed, 11])
    tasks = [settings.task_offset + seed * settings.tasks + j for j in range(settings.tasks)]
    episodes = sim.groups(tasks, settings.group_size, policy, rng)
    cols = columns(episodes)
    chosen = arms(settings.estimators, settings.knobs)
    out: dict = {"seed": seed, "tasks": tasks, "success": float(np.mean([ep.success for ep in episodes])),
                 "mean_steps": float(np.mean([len(ep.steps) for ep in episodes]))}
    if "coverage" in parts:
        out["coverage"] = coverage(episodes, cols, chosen)
    if "accuracy" in parts:
        truth = true_advantages(sim, episodes, settings.m, policy, rng)
        out["accuracy"] = accuracy(cols, truth, chosen)
    out["seconds"] = time.perf_counter() - t0
    return out


def race_seed(sim: Sim, arm_name: str, seed: int, settings: AuditSettings) -> dict:
    (arm,) = race_arms([arm_name], settings.knobs)
    t0 = time.perf_counter()
    out = race_run(sim, arm, seed, settings.race())
    out.update(seed=seed, arm=arm_name, seconds=time.perf_counter() - t0)
    return out


def rro_seed(sim: Sim, policy, seed: int, settings: AuditSettings) -> dict:
    t0 = time.perf_counter()
    rng = np.random.default_rng([seed, 12])
    tasks = [settings.task_offset + seed * settings.tasks + j for j in range(settings.tasks)]
    episodes = sim.groups(tasks, 1, policy, rng)
    nodes = [s.node for ep in episodes for s in ep.steps]
    out = rro_pairs(sim, nodes, policy, rng, settings.rro_m, settings.rro_candidates, settings.rro_truth_m)
    return {"seed": seed, **out, "seconds": time.perf_counter() - t0}


# --------------------------------------------------------------------------------------------------
# the whole audit and its summary
# --------------------------------------------------------------------------------------------------


@dataclass
class AuditResult:
    """Per-seed results of every part run (``record``) and the summary lines."""

    env: str
    settings: AuditSettings
    accuracy: dict = field(default_factory=dict)  # policy label -> [per-seed dict]
    race: dict = field(default_factory=dict)  # arm -> [per-seed dict]
    rro: dict = field(default_factory=dict)  # policy label -> [per-seed dict]

    @property
    def record(self) -> dict:
        return {"env": self.env, "settings": asdict(self.settings), "accuracy": self.accuracy, "race": self.race,
                "rro": self.rro}

    def lines(self) -> list[str]:
        return summary_lines(self.record)


def audit(env_factory: Callable[[], object], *, settings: AuditSettings | None = None, policy=None,
          success_rule: SuccessRule = SuccessRule(), progress: Callable[[str], None] | None = None,
          env_label: str | None = None, menu: Callable[..., Sequence[str]] | None = None) -> AuditResult:
    """Run the audit's ``settings.parts`` on ``env_factory()`` envs (module docstring); ``menu`` gives the
    candidate actions of free-text states (:class:`~creditflow.auditing.sim.Sim`)."""
    settings = settings or AuditSettings()
    settings.check()
    sim = Sim(env_factory, success_rule, menu=menu)
    result = AuditResult(env_label or sim.name, settings)
    say = progress or (lambda _: None)
    pols = policies(settings, policy)
    want = [p for p in ("coverage", "accuracy") if p in settings.parts]
    if want:
        for label, pol in pols.items():
            result.accuracy[label] = []
            for seed in range(settings.seeds):
                result.accuracy[label].append(accuracy_seed(sim, pol, seed, settings, want))
                say(f"{'/'.join(want)} {label} seed {seed}")
    if "race" in settings.parts:
        chosen = (race_arms(settings.race_arms, settings.knobs) if settings.race_arms is not None else
                  [a for a in race_arms(knobs=settings.knobs)
                   if settings.estimators is None or a.arm.name in settings.estimators])
        for arm in chosen:
            result.race[arm.name] = []
            for seed in range(settings.race_seeds):
                result.race[arm.name].append(race_seed(sim, arm.name, seed, settings))
            say(f"race {arm.name}: {settings.race_seeds} seeds")
    if "rro" in settings.parts:
        for label, pol in pols.items():
            result.rro[label] = [rro_seed(sim, pol, seed, settings) for seed in range(settings.seeds)]
            say(f"rro {label}")
    return result


def _mean_ci(values) -> str:
    v = [x for x in values if x is not None and x == x]
    if not v:
        return "–"
    ci = bootstrap_interval(v)
    return f"{np.mean(v):.3f}" + (f" [{ci[0]:.3f}, {ci[1]:.3f}]" if ci else "")


def _diff(a: list, b: list) -> str:
    d = [x - y for x, y in zip(a, b) if x is not None and y is not None and x == x and y == y]
    if not d:
        return "–"
    ci = bootstrap_interval(d)
    sep = "" if not ci or ci[0] <= 0 <= ci[1] else " *"
    return f"{np.mean(d):+.3f}" + (f" [{ci[0]:+.3f}, {ci[1]:+.3f}]" if ci else "") + sep


def summary_lines(record: dict) -> list[str]:
    """What ``creditflow audit`` prints: per part, means over seeds [95% bootstrap] and paired differences."""
    out = []
    for label, seeds in record["accuracy"].items():
        if seeds and "coverage" in seeds[0]:
            covs = [s["coverage"] for s in seeds]
            out.append(f"coverage ({label}, {len(seeds)} seeds of {covs[0]['groups']} groups): "
                       f"success {_mean_ci([s['success'] for s in seeds])}; "
                       f"steps sharing a state {_mean_ci([c['shared'] for c in covs])}; "
                       f"mixed groups {_mean_ci([c['mixed_groups'] for c in covs])}; "
                       f"steps with a path to success {_mean_ci([c['path_to_success'] for c in covs])}")
            names = list(covs[0]["at_trajectory_level"])
            out.append("  at the trajectory-level value: " + "; ".join(
                f"{n} {_mean_ci([c['at_trajectory_level'][n] for c in covs])}" for n in names))
            pooled = {"shared": float(np.mean([c["shared"] for c in covs])),
                      "mixed_groups": float(np.mean([c["mixed_groups"] for c in covs])),
                      "reads_state": covs[0]["reads_state"],
                      "at_trajectory_level": {n: float(np.mean([c["at_trajectory_level"][n] for c in covs]))
                                              for n in names}}
            out.append("  reading: " + reading(pooled))
        if seeds and "accuracy" in seeds[0]:
            accs = [s["accuracy"] for s in seeds]
            names = list(accs[0]["arms"])
            out.append(f"accuracy vs Monte-Carlo A^π ({label}, {len(seeds)} seeds, "
                       f"{sum(a['steps'] for a in accs)} steps, {sum(a['resolved'] for a in accs)} with |A| > 2 SE):")
            for n in names:
                out.append(f"  {n}: " + "; ".join(f"{m} {_mean_ci([a['arms'][n][m] for a in accs])}" for m in METRICS))
            if len(names) > 1:
                out.append("  paired differences of spearman, a − b (* : 95% interval excludes 0):")
                for a, b in combinations(names, 2):
                    out.append(f"    {a} − {b}: " + _diff([x["arms"][a]["spearman"] for x in accs],
                                                       [x["arms"][b]["spearman"] for x in accs]))
    if record["race"]:
        out.append("race (tabular softmax, greedy success on the task pool):")
        names = list(record["race"])
        for n in names:
            runs = record["race"][n]
            reached = [r["episodes_to_half"] for r in runs if r["episodes_to_half"] is not None]
            out.append(f"  {n} ({len(runs)} seeds): AUC {_mean_ci([r['auc'] for r in runs])}; final "
                       f"{_mean_ci([r['final'] for r in runs])}; reached 50% in {len(reached)} of {len(runs)} seeds"
                       + (f", median {np.median(reached):.0f} episodes" if reached else ""))
        if len(names) > 1:
            out.append("  paired differences of AUC, a − b (* : 95% interval excludes 0):")
            for a, b in combinations(names, 2):
                out.append(f"    {a} − {b}: " + _diff([r["auc"] for r in record["race"][a]],
                                                   [r["auc"] for r in record["race"][b]]))
    for label, seeds in record["rro"].items():
        out.append(f"RRO pairs vs Monte-Carlo Q^π ({label}, {len(seeds)} seeds):")
        for s in ("rising", "fixed"):
            out.append(f"  {s}: accuracy {_mean_ci([x[s]['accuracy'] for x in seeds])}; samples/step "
                       f"{_mean_ci([x[s]['samples_per_step'] for x in seeds])}; correct pairs per sample "
                       f"{_mean_ci([x[s]['correct_per_sample'] for x in seeds])}; pairs "
                       f"{sum(x[s]['pairs'] for x in seeds)}, resolved {sum(x[s]['resolved'] for x in seeds)}")
        out.append("  rising − fixed: accuracy " + _diff([x["rising"]["accuracy"] for x in seeds],
                                                        [x["fixed"]["accuracy"] for x in seeds])
                   + "; correct per sample " + _diff([x["rising"]["correct_per_sample"] for x in seeds],
                                                    [x["fixed"]["correct_per_sample"] for x in seeds]))
    return out
