"""``creditflow audit``: the parts over seeds, one function per (part, seed) so a benchmark can resume.

- coverage and accuracy (:func:`accuracy_seed`): for audit seed s and behaviour policy π (:func:`policies`: the
  expert at each ε, the uniform, detour and tabular-snapshot policies, an LM, or any policy object), ``tasks``
  tasks (env seeds ``task_offset + s * tasks + j``) × ``group_size`` rollouts, the coverage shares, then Â^π of
  every step (or of ``subsample`` steps drawn at random) by ``m`` + ``m`` continuations and every arm's metrics;
- bias apart from noise (:func:`bias_seed`): ``bias_groups`` groups of the same tasks, each arm's mean credit per
  (task, state, action) against A^π and its variance across groups (:mod:`creditflow.auditing.bias`; or of
  ``bias_subsample`` of those triples drawn at random);
- the race (:func:`race_seed`): one arm, one seed, one learning rate, on the seed's own pool; tuning seeds
  (:func:`race_tuning_seed`) pick each arm's rate (:mod:`creditflow.auditing.race`);
- RRO's pairs (:func:`rro_seed`): both samplers at every state of one rollout of each task
  (:mod:`creditflow.auditing.pairs`).

:func:`audit` runs the parts asked for and returns an :class:`AuditResult`: the per-seed values (its
``record``), and :meth:`AuditResult.lines`, the summary the command prints (means over seeds with 95% bootstrap
intervals, paired differences between arms seed by seed), short by default and ending with a one-line verdict
(:func:`verdict_line`: the arms closest to A^π, ahead of those a paired difference separates from the best).
Nothing here names an estimator: arms come from the registry.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from itertools import combinations
from typing import Any, Callable, Sequence

import numpy as np

from creditflow.arguments import check_int, check_mapping, check_names, check_number, check_numbers
from creditflow.auditing.accuracy import accuracy, subsample, true_advantages
from creditflow.auditing.bias import BiasPlan, bias_noise
from creditflow.auditing.coverage import coverage, reading
from creditflow.auditing.errors import AuditError
from creditflow.auditing.estimators import Arm, arms, check_knobs, episode_rows
from creditflow.auditing.metrics import bootstrap_interval
from creditflow.auditing.pairs import rro_pairs
from creditflow.auditing.policy import DetourExpert, EpsilonExpert, TabularSnapshot, Uniform
from creditflow.auditing.race import (
    RaceSettings,
    SnapshotTrainer,
    best_rates,
    check_pools,
    pool_of,
    race_arms,
    race_run,
    tuning_key,
)
from creditflow.auditing.sim import Sim
from creditflow.auditing.summary import (  # noqa: F401 (RESOLVED_MIN: API)
    RESOLVED_MIN, diff_text, fair_lines, race_common)
from creditflow.rollout.trajectory import SuccessRule

PARTS = ("coverage", "accuracy", "race", "rro", "bias")
POLICIES = ("expert", "uniform", "detour", "tabular")  # built-in behaviour policies (an LM: policy_model=DIR)
RACE_POOLS = ("fresh", "shared")
METRICS = ("spearman", "sign", "auc", "within_spearman", "within_sign", "within_auc")


@dataclass
class AuditSettings:
    """Everything a run of the audit depends on (recorded with its results)."""

    parts: tuple = ("coverage", "accuracy", "race", "rro")
    seeds: int = 20  # audit seeds of coverage, accuracy, bias and RRO pairs
    policies: tuple = ("expert",)  # behaviour policies (POLICIES); a policy object or an LM replaces them
    epsilons: tuple = (0.5, 0.75, 0.9)  # the expert policy's ε values (groups mix outcomes at each)
    detour_rate: float = 0.5  # the detour expert's share of states that detour
    detour_epsilon: float = 0.2  # and its uniform share
    tabular_targets: tuple = (0.2, 0.5, 0.8)  # sampled success at which the tabular policy is frozen
    tabular_lr: float = 0.3  # the snapshot trainer's learning rate (GRPO's credit, the race's PPO-clip step)
    subsample: int | None = None  # steps per seed whose A^π is estimated (None: every step)
    bias_groups: int = 8  # K: independent groups of every task for bias apart from noise
    bias_m: int | None = None  # Monte-Carlo continuations there (None: m)
    bias_subsample: int | None = None  # triples (seen in 2+ groups) per seed whose A^π is estimated (None: all)
    tasks: int = 4  # tasks (groups) per seed
    group_size: int = 8
    m: int = 32  # Monte-Carlo continuations per Q̂ and per V̂
    task_offset: int = 0
    race_seeds: int = 50
    race_pool: int = 8
    race_offset: int = 100_000
    race_groups: int = 4
    race_episodes: int = 1280
    race_lr: float = 1.0  # the common rate every arm is also reported at
    race_lrs: tuple = (0.1, 0.3, 1.0, 3.0)  # the grid each arm runs at; its best on the tuning seeds is its own
    race_tune_seeds: int = 10  # tuning seeds (their own pools and streams), used only to pick each arm's rate
    race_pools: str = "fresh"  # "fresh": seed s plays its own pool; "shared": every seed one pool (before issue 85)
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
        checked("bias_groups", check_int, minimum=2, what="(groups of every task: a variance needs two)")
        checked("race_tune_seeds", check_int, minimum=0)
        for name in ("subsample", "bias_m", "bias_subsample"):
            if getattr(self, name) is not None:
                checked(name, check_int)
        for name in ("detour_rate", "detour_epsilon"):
            checked(name, check_number, 0.0, 1.0)
        checked("tabular_lr", check_number, positive=True)
        checked("tabular_targets", check_numbers, 0.0, 1.0)
        checked("race_lrs", check_numbers)
        checked("policies", check_names, POLICIES, what="policy")
        checked("race_pools", _check_choice, RACE_POOLS)
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
        if not wrong:
            for name in ("tabular_targets",):
                bad = [t for t in getattr(self, name) if not 0 < t < 1]
                if bad:
                    wrong.append(AuditError(f"{name} must be above 0 and below 1, got {bad[0]!r}"))
            bad = [r for r in self.race_lrs if not r > 0]
            if bad:
                wrong.append(AuditError(f"race_lrs: a learning rate must be a positive number, got {bad[0]!r}"))
        if wrong:
            raise wrong[0]
        check_knobs(self.knobs)
        arms(self.estimators)
        race_arms(self.race_arms)

    def race(self, seed: int = 0, lr: float | None = None, tuning: bool = False) -> RaceSettings:
        """The race settings of one run: seed ``seed``'s pool (tuning seed ``seed``'s with ``tuning``; the one
        shared pool with ``race_pools="shared"``) at ``lr`` (default ``race_lr``)."""
        index = 0 if self.race_pools == "shared" else -(seed + 1) if tuning else seed
        return RaceSettings(pool=pool_of(self.race_offset, self.race_pool, index), groups=self.race_groups,
                            group_size=self.group_size, episodes=self.race_episodes,
                            lr=self.race_lr if lr is None else float(lr), epochs=self.race_epochs,
                            eval_every=self.race_eval_every)

    @property
    def tuning(self) -> bool:
        """Whether the race tunes each arm's rate: a grid of more than one rate and some tuning seeds."""
        return len(self.race_lrs) > 1 and self.race_tune_seeds > 0


