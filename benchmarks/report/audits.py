"""The credit audit (issue 71): ``benchmarks/credit_audit.py``'s summaries ``credit_audit_<setting>.json``, one
:class:`Audit` per setting, its verdicts per behaviour policy.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from benchmarks import stats
from benchmarks.audit_records import per_seed
from benchmarks.report import paths
from benchmarks.report.claims import CREDIT_CLAIM, CRPS_CLAIM, GRAPH_CLAIMS
from benchmarks.report.paths import read_json
from benchmarks.report.text import ordered
from creditflow.auditing.race import race_arms as audit_race_arms

AUDIT_SETTINGS = ["sokoban6", "sokoban7", "sokoban7_1box", "household", "webshop", "sql"]  # table order
RACE_ARMS = [a.name for a in audit_race_arms()]  # every race arm: each estimator, and GRPO + each curriculum
AUDIT_TITLES = {"sokoban7_1box": "Sokoban 7×7, 1 box"}  # the titles of settings that may have no record yet
AUDIT_METRICS = {"spearman": "Spearman", "sign": "sign agreement", "auc": "AUC", "within_spearman": "Spearman within",
                 "within_sign": "sign within", "within_auc": "AUC within"}
AUDIT_CLAIMS = {"accuracy": [("", CREDIT_CLAIM), *GRAPH_CLAIMS],
                "race": [("", CREDIT_CLAIM), ("CRPS", CRPS_CLAIM), *GRAPH_CLAIMS]}
# the behaviour policies (issue 85) each setting's benchmark runs (benchmarks/credit_audit.py SETTINGS): a kind
# without a record is "no record yet" on the page and in the claims table
AUDIT_KINDS = {"expert": "ε-expert", "uniform": "uniform", "detour": "detour expert", "tabular": "tabular snapshot",
               "lm": "π_SFT (the LM)"}
AUDIT_EXPECTED = {"sokoban6": ("expert", "uniform", "detour", "tabular", "lm"),
                  "sokoban7": ("expert", "uniform", "detour", "tabular", "lm"),
                  "sokoban7_1box": ("expert", "uniform", "detour", "tabular", "lm"),
                  "household": ("expert", "uniform", "detour", "tabular"), "webshop": ("expert", "lm"), "sql": ()}
KIND_NOTES = {  # what each behaviour policy can and cannot show (docs/audit.md says it at length)
    "expert": "walks a shortest path: its V^π falls with the distance to success, the shape graph credit computes",
    "uniform": "favours no estimator; its groups mix outcomes only where random play sometimes wins",
    "detour": "a competent policy whose V^π is no function of the distance",
    "tabular": "the race's own policy, trained with GRPO's credit on the seed's tasks and frozen at that success",
    "lm": "the LM a user trains: every action sampled from π_SFT",
}
RESOLVED_MIN = 50  # creditflow.auditing.summary.RESOLVED_MIN: a cell with fewer resolved steps is "not resolved"


def policy_kind(label: str) -> str:
    for prefix, kind in (("eps=", "expert"), ("uniform", "uniform"), ("detour", "detour"), ("tabular", "tabular"),
                         ("model=", "lm")):
        if label.startswith(prefix):
            return kind
    return "lm"


def policy_text(label: str) -> str:
    """A behaviour policy's name on a page: ``ε-expert, ε 0.5``, ``tabular snapshot at 20%``, ..."""
    kind = policy_kind(label)
    if kind == "expert":
        return f"ε-expert, ε {label[4:]}"
    if kind == "tabular":
        return f"tabular snapshot at {100 * float(label.split('=')[1]):.0f}%"
    if kind == "detour":
        parts = dict(p.split("=") for p in label.split(","))
        return f"detour expert (rate {parts['detour']}, ε {parts['eps']})"
    return AUDIT_KINDS[kind]


