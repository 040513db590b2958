"""The LM race (issue 87): ``benchmarks/lm_race.py``'s records ``lm_race_<setting>_runs/`` and summaries, one
:class:`LMRace` per setting.
"""

from __future__ import annotations

from dataclasses import dataclass

from benchmarks import stats
from benchmarks.report import paths
from benchmarks.report.claims import CREDIT_CLAIM, GRAPH_CLAIMS
from benchmarks.report.paths import read_json, rel, slug
from benchmarks.report.records import Run, arm_seed
from benchmarks.report.text import ordered

# the race settings the pages are written for, records or not: the demo's levels and the harder setting the pilot
# chooses (``benchmarks/lm_race.py --measure``; "sokoban7" is its first candidate: name the chosen one here)
LM_RACES = {"demo": "Sokoban 6×6, 1 box (the demo's levels)", "sokoban7": "Sokoban 7×7, 1 box"}
LM_RACE_ARMS = ("grpo", "gigpo", "rewardflow", "graphgpo")  # lm_race.DEFAULT_METHODS
LM_RACE_CLAIMS = [("", CREDIT_CLAIM), *GRAPH_CLAIMS]
IN_PROGRESS = "in progress"  # a race whose invocation has not ended: no verdict yet (LMRace.in_progress)
LM_RACE_METRICS = {"auc": "area under the greedy pool success curve", "final": "final pool success",
                   "test_final": "success on new levels (test split) after RL"}


@dataclass
class LMRace:
    """One race setting's records (none yet: a page that says so) and its summary's settings."""

    setting: str
    title: str
    summary: dict | None
    runs: list[Run]
    pilot: list[Run]

    @property
    def page(self) -> str:
        return f"lm-race-{slug(self.setting)}.md"

    @property
    def settings(self) -> dict:
        return (self.summary or {}).get("settings", {})

    @property
    def arms(self) -> list[str]:
        return ordered({r.arm for r in self.runs})

    @property
    def in_progress(self) -> bool:
        """Runs but no summary, or runs of seeds its summary does not list: ``lm_race.py`` writes the summary when
        an invocation ends, so the race is still running (or was stopped) and its verdicts wait for it."""
        if not self.runs:
            return False
        if self.summary is None:
            return True
        listed = self.settings.get("seeds")
        return listed is not None and bool({r.seed for r in self.runs} - set(listed))

    def verdict(self, ps: list) -> str:
        """The claim's verdict from its pairs' differences; ``in progress`` while the race runs."""
        return IN_PROGRESS if self.in_progress else stats.ordering_verdict(ps)

    def values(self, arm: str, key: str = "auc") -> dict:
        return {r.seed: r.extra[key] for r in self.runs if r.arm == arm and r.extra.get(key) is not None}

    def pair(self, a: str, b: str, key: str = "auc") -> stats.Paired:
        """a − b seed by seed (the same pool, task sequence and π_SFT), leaving out seeds of different π_SFT."""
        sha = {(r.arm, r.seed): r.sft_sha for r in self.runs}
        va, vb = self.values(a, key), self.values(b, key)
        keep = [s for s in set(va) & set(vb) if sha.get((a, s)) == sha.get((b, s))]
        return stats.paired({s: va[s] for s in keep}, {s: vb[s] for s in keep})

    def verdicts(self, key: str = "auc") -> list[tuple[str, str, list]]:
        out = []
        for label, pairs in LM_RACE_CLAIMS:
            if not all(a in self.arms and b in self.arms for a, b in pairs):
                continue
            ps = [(a, b, self.pair(a, b, key)) for a, b in pairs]
            out.append((label, self.verdict([p for _, _, p in ps]), ps))
        return out


def race_run(arm: str, stored: dict, source: str, threshold: float | None) -> Run:
    """A race record as a Run: value = the pool curve's area; extra = what the tabular race reports of it
    (``auditing.race.curve_summary``), the test split before and after RL, the training curve's area, the machine."""
    from creditflow.auditing.race import curve_summary

    r = stored["record"]
    curve = r["curves"]["eval/success_rate"]
    scores = curve_summary(curve, threshold if threshold is not None else 2.0)  # no threshold known: never reached
    test = r["curves"].get("test/success_rate") or []
    cfg = stored.get("config") or {}
    extra = {"auc": scores["auc"], "final": scores["final"], "start": curve[0][1],
             "reached_at": scores["reached_at"] if threshold is not None else None, "curve": curve,
             "test_start": test[0][1] if len(test) >= 2 else None, "test_final": test[-1][1] if len(test) >= 2 else None,
             "train_auc": r.get("mean_train_success"), "rl_minutes": r.get("rl_minutes"), "machine": stored.get("machine"),
             "pool": (cfg.get("env") or {}).get("train_pool"), "offset": (cfg.get("env") or {}).get("eval_seed_offset"),
             "steps": (cfg.get("rl") or {}).get("steps"), "resumed_at_step": r.get("resumed_at_step")}
    return Run(arm, r["seed"], scores["auc"], curve[0][1], r.get("sft_sha256"), source, extra)


def race_runs(stem: str, threshold: float | None) -> list[Run]:
    runs = [race_run(arm_seed(path.stem)[0], read_json(path), rel(path), threshold)
            for path in sorted((paths.RESULTS / f"{stem}_runs").glob("*_s*.json"))]
    budgets = {(r.extra["steps"], r.extra["pool"]) for r in runs}
    if len(budgets) > 1:  # runs of another budget (a smoke run, a changed setting) must not join one race
        raise SystemExit(f"error: {rel(paths.RESULTS / stem)}_runs/ mixes budgets (RL steps, pool): {sorted(budgets)}")
    return runs


def load_lm_races() -> list[LMRace]:
    """Every race setting of :data:`LM_RACES`, and any other with a summary: its records, its pilot's."""
    found = {p.stem.removeprefix("lm_race_") for p in paths.RESULTS.glob("lm_race_*.json")
             if not p.stem.endswith(("_pilot", "_smoke")) and not p.stem.startswith("lm_race_pools_")}
    races = []
    for setting in [*LM_RACES, *sorted(found - set(LM_RACES))]:
        path = paths.RESULTS / f"lm_race_{setting}.json"
        summary = read_json(path) if path.exists() else None
        threshold = (summary or {}).get("settings", {}).get("threshold")
        pilot_path = paths.RESULTS / f"lm_race_{setting}_pilot.json"
        pilot_threshold = read_json(pilot_path)["settings"]["threshold"] if pilot_path.exists() else None
        title = (summary or {}).get("settings", {}).get("title") or LM_RACES.get(setting, setting)
        races.append(LMRace(setting, title, summary, race_runs(f"lm_race_{setting}", threshold),
                            race_runs(f"lm_race_{setting}_pilot", pilot_threshold)))
    return races


def pool_measurements(setting: str) -> list[dict]:
    """``lm_race.py --measure`` records of a setting (π_SFT on the pools of tuning seeds), oldest π_SFT first."""
    return [read_json(p) for p in sorted(paths.RESULTS.glob(f"lm_race_pools_{setting}_*.json"))
            if not p.stem.endswith("_smoke")]
