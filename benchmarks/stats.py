"""Statistics for learning checks with 3-5 seeds: intervals over seeds, paired differences, the ordering verdict.

Pure NumPy/SciPy (no torch), shared by the benchmark scripts (``learning.py``, ``rro_samples.py``,
``demo_seeds.py``) and the report (``benchmarks/report/``). Every number these functions give is named by what it is:

- **mean ± sd**: the sample standard deviation over seeds, ``ddof=1`` (``mean_sd``); the older benchmark tables'
  ``±`` is ``ddof=0`` (``np.std``) and says so where the report shows it.
- **bootstrap interval**: 95% percentile interval of the mean over ``BOOTSTRAP_REPS`` resamples of the seeds
  (rliable's stratified bootstrap with one task, Agarwal et al. 2021; ``interval_estimates``, seed 0, so a
  summary recomputes exactly). With 3-5 seeds it under-covers: the resampled means can only take a few values.
- **t-interval**: mean ± t(0.975, n-1) · sd / √n (``t_interval``), reported beside the bootstrap where n ≤ 5.
- **paired difference**: arms that start from the same π_SFT with the same seed (the same task sequence) are
  compared seed by seed: d_s = a_s − b_s, with both intervals of mean(d) (``paired``).

``separated``: a paired difference is separated from zero when its 95% bootstrap interval excludes zero and,
with n ≤ 5 seeds, its 95% t-interval does too (the bootstrap alone is too narrow there).
The paper's ordering (``ordering_verdict``) over the pairs (a above b) the paper claims:

- ``yes``: every claimed pair is separated in the paper's direction;
- ``in means only``: every claimed pair's mean difference has the paper's sign, not all separated;
- ``reversed``: at least one claimed pair is separated against the paper's direction;
- ``no``: otherwise (some mean difference has the wrong sign or is zero, none separated against the paper);
- ``not tested``: a claimed pair has fewer than two paired seeds.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from scipy import stats as sps

BOOTSTRAP_REPS = 2000
LEVEL = 0.95
SMALL_N = 5  # up to this many seeds the t-interval is reported beside the bootstrap and must agree for "separated"


def mean_sd(values, ddof: int = 1) -> tuple[float | None, float | None]:
    """Mean and standard deviation (``ddof`` 1: the sample sd) of ``values``; sd is None for fewer than
    ``ddof + 1`` values, both None for none."""
    vals = np.asarray(list(values), dtype=float)
    if vals.size == 0:
        return None, None
    return float(vals.mean()), (float(vals.std(ddof=ddof)) if vals.size > ddof else None)


def t_interval(values, level: float = LEVEL) -> list[float] | None:
    """The ``level`` t-interval of the mean, mean ± t((1+level)/2, n−1) · sd(ddof=1) / √n; None for n < 2."""
    vals = np.asarray(list(values), dtype=float)
    n = vals.size
    if n < 2:
        return None
    mean, sd = float(vals.mean()), float(vals.std(ddof=1))
    half = float(sps.t.ppf((1 + level) / 2, n - 1)) * sd / float(np.sqrt(n))
    return [mean - half, mean + half]


def iqm(scores) -> float:
    """Interquartile mean over all (run, task) scores: the mean of the middle 50% (rliable's IQM)."""
    return float(sps.trim_mean(np.asarray(scores, dtype=float).ravel(), proportiontocut=0.25))


def stratified_bootstrap(scores: np.ndarray, aggregate, reps: int, rng: np.random.Generator) -> np.ndarray:
    """``aggregate`` of ``reps`` resamples of a (runs, tasks) score matrix; runs are resampled with
    replacement independently within each task (column), as rliable's StratifiedBootstrap does."""
    runs, tasks = scores.shape
    picks = rng.integers(0, runs, size=(reps, runs, tasks))
    resampled = scores[picks, np.arange(tasks)]  # (reps, runs, tasks)
    return np.array([aggregate(r) for r in resampled])


def interval_estimates(values, reps: int = BOOTSTRAP_REPS, seed: int = 0) -> dict:
    """Mean and IQM over runs with 95% stratified-bootstrap percentile intervals (one task: the strata are
    the runs). Fewer than two runs: no interval."""
    values = list(values)
    if len(values) < 2:
        return {"ci95": None, "iqm": float(values[0]) if values else None, "iqm_ci95": None}
    scores = np.asarray(values, dtype=float)[:, None]  # (runs, tasks=1)
    rng = np.random.default_rng(seed)
    boot = stratified_bootstrap(scores, lambda x: (float(np.mean(x)), iqm(x)), reps, rng)
    lo, hi = np.percentile(boot, [2.5, 97.5], axis=0)
    return {"ci95": [float(lo[0]), float(hi[0])], "iqm": iqm(scores), "iqm_ci95": [float(lo[1]), float(hi[1])]}


def bootstrap_interval(values, reps: int = BOOTSTRAP_REPS, seed: int = 0) -> list[float] | None:
    """The 95% percentile-bootstrap interval of the mean: ``interval_estimates``' ``ci95`` (the same draws, the
    same numbers), vectorised."""
    scores = np.asarray(list(values), dtype=float)
    if scores.size < 2:
        return None
    picks = np.random.default_rng(seed).integers(0, scores.size, size=(reps, scores.size, 1))
    means = scores[:, None][picks, np.arange(1)].mean(axis=1)[:, 0]
    lo, hi = np.percentile(means, [2.5, 97.5])
    return [float(lo), float(hi)]


@dataclass
class Summary:
    """One arm's values over seeds: mean, sd (ddof=1), the bootstrap and t intervals of the mean."""

    values: list[float]
    mean: float | None = None
    sd: float | None = None
    boot: list[float] | None = None
    t: list[float] | None = None

    @property
    def n(self) -> int:
        return len(self.values)


def summarize(values) -> Summary:
    vals = [float(v) for v in values]
    mean, sd = mean_sd(vals)
    return Summary(vals, mean, sd, bootstrap_interval(vals), t_interval(vals))


def excludes_zero(interval: list[float] | None) -> int:
    """+1 when ``interval`` lies above zero, −1 below, 0 when it holds zero or is None."""
    if not interval:
        return 0
    return 1 if interval[0] > 0 else -1 if interval[1] < 0 else 0


@dataclass
class Paired:
    """``a − b`` seed by seed over the seeds both arms have."""

    seeds: list
    diffs: list[float]
    summary: Summary = field(init=False)

    def __post_init__(self):
        self.summary = summarize(self.diffs)

    @property
    def n(self) -> int:
        return len(self.diffs)

    @property
    def wins(self) -> int:
        """Seeds where a is above b."""
        return sum(d > 0 for d in self.diffs)

    @property
    def losses(self) -> int:
        return sum(d < 0 for d in self.diffs)

    @property
    def separated(self) -> int:
        """+1 (a above b) or −1 (a below b) when the difference is separated from zero (module docstring), else 0."""
        s = self.summary
        side = excludes_zero(s.boot)
        if s.n < 2 or side == 0:
            return 0
        if s.n <= SMALL_N and excludes_zero(s.t) != side:
            return 0
        return side


def paired(a: dict, b: dict) -> Paired:
    """Paired differences ``a[seed] − b[seed]`` over the seeds in both (sorted)."""
    seeds = sorted(set(a) & set(b))
    return Paired(seeds, [float(a[s]) - float(b[s]) for s in seeds])


def ordering_verdict(pairs: list[Paired]) -> str:
    """The paper's ordering from its claimed pairs (each ``a − b`` with a the arm the paper puts above b);
    the rule is in the module docstring."""
    if not pairs or any(p.n < 2 for p in pairs):
        return "not tested"
    if any(p.separated < 0 for p in pairs):
        return "reversed"
    if all(p.separated > 0 for p in pairs):
        return "yes"
    if all(p.summary.mean > 0 for p in pairs):
        return "in means only"
    return "no"