def _check_choice(value, name, choices, error=AuditError):
    if not isinstance(value, str):
        from creditflow.errors import UserTypeError
        from creditflow.arguments import shown

        raise UserTypeError(f"{name} must be one of {', '.join(choices)} (str), got {shown(value)}")
    if value not in choices:
        raise error(f"{name} must be one of {', '.join(choices)}, got {value!r}")
    return value


def policy_label(policy) -> str:
    """A policy's name in the record: its ``label``, else its ``name``, else its class name."""
    return str(getattr(policy, "label", None) or getattr(policy, "name", None) or type(policy).__name__)


def policies(settings: AuditSettings, policy=None) -> dict[str, Any]:
    """Behaviour policies by label: the given object (or each of a list of them), else ``settings.policies``:
    the expert at each ε, the uniform policy, the detour expert, the tabular snapshots at each target."""
    if policy is not None:
        chosen = list(policy) if isinstance(policy, (list, tuple)) else [policy]
        out = {}
        for pol in chosen:
            if not callable(getattr(pol, "act", None)):
                raise AuditError(f"policy {pol!r} has no act(items, rng) method")
            out[policy_label(pol)] = pol
        return out
    out: dict[str, Any] = {}
    for name in settings.policies:
        if name == "expert":
            out.update({f"eps={e:g}": EpsilonExpert(e) for e in settings.epsilons})
        elif name == "uniform":
            out["uniform"] = Uniform()
        elif name == "detour":
            pol = DetourExpert(settings.detour_rate, settings.detour_epsilon)
            out[pol.label] = pol
        elif name == "tabular":
            trainer = SnapshotTrainer(lr=settings.tabular_lr, group_size=settings.group_size,
                                      targets=settings.tabular_targets, knobs=settings.knobs)
            for t in settings.tabular_targets:
                pol = TabularSnapshot(t, trainer)
                out[pol.label] = pol
    return out