@dataclass
class Audit:
    """One setting's audit summary: per-seed values of every part, arms as recorded."""

    setting: str
    summary: dict

    @property
    def page(self) -> str:
        return f"credit-audit-{self.setting}.md"

    @property
    def title(self) -> str:
        return self.summary.get("title") or AUDIT_TITLES.get(self.setting, self.setting)

    @property
    def policies(self) -> list[str]:
        return list(self.summary.get("accuracy", {}))

    def has_accuracy(self, policy: str) -> bool:
        seeds = self.summary["accuracy"].get(policy) or []
        return bool(seeds) and "accuracy" in seeds[0]

    @property
    def measured_policies(self) -> list[str]:
        return [p for p in self.policies if self.has_accuracy(p)]

    @property
    def measured(self) -> bool:
        """Whether advantage accuracy was run (coverage-only settings, such as SQL, have none)."""
        return bool(self.measured_policies)

    @property
    def arms(self) -> list[str]:
        if not self.measured:
            return []
        return ordered(self.summary["accuracy"][self.measured_policies[0]][0]["accuracy"]["arms"])

    @property
    def lm_policies(self) -> list[str]:
        """Accuracy policies that are an LM (``model=...``)."""
        return [p for p in self.policies if policy_kind(p) == "lm"]

    @property
    def missing_kinds(self) -> list[str]:
        """Behaviour policies the setting's benchmark runs that have no accuracy record yet."""
        have = {policy_kind(p) for p in self.measured_policies}
        return [k for k in AUDIT_EXPECTED.get(self.setting, ()) if k not in have]

    def resolved(self, policy: str) -> int:
        return sum(s["accuracy"]["resolved"] for s in self.summary["accuracy"][policy] if "accuracy" in s)

    def is_resolved(self, policy: str) -> bool:
        return self.resolved(policy) >= RESOLVED_MIN

    def accuracy(self, arm: str, metric: str = "spearman", policy: str | None = None,
                 policies: list[str] | None = None) -> dict:
        """seed -> the arm's metric under one policy (or the mean over ``policies``: the prediction table's)."""
        per: dict = {}
        for label in [policy] if policy else policies if policies is not None else self.measured_policies:
            for s in self.summary["accuracy"][label]:
                value = s["accuracy"]["arms"].get(arm, {}).get(metric)
                if value is not None and value == value:
                    per.setdefault(s["seed"], []).append(value)
        return {seed: sum(v) / len(v) for seed, v in per.items()}

    def rro(self, sampler: str, key: str = "accuracy") -> dict:
        """seed -> RRO's pairs against Q^π for ``sampler`` (``rising`` or ``fixed``), the mean over the policies."""
        per: dict = {}
        for seeds in self.summary["rro"].values():
            for x in seeds:
                value = x[sampler][key]
                if value == value:
                    per.setdefault(x["seed"], []).append(value)
        return {seed: sum(v) / len(v) for seed, v in per.items()}

    # -- the race: fresh pools per seed at each arm's own rate and the common one (issue 85), or one shared pool
    @property
    def fresh(self) -> bool:
        return bool(self.summary.get("race_fresh"))

    @property
    def race_arms(self) -> list[str]:
        return ordered(self.summary["race_fresh"] if self.fresh else self.summary.get("race", {}))

    @property
    def fresh_missing(self) -> list[str]:
        """The race arms with no record yet on fresh pools, while others have one (a race still under way is
        committed arm by arm: an arm's file lands once all its tuning and reported seeds ran)."""
        if not self.fresh:
            return []
        return [arm for arm in RACE_ARMS if arm not in self.summary["race_fresh"]]

    @property
    def shared_arms(self) -> list[str]:
        return ordered(self.summary.get("race", {}))

    @property
    def common_rate(self) -> float:
        return float(self.summary["settings"].get("race_lr", 1.0))

    def own_rate(self, arm: str) -> float | None:
        return (self.summary.get("race_rates") or {}).get(arm)

    def race(self, arm: str, key: str = "auc", rate: str | float = "own") -> dict:
        """seed -> a race arm's ``key``: on fresh pools at its own rate (``"own"``, chosen on tuning seeds), the
        common one (``"common"``) or a given rate; the shared-pool race where no fresh one was run (or
        ``rate="shared"``)."""
        if rate == "shared" or not self.fresh:
            return {r["seed"]: r[key] for r in self.summary.get("race", {}).get(arm, [])}
        lr = self.own_rate(arm) if rate == "own" else self.common_rate if rate == "common" else float(rate)
        if lr is None:
            return {}
        return {r["seed"]: r[key] for r in self.summary["race_fresh"].get(arm, []) if float(r["lr"]) == float(lr)}

    def accuracy_verdicts(self, policy: str) -> list[tuple[str, str, list]]:
        have = self.arms
        out = []
        for label, pairs in AUDIT_CLAIMS["accuracy"]:
            if not all(a in have and b in have for a, b in pairs):
                continue
            ps = [(a, b, stats.paired(self.accuracy(a, policy=policy), self.accuracy(b, policy=policy)))
                  for a, b in pairs]
            out.append((label, stats.ordering_verdict([p for _, _, p in ps]), ps))
        return out

    def race_verdicts(self, rate: str = "own") -> list[tuple[str, str, list]]:
        have = self.race_arms if rate != "shared" else self.shared_arms
        out = []
        for label, pairs in AUDIT_CLAIMS["race"]:
            if not all(a in have and b in have for a, b in pairs):
                continue
            ps = [(a, b, stats.paired(self.race(a, rate=rate), self.race(b, rate=rate))) for a, b in pairs]
            out.append((label, stats.ordering_verdict([p for _, _, p in ps]), ps))
        return out

    def verdicts(self, part: str) -> list[tuple[str, str, list]]:
        """The race's verdicts at own rates (the accuracy's are per policy: :meth:`accuracy_verdicts`)."""
        return self.race_verdicts()


def load_audits() -> list[Audit]:
    """Every setting with a summary, and those the benchmark runs LM policies for with none yet (an empty one)."""
    out = []
    for s in AUDIT_SETTINGS:
        path = paths.RESULTS / f"credit_audit_{s}.json"
        if path.exists():  # the summary, and the per-seed records of its runs folder
            summary = read_json(path)
            out.append(Audit(s, {**summary, **per_seed(paths.RESULTS / Path(summary["records"]).name)}))
        elif s in AUDIT_TITLES:
            out.append(Audit(s, {"title": AUDIT_TITLES[s], "accuracy": {}, "race": {}, "rro": {}, "settings": {},
                                 "missing": True}))
    return out