def _tasks(settings: AuditSettings, seed: int) -> list[int]:
    return [settings.task_offset + seed * settings.tasks + j for j in range(settings.tasks)]


def _prepare(sim: Sim, policy, tasks: list[int], seed: int) -> dict | None:
    """The policy's ``prepare`` hook (a tabular snapshot trains on the seed's tasks; an LM loads): its record."""
    hook = getattr(policy, "prepare", None)
    return hook(sim, tasks, seed) if callable(hook) else None


def accuracy_seed(sim: Sim, policy, seed: int, settings: AuditSettings, parts: Sequence[str] = ("coverage",
                  "accuracy")) -> dict:
    """Coverage and accuracy for one audit seed under ``policy``."""
    t0 = time.perf_counter()
    rng = np.random.default_rng([seed, 11])
    tasks = _tasks(settings, seed)
    prepared = _prepare(sim, policy, tasks, seed)
    episodes = sim.groups(tasks, settings.group_size, policy, rng)
    cols = episode_rows(episodes)
    chosen = arms(settings.estimators, settings.knobs)
    out: dict = {"seed": seed, "tasks": tasks, "success": float(np.mean([ep.success for ep in episodes])),
                 "mean_steps": float(np.mean([len(ep.steps) for ep in episodes]))}
    if prepared:
        out["policy"] = prepared
    if "coverage" in parts:
        out["coverage"] = coverage(episodes, cols, chosen)
    if "accuracy" in parts:
        rows = subsample(cols.n, settings.subsample, np.random.default_rng([seed, 13]))
        truth = true_advantages(sim, episodes, settings.m, policy, rng, rows)
        out["accuracy"] = accuracy(cols, truth, chosen, rows)
    used = getattr(policy, "used", None)  # what the seed cost a policy that says (an LM: generate calls, tokens)
    if prepared is not None and callable(used):
        out["policy"] = {**prepared, **used()}
    out["seconds"] = time.perf_counter() - t0
    return out


def bias_seed(sim: Sim, policy, seed: int, settings: AuditSettings) -> dict:
    """Bias apart from noise for one audit seed under ``policy`` (:mod:`creditflow.auditing.bias`): the seed's
    tasks, ``bias_groups`` groups of each, ``bias_m`` (else ``m``) continuations per Monte-Carlo estimate, of
    every step or of ``bias_subsample`` triples' steps."""
    t0 = time.perf_counter()
    tasks = _tasks(settings, seed)
    prepared = _prepare(sim, policy, tasks, seed)
    plan = BiasPlan(settings.bias_groups, settings.group_size, settings.bias_m or settings.m, settings.bias_subsample)
    out = bias_noise(sim, policy, tasks, plan, arms(settings.estimators, settings.knobs), np.random.default_rng([seed, 14]))
    out = {"seed": seed, "tasks": tasks, **out, **({"policy": prepared} if prepared else {})}
    out["seconds"] = time.perf_counter() - t0
    return out


def race_seed(sim: Sim, arm_name: str, seed: int, settings: AuditSettings, lr: float | None = None) -> dict:
    """One reported seed of one race arm at ``lr`` (default ``race_lr``), on the seed's own pool."""
    (arm,) = race_arms([arm_name], settings.knobs)
    t0 = time.perf_counter()
    st = settings.race(seed, lr)
    out = race_run(sim, arm, seed, st)
    out.update(seed=seed, arm=arm_name, lr=st.lr, pool=st.pool, seconds=time.perf_counter() - t0)
    return out


def race_tuning_seed(sim: Sim, arm_name: str, i: int, settings: AuditSettings, lr: float) -> dict:
    """Tuning seed ``i`` of one race arm at ``lr``: its own random streams (:func:`~creditflow.auditing.race.
    tuning_key`) and its own pool, disjoint from every reported seed's; only :func:`race_rates` reads it."""
    (arm,) = race_arms([arm_name], settings.knobs)
    t0 = time.perf_counter()
    st = settings.race(i, lr, tuning=True)
    out = race_run(sim, arm, tuning_key(i), st)
    out.update(seed=i, arm=arm_name, lr=st.lr, pool=st.pool, tuning=True, seconds=time.perf_counter() - t0)
    return out


def race_rates(tuning: dict) -> dict[str, float]:
    """Each arm's own learning rate from its tuning runs (``arm -> [run, ...]``, each with ``lr`` and ``auc``)."""
    by: dict = {}
    for arm, runs in tuning.items():
        for r in runs:
            by.setdefault(arm, {}).setdefault(float(r["lr"]), []).append(r["auc"])
    return best_rates(by)


def check_race_pools(sim: Sim, settings: AuditSettings) -> None:
    """The reported seeds' pools and the tuning seeds' hold distinct tasks (one line where they cannot)."""
    if settings.race_pools == "fresh":
        check_pools(settings.race_offset, settings.race_pool, settings.race_seeds,
                    settings.race_tune_seeds if settings.tuning else 0, sim.num_tasks)


def rro_seed(sim: Sim, policy, seed: int, settings: AuditSettings) -> dict:
    t0 = time.perf_counter()
    rng = np.random.default_rng([seed, 12])
    tasks = _tasks(settings, seed)
    _prepare(sim, policy, tasks, seed)
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
    race: dict = field(default_factory=dict)  # arm -> [per-(seed, lr) dict]
    rro: dict = field(default_factory=dict)  # policy label -> [per-seed dict]
    bias: dict = field(default_factory=dict)  # policy label -> [per-seed dict]
    race_tuning: dict = field(default_factory=dict)  # arm -> [per-(tuning seed, lr) dict]

    @property
    def record(self) -> dict:
        return {"env": self.env, "settings": asdict(self.settings), "accuracy": self.accuracy, "race": self.race,
                "rro": self.rro, "bias": self.bias, "race_tuning": self.race_tuning,
                "race_rates": race_rates(self.race_tuning)}

    def lines(self, verbose: bool = False) -> list[str]:
        """The summary: short (a line or two per part, then the verdict), or with ``verbose`` every arm's metrics
        and every paired difference before the verdict."""
        return summary_lines(self.record, verbose=verbose)

    def verdict(self) -> str:
        """The summary's last line: which arm's credit came out closest to A^π (and which learned fastest)."""
        return verdict_line(self.record)


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
    if "race" in settings.parts:
        check_race_pools(sim, settings)  # before any work
    want = [p for p in ("coverage", "accuracy") if p in settings.parts]
    if want:
        for label, pol in pols.items():
            result.accuracy[label] = []
            for seed in range(settings.seeds):
                result.accuracy[label].append(accuracy_seed(sim, pol, seed, settings, want))
                say(f"{'/'.join(want)} {label} seed {seed}")
    if "bias" in settings.parts:
        for label, pol in pols.items():
            result.bias[label] = []
            for seed in range(settings.seeds):
                result.bias[label].append(bias_seed(sim, pol, seed, settings))
                say(f"bias {label} seed {seed}")
    if "race" in settings.parts:
        chosen = (race_arms(settings.race_arms, settings.knobs) if settings.race_arms is not None else
                  [a for a in race_arms(knobs=settings.knobs)
                   if settings.estimators is None or a.arm.name in settings.estimators])
        lrs = list(dict.fromkeys([*settings.race_lrs, settings.race_lr]))
        for arm in chosen:
            if settings.tuning:
                result.race_tuning[arm.name] = [race_tuning_seed(sim, arm.name, i, settings, lr)
                                                for lr in settings.race_lrs for i in range(settings.race_tune_seeds)]
                say(f"race {arm.name}: {settings.race_tune_seeds} tuning seeds x {len(settings.race_lrs)} rates")
            result.race[arm.name] = []
            for lr in lrs:
                for seed in range(settings.race_seeds):
                    result.race[arm.name].append(race_seed(sim, arm.name, seed, settings, lr))
            say(f"race {arm.name}: {settings.race_seeds} seeds x {len(lrs)} rates")
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


# --------------------------------------------------------------------------------------------------
# the verdict: which arms lead, and which are behind them by a separated paired difference
# --------------------------------------------------------------------------------------------------

NO_LEARNING = 0.02  # a race whose every arm's mean AUC is at most this learned nothing
SOLVED = 0.9  # ... and one whose greedy policy solved this share of the pool before any training is too easy


@dataclass
class Ranking:
    """Arms by their mean over seeds: ``leaders``, the best and those whose paired difference with it is not
    separated from 0; ``behind``, those it is separated from (95% bootstrap interval above 0); ``seeds``."""

    leaders: list[tuple[str, float]]
    behind: list[tuple[str, float]]
    seeds: int


def rank(values: dict[str, list]) -> Ranking | None:
    """The :class:`Ranking` of per-seed ``values`` by arm (paired by seed; NaNs dropped); None without a value."""
    means = {n: float(np.mean(v)) for n, v in ((n, [x for x in vs if x is not None and x == x])
                                                  for n, vs in values.items()) if v}
    if not means:
        return None
    order = sorted(means, key=lambda n: -means[n])
    best = order[0]
    leaders, behind = [(best, means[best])], []
    for n in order[1:]:
        d = [a - b for a, b in zip(values[best], values[n]) if a is not None and b is not None and a == a and b == b]
        ci = bootstrap_interval(d)
        (behind if ci is not None and ci[0] > 0 else leaders).append((n, means[n]))
    return Ranking(leaders, behind, max(len(v) for v in values.values()))


def _names(items: list[str], most: int = 5) -> str:
    items = items if len(items) <= most else [*items[: most - 1], f"{len(items) - most + 1} more"]
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def ranking_phrase(r: Ranking, metric: str) -> str:
    """"rewardflow (Spearman 0.44) and graphgpo (0.42), ahead of gigpo and grpo, separated over 20 seeds"."""
    (best, top), *tied = r.leaders
    lead = _names([f"{best} ({metric} {top:.2f})", *(f"{n} ({v:.2f})" for n, v in tied)], most=4)
    if r.seeds < 2:
        return f"{lead} in means of 1 seed, which separates nothing (give 5 seeds or more)"
    if not r.behind:
        return f"{lead}, no arm separated from another over {r.seeds} seeds (more seeds, or the arms are alike here)"
    return f"{lead}, ahead of {_names([n for n, _ in r.behind])}, separated over {r.seeds} seeds"


def _spearman(seeds: list[dict]) -> dict[str, list]:
    names = list(seeds[0]["accuracy"]["arms"])
    return {n: [s["accuracy"]["arms"][n]["spearman"] for s in seeds] for n in names}


def _outcome_note(seeds: list[dict]) -> str | None:
    """The accuracy part has nothing to rank where the policy never (or always) succeeded."""
    success = float(np.mean([s["success"] for s in seeds]))
    if success == 0:
        return "no rollout succeeded, so no arm's credit can be compared with A^π: lower ε or make the tasks easier"
    if success == 1:
        return "every rollout succeeded, so no arm's credit can be compared with A^π: raise ε or make the tasks harder"
    return None


def accuracy_phrase(seeds: list[dict]) -> str:
    """One policy's accuracy part in a phrase: the arms whose credit is closest to A^π (Spearman)."""
    note = _outcome_note(seeds)
    if note is not None:
        return note
    r = rank(_spearman(seeds))
    return "nothing measured" if r is None else "closest to A^π: " + ranking_phrase(r, "Spearman")


def race_verdict(race: dict, episodes: int | None = None, short: bool = False) -> str:
    """The race in a phrase: the arms that learned fastest (area under the greedy success curve), or that no arm
    learned, or that the pool was solved before training (``short``: without the advice)."""
    means = {n: float(np.mean([r["auc"] for r in runs])) for n, runs in race.items() if runs}
    if means and max(means.values()) <= NO_LEARNING:
        budget = f" in {episodes} episodes" if episodes else ""
        return f"no arm learned (AUC ≤ {NO_LEARNING} for every arm{budget})" + ("" if short else (
            ": the pool is too hard for a tabular policy from scratch; give the race more episodes (--race-episodes) "
            "or easier tasks, and read the accuracy part"))
    start = [r["curve"][0][1] for runs in race.values() for r in runs if r.get("curve")]
    if start and float(np.mean(start)) >= SOLVED:
        return (f"the untrained greedy policy already solves {100 * float(np.mean(start)):.0f}% of the pool, so the "
                "race cannot separate the arms" + ("" if short else ": use harder tasks, and read the accuracy part"))
    r = rank({n: [x["auc"] for x in runs] for n, runs in race.items()})
    return "nothing measured" if r is None else "learned fastest: " + ranking_phrase(r, "AUC")


def verdict_line(record: dict) -> str:
    """The audit in one line: per behaviour policy, the arms closest to A^π (never pooled over policies: each
    policy's A^π is a different target), then the race's verdict at the common rate."""
    parts = []
    for label, seeds in record["accuracy"].items():
        if not (seeds and "accuracy" in seeds[0]):
            continue
        note = _outcome_note(seeds)
        r = rank(_spearman(seeds)) if note is None else None
        if note is not None:
            parts.append(f"{label}: {note}")
        elif r is not None:
            parts.append(f"{label}: closest to A^π: " + ranking_phrase(r, "Spearman"))
    if record["race"]:
        episodes = (record.get("settings") or {}).get("race_episodes")
        parts.append("race: " + race_verdict(race_common(record), episodes, short=True))
    if not parts:
        return "verdict: nothing to rank (the coverage part alone says what the estimators can see; run accuracy)"
    return "verdict: " + "; ".join(parts)


def summary_lines(record: dict, verbose: bool = False) -> list[str]:
    """What ``creditflow audit`` prints: a line or two per part and policy, then the one-line verdict; with
    ``verbose``, every arm's means over seeds [95% bootstrap] and every paired difference first."""
    out = detail_lines(record) if verbose else [*short_lines(record), *fair_lines(record, verbose=False)]
    if not verbose:
        out.append("details: --verbose (every arm's metrics and paired differences), --out FILE (every per-seed value)")
    return [*out, verdict_line(record)]


def short_lines(record: dict) -> list[str]:
    """The default summary: per policy its coverage, its reading and its accuracy verdict; the race's verdict;
    per policy RRO's rising − fixed."""
    out = []
    for label, seeds in record["accuracy"].items():
        if seeds and "coverage" in seeds[0]:
            covs = [s["coverage"] for s in seeds]
            out.append(f"coverage ({label}, {len(seeds)} seeds of {covs[0]['groups']} groups): success "
                       f"{_mean_ci([s['success'] for s in seeds])}; steps sharing a state "
                       f"{_mean_ci([c['shared'] for c in covs])}; mixed groups "
                       f"{_mean_ci([c['mixed_groups'] for c in covs])}")
            out.append("  reading: " + reading(pooled_coverage(seeds)))
        if seeds and "accuracy" in seeds[0]:
            out.append(f"accuracy ({label}, {len(seeds)} seeds, {sum(s['accuracy']['steps'] for s in seeds)} steps): "
                       + accuracy_phrase(seeds))
    if record["race"]:
        out.append(f"race ({len(record['race'])} arms, tabular softmax, common rate): "
                   + race_verdict(race_common(record), (record.get("settings") or {}).get("race_episodes")))
    for label, seeds in record["rro"].items():
        out.append(f"RRO pairs ({label}, {len(seeds)} seeds): rising accuracy "
                   f"{_mean_ci([x['rising']['accuracy'] for x in seeds])} at "
                   f"{np.mean([x['rising']['samples_per_step'] for x in seeds]):.1f} samples/step, fixed "
                   f"{_mean_ci([x['fixed']['accuracy'] for x in seeds])} at "
                   f"{np.mean([x['fixed']['samples_per_step'] for x in seeds]):.1f}; rising − fixed accuracy "
                   + diff_text([x["rising"]["accuracy"] for x in seeds], [x["fixed"]["accuracy"] for x in seeds]))
    return out


def pooled_coverage(seeds: list[dict]) -> dict:
    """The coverage of one policy's seeds pooled (means), as :func:`~creditflow.auditing.coverage.reading` reads it."""
    covs = [s["coverage"] for s in seeds]
    names = list(covs[0]["at_trajectory_level"])
    pooled = {"shared": float(np.mean([c["shared"] for c in covs])),
              "mixed_groups": float(np.mean([c["mixed_groups"] for c in covs])),
              "path_to_success": float(np.mean([c["path_to_success"] for c in covs])),
              "success": float(np.mean([s["success"] for s in seeds])),
              "reads_state": covs[0]["reads_state"],
              "at_trajectory_level": {n: float(np.mean([c["at_trajectory_level"][n] for c in covs])) for n in names}}
    for key in ("no_success_groups", "all_success_groups"):  # records of earlier releases lack them
        if all(key in c for c in covs):
            pooled[key] = float(np.mean([c[key] for c in covs]))
    return pooled


def detail_lines(record: dict) -> list[str]:
    """``--verbose``: per part, means over seeds [95% bootstrap] and paired differences."""
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
            out.append("  reading: " + reading(pooled_coverage(seeds)))
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
                    out.append(f"    {a} − {b}: " + diff_text([x["arms"][a]["spearman"] for x in accs],
                                                       [x["arms"][b]["spearman"] for x in accs]))
            out.append(f"  {label}: " + accuracy_phrase(seeds))
    if record["race"]:
        common = race_common(record)  # every arm at the common rate (its own rate: fair_lines)
        out.append(f"race (tabular softmax, greedy success on the task pool; lr {record['settings'].get('race_lr', 1):g}):")
        names = list(common)
        for n in names:
            runs = common[n]
            reached = [r["episodes_to_half"] for r in runs if r["episodes_to_half"] is not None]
            out.append(f"  {n} ({len(runs)} seeds): AUC {_mean_ci([r['auc'] for r in runs])}; final "
                       f"{_mean_ci([r['final'] for r in runs])}; reached 50% in {len(reached)} of {len(runs)} seeds"
                       + (f", median {np.median(reached):.0f} episodes" if reached else ""))
        if len(names) > 1:
            out.append("  paired differences of AUC, a − b (* : 95% interval excludes 0):")
            for a, b in combinations(names, 2):
                out.append(f"    {a} − {b}: " + diff_text([r["auc"] for r in common[a]], [r["auc"] for r in common[b]]))
        out.append("  race: " + race_verdict(common, (record.get("settings") or {}).get("race_episodes")))
    for label, seeds in record["rro"].items():
        out.append(f"RRO pairs vs Monte-Carlo Q^π ({label}, {len(seeds)} seeds):")
        for s in ("rising", "fixed"):
            out.append(f"  {s}: accuracy {_mean_ci([x[s]['accuracy'] for x in seeds])}; samples/step "
                       f"{_mean_ci([x[s]['samples_per_step'] for x in seeds])}; correct pairs per sample "
                       f"{_mean_ci([x[s]['correct_per_sample'] for x in seeds])}; pairs "
                       f"{sum(x[s]['pairs'] for x in seeds)}, resolved {sum(x[s]['resolved'] for x in seeds)}")
        out.append("  rising − fixed: accuracy " + diff_text([x["rising"]["accuracy"] for x in seeds],
                                                        [x["fixed"]["accuracy"] for x in seeds])
                   + "; correct per sample " + diff_text([x["rising"]["correct_per_sample"] for x in seeds],
                                                    [x["fixed"]["correct_per_sample"] for x in seeds]))
    return out + fair_lines(record)
