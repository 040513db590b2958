"""The documentation's results, generated from the committed records: nothing in them is typed by hand.

    python -m benchmarks.report           # write docs/results/*.md (+ img/) and the README's two tables
    python -m benchmarks.report --check   # exit 1, naming the files, when a committed file is not what it generates

Reads every learning check's summary (``benchmarks/results/<check>.json``) and its per-run records
(``<check>_runs/``; checks made before records existed keep their runs inside the summary) and writes:

- ``docs/results/<check>.md``, one page per check: settings, machine, per-arm results, paired differences,
  per-run values, figure, and the narrative (``benchmarks/narrative/<check>.md``, hand-written, rendered with
  Jinja so that every number in it is an expression over the records, e.g. ``{{ c.arm('gigpo').mean | f3 }}``);
- ``docs/results/credit-audit-<setting>.md`` from the credit audit's summaries, ``docs/results/lm-race-<setting>.md``
  from the LM race's records (``benchmarks/lm_race.py``; a page saying "not run yet" where there are none) and
  ``docs/results/audit-predicts-lm.md``, the prediction table (does the audit's order predict the LM's?);
- ``docs/results/index.md`` (the detailed results table, the claims table, how to read them) and
  ``docs/results/performance.md``;
- the README's results table (one row per claim, one column per level of evidence: the claims table) and its
  performance table, between ``<!-- results:begin -->`` / ``<!-- results:end -->`` and ``<!-- performance:begin -->``
  / ``<!-- performance:end -->``.

Learning checks are read twice: their held-out metric, and the area under each run's on-policy training success
curve (:func:`train_auc`), each with its paired differences and the claim's verdicts.

Arms are read from the records, so an arm being added (``<arm>_s<seed>.json`` landing one seed at a time) shows
up with the seeds it has ("3 of 5 seeds"), and its paired differences use the seeds both arms have. Statistics,
and the rule for "separated" and for the paper's ordering: ``benchmarks/stats.py``. Runs are paired only on the
same π_SFT: by the sha256 of its weights where the records carry it (``sft_sha256``), else by seed, and the
pages say "not recorded".
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

import jinja2


from benchmarks import stats
from creditflow.auditing.estimators import arms as audit_arms
from creditflow.auditing.race import race_arms as audit_race_arms

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
NARRATIVE = ROOT / "benchmarks" / "narrative"
DOCS = ROOT / "docs" / "results"
README = ROOT / "README.md"
MARKERS = {"results": ("<!-- results:begin -->", "<!-- results:end -->"),
           "performance": ("<!-- performance:begin -->", "<!-- performance:end -->"),
           "audit": ("<!-- audit:begin -->", "<!-- audit:end -->")}

NAMES = {"grpo": "GRPO", "gigpo": "GiGPO", "rewardflow": "RewardFlow", "rloo": "RLOO",
         "rewardflow_official": "RewardFlow (official preset)", "gigpo_official": "GiGPO (official preset)",
         "graphgpo": "GraphGPO", "graphgpo_reproduction": "GraphGPO (reproduction preset)", "g2po": "G2PO",
         "gagpo": "GAGPO",
         "grpo+expreplay": "GRPO + ExpReplay", "grpo+crps": "GRPO + CRPS", "rewardflow+crps": "RewardFlow + CRPS",
         "rising": "RRO + DPO", "fixed": "fixed-5 + DPO", "sft": "π_SFT", "rl": "RewardFlow (demo defaults)"}
CREDIT_CLAIM = [("rewardflow", "gigpo"), ("gigpo", "grpo"), ("rewardflow", "grpo")]
OFFICIAL_CLAIM = [("rewardflow_official", "gigpo_official"), ("gigpo_official", "grpo"), ("rewardflow_official", "grpo")]
# what the graph estimators' papers claim against the baselines they share with RewardFlow's (issues 72 and 84):
# GraphGPO (arXiv 2605.26684) over GiGPO and GRPO on Sokoban (its official preset; the reproduction preset's
# records of issue 72 are kept beside it), G2PO (arXiv 2606.22995) over GRPO, GAGPO (arXiv 2605.13217) over GiGPO
# and GRPO on ALFWorld and WebShop
GRAPH_CLAIMS = [("GraphGPO paper", [("graphgpo", "gigpo"), ("graphgpo", "grpo")]),
                ("GraphGPO paper, reproduction preset", [("graphgpo_reproduction", "gigpo"),
                                                         ("graphgpo_reproduction", "grpo")]),
                ("G2PO paper", [("g2po", "grpo")]),
                ("GAGPO paper", [("gagpo", "gigpo"), ("gagpo", "grpo")])]
CRPS_CLAIM = [("grpo+crps", "grpo+expreplay"), ("grpo+crps", "grpo")]
RRO_CLAIM = [("rising", "fixed"), ("rising", "sft")]
PAPER = {  # numbers the papers report, quoted beside ours (RRO paper, Table 1 and its text)
    "rro_samples_per_step_webshop": 1.86, "rro_samples_per_step_intercode_sql": 1.64, "fixed_samples_per_step": 5,
}
GOALS = {  # targets this project set itself (issues 12 and 35), quoted where a page says whether they are met
    "demo_gain": 0.10, "demo_minutes": 15, "rro_samples_ratio": 0.4,
}
CLAIMS = {  # the ordering each kind of check tests: (short, where it is stated)
    "credit": ("RewardFlow > GiGPO > GRPO", "the RewardFlow paper (Feng et al. 2026), Fig. 3 and its result tables"),
    "crps": ("+ CRPS > + ExpReplay, + CRPS > GRPO", "the CRPS paper, Table 1"),
    "rro": ("RRO > fixed-5, RRO > π_SFT", "the RRO paper (Wang et al. 2025), Table 1"),
    "demo": ("RL > π_SFT", "the demo's own goal, not a paper's claim"),
    "dpo": ("RRO + DPO > π_SFT", "the RRO paper, Table 1"),
}


# ------------------------------------------------------------------------------------------------------------
# formatting
# ------------------------------------------------------------------------------------------------------------


def f3(x, digits: int = 3) -> str:
    return "–" if x is None else f"{x:.{digits}f}".replace("-", "−")


def f2(x) -> str:
    return f3(x, 2)


def signed(x, digits: int = 3) -> str:
    return "–" if x is None else f"{x:+.{digits}f}".replace("-", "−")


def pct(x) -> str:
    """A share as a whole percentage: 0.853 -> 85%."""
    return "–" if x is None else f"{100 * x:.0f}%"


def span(values, fmt: str = "f3") -> str:
    """``lo-hi`` of ``values`` in the format of the filter named ``fmt`` (one value when they are all equal)."""
    form = {"f3": f3, "f2": f2, "pct": lambda v: f"{100 * v:.0f}", "signed": signed}[fmt]
    lo, hi = form(min(values)), form(max(values))
    joint = " to " if fmt == "signed" or lo.startswith("−") else "-"
    return (lo if lo == hi else f"{lo}{joint}{hi}") + ("%" if fmt == "pct" else "")


def separation(p: stats.Paired) -> str:
    """Whether a paired difference is separated from zero, with both intervals."""
    s = p.summary
    both = f"bootstrap {interval(s.boot, sign=True)}, t {interval(s.t, sign=True)}"
    if p.separated:
        return f"separated from zero ({both})"
    if p.n >= 2 and stats.excludes_zero(s.boot):
        return f"not separated from zero: the bootstrap interval excludes it, the t-interval holds it ({both})"
    return f"not separated from zero ({both})"


def reflow(lines: list[str]) -> list[str]:
    """Rendered narrative as Markdown paragraphs and list items, one line each (Jinja leaves lines broken where
    its tags were)."""
    out, block = [], []

    def flush():
        if block and block[0].lstrip().startswith(("|", "#", ">", "```", "![")):
            out.extend(block)
        elif block:
            items: list[str] = []
            for line in block:
                text = line.strip()
                if not items or re.match(r"^(- |\* |\d+\. )", text):
                    items.append(text)
                else:
                    items[-1] += " " + text
            out.extend(re.sub(r"(?<=\S)  +", " ", item) for item in items)
        block.clear()

    for line in lines:
        if line.strip():
            block.append(line)
        else:
            flush()
            out.append("")
    flush()
    return out


def interval(ci, digits: int = 3, sign: bool = False) -> str:
    if not ci:
        return "–"
    fmt = signed if sign else f3
    return f"[{fmt(ci[0], digits)}, {fmt(ci[1], digits)}]"


def name(arm: str) -> str:
    return NAMES.get(arm, arm)


def seeds_text(seeds) -> str:
    return ", ".join(str(s) for s in seeds)


def machine_text(m: dict | None) -> str:
    if not m:
        return "not recorded"
    parts = [f"{m.get('cpu', '?')} ({m.get('cores', '?')} cores)"]
    if m.get("gpu"):
        parts.append(str(m["gpu"]))
    if m.get("cpu_family_model"):
        parts.append(f"CPU family/model {m['cpu_family_model']}")
    if m.get("matmul_gflops"):
        parts.append(f"one large float32 matrix product at {m['matmul_gflops']:.0f} GFLOP/s")
    for key in ("torch", "numpy"):
        if m.get(key):
            parts.append(f"{key} {m[key]}")
    if m.get("date"):
        parts.append(str(m["date"]))
    return ", ".join(parts)


def table(header: list[str], rows: list[list[str]], align: str | None = None) -> list[str]:
    out = ["| " + " | ".join(header) + " |", "|" + "|".join(align or ["---"] * len(header)) + "|"]
    return out + ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]


# ------------------------------------------------------------------------------------------------------------
# runs and checks
# ------------------------------------------------------------------------------------------------------------


@dataclass
class Run:
    """One (arm, seed) run: its metric, its π_SFT's metric and identity, where it is recorded."""

    arm: str
    seed: int
    value: float
    sft_value: float | None
    sft_sha: str | None
    source: str
    extra: dict = field(default_factory=dict)


@dataclass
class Spec:
    """What a check is: its summary, the claim it tests, how its runs are read."""

    stem: str
    kind: str  # learning | rro | demo | dpo
    title: str
    setting: str  # the README row's setting, short
    claim: str  # PAPERS key
    claims: list  # (above, below) pairs the claim asserts
    extra_claims: list = field(default_factory=list)  # [(label, pairs)]: the same claim for other arms (presets)
    borrow: dict = field(default_factory=dict)  # arm -> records dir of another check (the same π_SFT)
    diagnostics_file: str | None = None  # per-run diagnostics for records older than their ``diagnostics``
    status: str = ""  # e.g. what superseded it


SPECS = [
    Spec("credit_learning", "learning", "GRPO vs GiGPO vs RewardFlow, demo levels, 12 steps",
         "Sokoban 6×6, 1 box (demo levels); 12 steps of 8 × 4", "credit", CREDIT_CLAIM),
    Spec("credit_learning_demo100", "learning", "GRPO vs GiGPO vs RewardFlow, demo levels, 100 steps",
         "Sokoban 6×6, 1 box; 100 steps of 4 × 8", "credit", CREDIT_CLAIM, extra_claims=GRAPH_CLAIMS),
    Spec("credit_learning_hard", "learning", "GRPO vs GiGPO vs RewardFlow, 2 boxes on 7×7",
         "Sokoban 7×7, 2 boxes; 100 steps of 8 × 4", "credit", CREDIT_CLAIM,
         extra_claims=[("official preset", OFFICIAL_CLAIM), *GRAPH_CLAIMS],
         diagnostics_file="credit_learning_hard_diagnostics.json"),
    Spec("credit_learning_hard_binary", "learning", "GRPO and GiGPO on binary success, 2 boxes on 7×7",
         "as the 2-box check, GRPO and GiGPO on success", "credit", CREDIT_CLAIM,
         borrow={"rewardflow": "credit_learning_hard_runs"}),
    Spec("credit_learning_hard_h100", "learning", "GRPO vs GiGPO vs RewardFlow, 2 boxes on 7×7 (H100 lease, partial)",
         "Sokoban 7×7, 2 boxes; 100 steps of 8 × 4 (9 of 15 runs)", "credit", CREDIT_CLAIM,
         status="superseded by [the complete 2-box check](credit-learning-hard.md): its π_SFT was not kept"),
    Spec("credit_learning_household", "learning", "GRPO vs GiGPO vs RewardFlow, household (TextWorld)",
         "TextWorld pick-and-place, medium; 100 steps of 8 × 4", "credit", CREDIT_CLAIM),
    Spec("crps_learning", "learning", "GRPO vs + ExpReplay vs + CRPS, demo levels, 12 steps",
         "Sokoban 6×6, 1 box; 12 steps of 8 × 4", "crps", CRPS_CLAIM),
    Spec("crps_learning_hard", "learning", "GRPO vs + ExpReplay vs + CRPS, 2 boxes on 7×7, binary success",
         "Sokoban 7×7, 2 boxes, success reward; 100 steps of 8 × 4", "crps", CRPS_CLAIM),
    Spec("rro_samples", "rro", "RRO vs fixed-size exploration, Sokoban",
         "Sokoban 6×6, 1 box; 32 tasks a collection", "rro", RRO_CLAIM),
    Spec("rro_samples_webshop", "rro", "RRO vs fixed-size exploration, WebShop",
         "WebShop (generated catalog); 420 tasks a collection, DPO lr 1e-4", "rro", RRO_CLAIM),
    Spec("rro_samples_webshop_first_sft", "rro", "RRO vs fixed-size exploration, WebShop, first π_SFT",
         "as the WebShop check, the first π_SFT (weights lost)", "rro", RRO_CLAIM,
         status="superseded by [the 5-seed WebShop check](rro-samples-webshop.md): its π_SFT's weights were lost"),
    Spec("rro_dpo_settings_webshop", "dpo", "RRO on WebShop: the DPO learning rate",
         "WebShop, the 5-seed check's RRO collections; DPO lr and pair filter", "dpo", [("lr 5e-5", "sft")],
         extra_claims=[("valid chosen pairs", [("lr 5e-5, valid chosen", "sft")])]),
    Spec("demo_seeds", "demo", "creditflow demo: RewardFlow from π_SFT, 5 seeds",
         "Sokoban 6×6, 1 box; `creditflow demo` defaults (100 steps of 8 × 8)", "demo", [("rl", "sft")]),
    Spec("demo_seeds_test", "demo", "creditflow demo on the test split: RewardFlow from π_SFT",
         "as the demo row; evaluated on 512 test levels, never used for a choice", "demo", [("rl", "sft")]),
]


def slug(stem: str) -> str:
    return stem.replace("_", "-")


def read_json(path: Path):
    return json.loads(path.read_text(encoding="utf-8"))


def rel(path: Path) -> str:
    """``path`` as the repository names it (records under ``RESULTS`` as ``benchmarks/results/...``)."""
    try:
        return "benchmarks/results/" + path.relative_to(RESULTS).as_posix()
    except ValueError:
        return path.relative_to(ROOT).as_posix()


def _arm_seed(stem: str) -> tuple[str, int]:
    arm, _, seed = stem.rpartition("_s")
    return arm, int(seed)


def learning_runs(stem: str, summary: dict, borrow: dict) -> list[Run]:
    """A learning check's runs: its ``_runs/`` records (every ``<arm>_s<seed>.json``), else the runs kept in its
    summary; plus borrowed arms from another check's records."""

    def run_of(arm, r, source, machine=None):
        return Run(arm, r["seed"], r["final_eval_success"], r.get("initial_eval_success"), r.get("sft_sha256"), source,
                   {**{k: r.get(k) for k in ("mean_train_success", "mean_all_zero_frac", "mean_entropy", "rl_minutes",
                                             "env_steps", "resumed_at_step", "diagnostics", "curves")},
                    "machine": machine})

    runs = []
    records = RESULTS / f"{stem}_runs"
    steps = summary["settings"]["steps"]
    if records.is_dir():
        for path in sorted(records.glob("*_s*.json")):
            arm, _ = _arm_seed(path.stem)
            stored = read_json(path)
            ran = ((stored.get("config") or {}).get("rl") or {}).get("steps", steps)
            if ran != steps:  # a run of another budget (a smoke run, another suite) must not join this check
                raise SystemExit(f"error: {rel(path)} ran {ran} RL steps, its check {stem} {steps}")
            runs.append(run_of(arm, stored["record"], rel(path), stored.get("machine")))
    else:  # an older summary that still holds its runs (today's keep an index of their records: learning.run_index)
        for arm, rs in summary["runs"].items():
            if rs and "record" in rs[0]:
                raise SystemExit(f"error: {rel(RESULTS / stem)}.json indexes its runs in {rel(records)}, "
                                 "which is missing")
            runs += [run_of(arm, r, f"{rel(RESULTS / stem)}.json") for r in rs]
    for arm, folder in borrow.items():
        for path in sorted((RESULTS / folder).glob(f"{arm}_s*.json")):
            stored = read_json(path)
            runs.append(run_of(arm, stored["record"], rel(path), stored.get("machine")))
    return runs


def rro_runs(stem: str, summary: dict) -> list[Run]:
    """An RRO check's runs: ``<stem>_runs/{rising,fixed}_s<seed>.json`` (key + value), else the summary's runs.
    Metric: the held-out score (WebShop's graded reward; on Sokoban it equals success)."""
    sft = summary["sft"]["score"]
    records = RESULTS / f"{stem}_runs"
    runs = []
    if records.is_dir():
        for path in sorted([*records.glob("rising_s*.json"), *records.glob("fixed_s*.json")]):
            stored = read_json(path)
            r = stored["value"]
            shop = RESULTS / f"{stem}_runs" / f"shopping_{path.stem}.json"
            runs.append(Run(r["method"], r["seed"], r["score"], sft, stored["key"].get("sft_sha256"), rel(path),
                            {**r, "machine": stored.get("machine"),
                             "shopping": read_json(shop)["value"] if shop.exists() else None}))
    else:
        sha = summary["settings"].get("sft_sha256")
        for r in summary["runs"]:
            runs.append(Run(r["method"], r["seed"], r["score"], sft, sha, f"{rel(RESULTS / stem)}.json", dict(r)))
    return runs


def demo_runs(summary: dict) -> list[Run]:
    """The demo's runs: one record per seed in each source folder; arm ``rl`` (after RL) beside its own π_SFT.
    A summary with a test split (``test_levels``) is read on the test split; its validation values go in extra."""
    test = bool(summary.get("test_levels"))
    runs = []
    for folder in summary["sources"]:
        for path in sorted((RESULTS / folder).glob("s*.json")):
            stored = read_json(path)
            r = stored["run"]
            value, sft = ((r["final_test_success"], r["sft_test_success"]) if test
                          else (r["final_success"], r["sft_success"]))
            runs.append(Run("rl", r["seed"], value, sft, None, rel(path),
                            {"minutes": r["minutes"], "curve": r["curve"], "machine": stored.get("machine"),
                             "load": r.get("load_average_before_after"), "validation": (r["sft_success"],
                                                                                       r["final_success"])}))
    return runs


@dataclass
class Check:
    spec: Spec
    summary: dict
    runs: list[Run]
    arms: list[str]
    expected_seeds: list[int]

    @property
    def slug(self) -> str:
        return slug(self.spec.stem)

    @property
    def page(self) -> str:
        return f"{self.slug}.md"

    def values(self, arm: str, metric: str = "held_out") -> dict:
        """seed -> the arm's value (π_SFT: the held-out value of that seed's π_SFT). ``metric``: ``held_out`` (the
        check's metric) or ``train_auc`` (:func:`train_auc`, which π_SFT has none of)."""
        if metric == "train_auc":
            return {r.seed: v for r in self.runs if r.arm == arm and (v := train_auc(r)) is not None}
        if arm == "sft":
            out = {}
            for r in self.runs:
                if r.sft_value is not None:
                    out.setdefault(r.seed, r.sft_value)
            return out
        return {r.seed: r.value for r in self.runs if r.arm == arm}

    def shas(self, arm: str) -> dict:
        if arm == "sft":
            return {}
        return {r.seed: r.sft_sha for r in self.runs if r.arm == arm}

    def arm(self, arm: str, metric: str = "held_out") -> stats.Summary:
        vals = self.values(arm, metric)
        return stats.summarize([vals[s] for s in sorted(vals)])

    def pair(self, a: str, b: str, metric: str = "held_out") -> stats.Paired:
        """a − b over the seeds both have, leaving out a seed whose two runs name different π_SFT weights."""
        va, vb = self.values(a, metric), self.values(b, metric)
        sa, sb = self.shas(a), self.shas(b)
        keep = [s for s in set(va) & set(vb) if not (sa.get(s) and sb.get(s) and sa[s] != sb[s])]
        return stats.paired({s: va[s] for s in keep}, {s: vb[s] for s in keep})

    def pair_extra(self, a: str, b: str, key: str) -> stats.Paired:
        """a − b seed by seed of another per-run number (``success_rate``, ``samples_per_step``, ...)."""
        return stats.paired({r.seed: r.extra[key] for r in self.runs if r.arm == a and r.extra.get(key) is not None},
                            {r.seed: r.extra[key] for r in self.runs if r.arm == b and r.extra.get(key) is not None})

    def mismatched_sft(self, a: str, b: str) -> list[int]:
        sa, sb = self.shas(a), self.shas(b)
        return sorted(s for s in set(sa) & set(sb) if sa[s] and sb[s] and sa[s] != sb[s])

    def seeds_of(self, arm: str) -> list[int]:
        return sorted(self.values(arm))

    def coverage(self, arm: str) -> str:
        """'' when the arm has every expected seed, else 'k of n seeds'."""
        have = len(self.seeds_of(arm))
        return "" if have >= len(self.expected_seeds) else f"{have} of {len(self.expected_seeds)} seeds"

    def sft_identity(self) -> str:
        shas = {r.sft_sha for r in self.runs}
        if shas == {None}:
            value = self.sft_value()
            return "not recorded" + (f" (every run's π_SFT scores {f3(value)} held-out)" if value is not None else "")
        known = sorted(s for s in shas if s)
        missing = sum(r.sft_sha is None for r in self.runs)
        text = ", ".join(f"`{s[:12]}`" for s in known)
        text = f"sha256 {text}" if len(known) == 1 else f"{len(known)} different weights: {text}"
        return text + (f" ({missing} runs not recorded)" if missing else "")

    def sft_value(self) -> float | None:
        vals = sorted(set(self.values("sft").values()))
        return vals[0] if len(vals) == 1 else None

    def claim_pairs(self, pairs) -> list[tuple[str, str]]:
        """The claimed pairs whose arms both have runs (π_SFT counts as present)."""
        have = set(self.arms) | {"sft"}
        return [(a, b) for a, b in pairs if a in have and b in have]

    @property
    def train_curves(self) -> bool:
        """Whether the check's runs recorded their on-policy training success (learning checks do)."""
        return any(train_auc(r) is not None for r in self.runs)

    def verdicts(self, metric: str = "held_out") -> list[tuple[str, str, list]]:
        """(label, verdict, [(a, b, Paired)]) for the claim, and for each extra claim whose arms exist; on the
        training curve (``metric="train_auc"``) the pairs against π_SFT, which has none, are left out."""
        out = []
        for label, pairs in [("", self.spec.claims), *self.spec.extra_claims]:
            present = self.claim_pairs(pairs)
            if label and len(present) < len(pairs):
                continue
            if metric == "train_auc":
                pairs = [pair for pair in pairs if "sft" not in pair]
                present = [pair for pair in present if "sft" not in pair]
                if not pairs:
                    continue
            ps = [(a, b, self.pair(a, b, metric)) for a, b in present]
            verdict = stats.ordering_verdict([p for _, _, p in ps]) if len(present) == len(pairs) else "not tested"
            out.append((label, verdict, ps))
        return out

    def diag(self, arm: str, key: str) -> stats.Summary:
        """Per-run means of a diagnostics key (``credit/...``, ``train/...``) over the arm's runs that carry it."""
        vals = []
        for r in self.runs:
            if r.arm == arm:
                v = (r.extra.get("diagnostics") or {}).get(key)
                if v is not None:
                    vals.append(v)
        return stats.summarize(vals)

    def extra_of(self, arm: str, key: str) -> stats.Summary:
        vals = [r.extra.get(key) for r in self.runs if r.arm == arm]
        return stats.summarize([v for v in vals if v is not None])

    def curve_at(self, arm: str, key: str, step: int) -> stats.Summary:
        """An arm's curve (``eval/success_rate``, ...) at ``step`` over the runs that have that point."""
        vals = []
        for r in self.runs:
            if r.arm == arm:
                vals += [v for s, v in (r.extra.get("curves") or {}).get(key, []) if s == step]
        return stats.summarize(vals)

    @property
    def eval_episodes(self) -> int | None:
        """Held-out episodes of each evaluation (levels, games or goals)."""
        st = self.summary.get("settings", {})
        value = st.get("eval_episodes") or _override(st.get("overrides", []), "rl.eval_episodes") or \
            self.summary.get("eval_levels")
        return int(value) if value is not None else None

    def shop(self, arm: str, key: str) -> list[float]:
        """A WebShop behaviour metric (``bought``, ``invalid_frac``, ...) of the arm's runs (their shopping records)."""
        return [r.extra["shopping"][key] for r in self.runs if r.arm == arm and r.extra.get("shopping")]

    def extras(self, key: str, arms=None) -> list[float]:
        """A per-run scalar (``mean_all_zero_frac``, ...) over the runs of ``arms`` (default: all)."""
        return [r.extra[key] for r in self.runs if (arms is None or r.arm in arms) and r.extra.get(key) is not None]

    def diags(self, key: str, arms=None) -> list[float]:
        """A diagnostics mean over the runs of ``arms`` (default: all) that carry it."""
        return [r.extra["diagnostics"][key] for r in self.runs
                if (arms is None or r.arm in arms) and (r.extra.get("diagnostics") or {}).get(key) is not None]


def train_auc(run: Run) -> float | None:
    """The area under a run's on-policy training success curve: the mean of ``train/success_rate`` (the share of
    the step's B × G sampled rollouts that succeed) over every RL step 1..T as recorded, unweighted, with no
    smoothing or rolling window; None for a run that recorded no such curve. It equals the record's
    ``mean_train_success``."""
    points = [v for step, v in (run.extra.get("curves") or {}).get("train/success_rate", []) if step >= 1]
    return sum(points) / len(points) if points else None


def load_check(spec: Spec) -> Check:
    summary = read_json(RESULTS / f"{spec.stem}.json")
    if spec.kind == "learning":
        runs = learning_runs(spec.stem, summary, spec.borrow)
        if spec.diagnostics_file:
            old = read_json(RESULTS / spec.diagnostics_file)["runs"]
            for r in runs:
                if not r.extra.get("diagnostics") and f"{r.arm}_s{r.seed}" in old:
                    r.extra["diagnostics"] = {k: v for k, v in old[f"{r.arm}_s{r.seed}"].items() if k != "steps"}
        order = list(summary["summary"]) + list(spec.borrow)
        seeds = summary["settings"]["seeds"]
    elif spec.kind == "rro":
        runs = rro_runs(spec.stem, summary)
        order, seeds = ["rising", "fixed"], summary["settings"]["seeds"]
    elif spec.kind == "demo":
        runs = demo_runs(summary)
        order, seeds = ["rl"], [r["seed"] for r in summary["runs"]]
    else:
        runs, order, seeds = dpo_runs(summary), list(DPO_ARMS), [0, 1, 2, 3, 4]
    arms = [a for a in order if any(r.arm == a for r in runs)]
    known = list(NAMES)  # arms with records but not yet in the summary, in NAMES' order
    arms += sorted({r.arm for r in runs} - set(arms), key=lambda a: (known.index(a) if a in known else len(known), a))
    seeds = sorted(set(seeds) | {r.seed for r in runs})
    return Check(spec, summary, runs, arms, seeds)


# ------------------------------------------------------------------------------------------------------------
# the DPO learning-rate check: rro_dpo_settings' rows (every stored rro_samples run), paired by collection
# ------------------------------------------------------------------------------------------------------------

# arm -> (DPO lr, NLL weight, pair filter): the paper's-rule rising collections under each DPO setting
DPO_ARMS = {"lr 1e-4": (1e-4, 0.0, "all"), "lr 5e-5": (5e-5, 0.0, "all"),
            "lr 5e-5, valid chosen": (5e-5, 0.0, "valid chosen"), "lr 2e-5": (2e-5, 0.0, "all"),
            "lr 3e-6": (3e-6, 0.0, "all"), "RPO lr 5e-5": (5e-5, 1.0, "all")}


def dpo_runs(summary: dict) -> list[Run]:
    """One run per (DPO setting, rising collection under the paper's rule): the CPU run where there is one,
    else the GPU's (their lr 1e-4 runs agree to three decimals); seed = the collection's seed."""
    runs = {}
    for row in summary["rows"]:
        coll, rule = row["collection"], row["invalid_action_reward"]
        if not coll.startswith("rising") or rule != "MC estimate":
            continue
        for arm, (lr, w, pairs) in DPO_ARMS.items():
            if (row["dpo_lr"], row["sft_weight"], row["dpo_pairs"]) == (lr, w, pairs):
                seed = int(coll.split("s")[-1])
                if (arm, seed) not in runs or runs[(arm, seed)].extra["device"] != "cpu":
                    runs[(arm, seed)] = Run(arm, seed, row["score"], row["sft_score"], row["sft_sha256"],
                                            f"benchmarks/results/{row['records']}/", dict(row))
    return sorted(runs.values(), key=lambda r: (list(DPO_ARMS).index(r.arm), r.seed))


# ------------------------------------------------------------------------------------------------------------
# the demo's variants: every demo_seeds.py record, paired by seed with the defaults
# ------------------------------------------------------------------------------------------------------------

DEMO_VARIANTS = {  # summary stem -> what it ran, besides the RL steps (read off each record's curve)
    "demo_seeds": "the defaults (RewardFlow on success, 8 × 8, lr 2e-4, 1 mini-batch)",
    "demo_seeds_test": "the defaults rerun 2026-12-01/02 with a test split (their validation gain; [test split](demo-seeds-test.md))",
    "demo_seeds_bf16": "the defaults under `policy.autocast=bf16`",
    "demo_seeds_rf60": "the defaults of 2026-11-25 to 11-28 (the same but the step count)",
    "demo_seeds_shared": "the same as the line above, rerun with `policy.share_prefix` (2026-11-26)",
    "demo_seeds_1128": "the same, seed 0 once more (2026-11-28)",
    "demo_seeds_grpo": ("the defaults until 2026-11-25: GRPO, 16 × 4, lr 4e-4, 2 mini-batches, population std "
                        "(`rl.credit.ddof=0`, GRPO's default until issue 74)"),
    "demo_sft1ep": "the 2026-11-28 defaults from a π_SFT of one SFT epoch (`sft.epochs=1`)",
    "demo_conv_compact": "the 2026-11-26 defaults in the `conversation` history with the `compact` template",
    "demo_compact": "the 2026-11-25 defaults with the `compact` template (window history)",
    "demo_rf60": "RewardFlow 16 × 4, lr 2e-4, 1 mini-batch",
    "demo_rf30_lr4e4": "the 2026-11-26 defaults at lr 4e-4",
}


@dataclass
class DemoVariant:
    stem: str
    what: str
    runs: dict  # seed -> run dict (sft_success, final_success, minutes, curve)

    @property
    def steps(self) -> str:
        return "/".join(str(s) for s in sorted({r["curve"][-1][0] for r in self.runs.values()}))

    def gains(self) -> dict:
        return {s: r["final_success"] - r["sft_success"] for s, r in self.runs.items()}


def demo_variants() -> list[DemoVariant]:
    out = []
    for stem, what in DEMO_VARIANTS.items():
        summary = read_json(RESULTS / f"{stem}.json")
        runs = {}
        for folder in summary.get("sources", [f"{stem}_runs"]):
            for path in sorted((RESULTS / folder).glob("s*.json")):
                r = read_json(path)["run"]
                runs[r["seed"]] = r
        out.append(DemoVariant(stem, what, runs))
    return out


def demo_sections() -> list[str]:
    variants = demo_variants()
    base = variants[0]
    rows = []
    for v in variants:
        g = stats.summarize([v.gains()[s] for s in sorted(v.runs)])
        same = [s for s in v.runs if s in base.runs and v.runs[s]["sft_success"] == base.runs[s]["sft_success"]]
        minutes = [r["minutes"] for r in v.runs.values()]
        rows.append([f"`{v.stem}`", v.what, v.steps, seeds_text(sorted(v.runs)),
                     ", ".join(f3(v.runs[s]["sft_success"]) for s in sorted(v.runs)),
                     ", ".join(f3(v.runs[s]["final_success"]) for s in sorted(v.runs)),
                     signed(g.mean), interval(g.boot, sign=True), interval(g.t, sign=True) if g.n <= stats.SMALL_N
                     else "–", f"{min(minutes):.1f}" + (f"-{max(minutes):.1f}" if max(minutes) > min(minutes) else ""),
                     "–" if v is base else f"{len(same)} of {len(v.runs)}"])
    lines = ["## Variants", "",
             "Every `benchmarks/demo_seeds.py` record: gain = held-out success after RL − π_SFT's, seed by seed, "
             "on the 512-level evaluation; minutes: the whole `creditflow demo` command. \"same π_SFT\": seeds whose "
             "π_SFT scores exactly what the defaults' π_SFT of that seed scores (identity not recorded).", "",
             *table(["record", "what ran", "RL steps", "seeds", "π_SFT", "after RL", "mean gain", "95% bootstrap",
                     "95% t", "minutes", "same π_SFT"], rows), "",
             "Differences of the gain, seed by seed (each run against its own π_SFT, so a variant with its own "
             "π_SFT compares fairly):", ""]
    rows = []
    by_stem = {v.stem: v for v in variants}
    comparisons = [(v, base) for v in variants[1:]] + [(by_stem["demo_seeds_rf60"], by_stem["demo_seeds_grpo"])]
    for a, b in comparisons:
        p = stats.paired(a.gains(), b.gains())
        if p.n == 0:
            continue
        rows.append([f"`{a.stem}` − `{b.stem}`", seeds_text(p.seeds), ", ".join(signed(d) for d in p.diffs),
                     signed(p.summary.mean), interval(p.summary.boot, sign=True),
                     interval(p.summary.t, sign=True) if p.n <= stats.SMALL_N else "–",
                     {1: "yes, above", -1: "yes, below", 0: "no"}[p.separated]])
    lines += table(["a − b (gain)", "seeds", "per seed", "mean", "95% bootstrap", "95% t", "separated"], rows)
    demo = read_json(RESULTS / "demo_machine.json")
    steps = sorted(demo["held_out_greedy_success"], key=int)
    lines += ["", "## One demo run, as `creditflow demo` reports it", "",
              f"`benchmarks/results/demo_machine.json` (recorded by `benchmarks/demo_record.py`): seed 0 with the "
              f"defaults, held-out greedy evaluation on {demo['eval_episodes']} levels every 10 steps; "
              f"{demo['wall_minutes']:g} minutes wall time in all on {machine_text(demo['machine'])}. "
              "`eval/noop_frac`: the share of held-out greedy steps that change nothing (a walk into a wall).", "",
              *table(["held-out, greedy", "π_SFT", *steps[1:]],
                     [["success rate", *[f3(demo["held_out_greedy_success"][k]) for k in steps]],
                      ["`eval/noop_frac`", *[f3(demo["held_out_noop_frac"][k]) for k in steps]]])]
    return lines


def split_gains(check: Check) -> tuple[dict, dict, stats.Paired]:
    """A demo check with a test split: gain per seed on validation and on test, and test − validation."""
    runs = [r for r in check.runs if r.arm == "rl"]
    val = {r.seed: r.extra["validation"][1] - r.extra["validation"][0] for r in runs}
    test = {r.seed: r.value - r.sft_value for r in runs}
    return val, test, stats.paired(test, val)


def demo_test_section(check: Check) -> list[str]:
    """Validation and test gains of the same runs, seed by seed, and their paired difference (test − validation)."""
    runs = sorted((r for r in check.runs if r.arm == "rl"), key=lambda r: r.seed)
    val, test, p = split_gains(check)
    rows = []
    for label, gains, sft, after in (
            ("validation", val, [r.extra["validation"][0] for r in runs], [r.extra["validation"][1] for r in runs]),
            ("test", test, [r.sft_value for r in runs], [r.value for r in runs])):
        g = stats.summarize([gains[r.seed] for r in runs])
        rows.append([label, ", ".join(f3(v) for v in sft), ", ".join(f3(v) for v in after),
                     ", ".join(signed(gains[r.seed]) for r in runs), signed(g.mean), interval(g.boot, sign=True),
                     interval(g.t, sign=True) if g.n <= stats.SMALL_N else "–"])
    rows.append(["test − validation", "–", "–", ", ".join(signed(d) for d in p.diffs), signed(p.summary.mean),
                 interval(p.summary.boot, sign=True), interval(p.summary.t, sign=True) if p.n <= stats.SMALL_N else "–"])
    return ["## Validation and test", "",
            f"The same runs, seeds {seeds_text([r.seed for r in runs])}: gain = success after RL − π_SFT's, on "
            f"{check.summary['eval_levels']} validation levels and {check.summary['test_levels']} test levels.", "",
            *table(["split", "π_SFT", "after RL", "gain per seed", "mean gain", "95% bootstrap", "95% t"], rows)]


def dpo_all_runs(summary: dict) -> list[str]:
    """Every stored WebShop ``rro_samples`` run, one table per (collection rule, collection), π_SFT first."""
    groups: dict = {}
    for row in summary["rows"]:
        groups.setdefault((row["invalid_action_reward"], row["collection"]), []).append(row)
    lines = ["## Every stored run, by collection", "",
             "All the runs `benchmarks/rro_dpo_settings.py` lines up (`rro_dpo_settings_webshop.json`), the "
             "collections of other rules and of fixed-5 included. Invalid candidates' process reward: the paper's MC "
             "estimate, or a fixed value (`rro.invalid_action_reward`). NLL weight: `rro.dpo.sft_weight` (RPO when "
             "above 0). DPO chosen / rejected: β·log π_θ/π_ref over DPO's last epoch.", ""]
    for (rule, coll), rows in groups.items():
        sft = rows[0]
        body = [["π_SFT", "–", "–", "–", "–", f3(sft["sft_score"]), f3(sft["sft_success"]), f2(sft["sft_bought"]),
                 f2(sft["sft_invalid"]), "–", "–"]]
        body += [["π_DPO", f"{r['dpo_lr']:g}", f"{r['sft_weight']:g}", r["dpo_pairs"], r["device"], f3(r["score"]),
                  f3(r["success"]), f2(r["bought"]), f2(r["invalid"]), signed(r["chosen"]), signed(r["rejected"])]
                 for r in rows]
        lines += [f"### {coll}, invalid candidates' process reward: {rule} ({sft['pairs']} pairs)", "",
                  *table(["policy", "DPO lr", "NLL weight", "pairs used", "device", "score", "success", "bought",
                          "invalid", "DPO chosen", "DPO rejected"], body), ""]
    return lines


# ------------------------------------------------------------------------------------------------------------
# page sections
# ------------------------------------------------------------------------------------------------------------


def arm_cell(s: stats.Summary) -> str:
    """mean [bootstrap] and, with n <= 5, the t-interval beside it."""
    if s.mean is None:
        return "–"
    if s.n < 2:
        return f"{f3(s.mean)} (one seed)"
    return f"{f3(s.mean)} {interval(s.boot)}" + (f", t {interval(s.t)}" if s.n <= stats.SMALL_N else "")


def diff_label(a: str, b: str) -> str:
    """``a − b`` in arm names, parenthesised where a name holds a '+' or a comma."""
    def part(arm):
        text = name(arm)
        return f"({text})" if " + " in text or ", " in text else text
    return f"{part(a)} − {part(b)}"


def pair_word(p: stats.Paired) -> str:
    if p.n < 2:
        return "not tested"
    if p.separated > 0:
        return "yes"
    if p.separated < 0:
        return "reversed"
    return "in means only" if p.summary.mean > 0 else "no"


def metric_text(check: Check) -> str:
    s, kind = check.summary, check.spec.kind
    if kind == "learning":
        unit = "games" if "household" in check.spec.stem else "levels"
        return f"held-out success, greedy, {check.eval_episodes} {unit}"
    if kind == "rro":
        episodes = s["settings"]["eval_episodes"]
        what = "score (WebShop reward)" if "webshop" in check.spec.stem else "success"
        return f"held-out {what}, greedy, {episodes} tasks"
    if kind == "dpo":
        return "held-out score (WebShop reward), greedy, 200 goals"
    if s.get("test_levels"):
        return f"test-split success, greedy, {s['test_levels']} levels"
    return f"held-out success, greedy, {s['eval_levels']} levels"


def _override(overrides: list[str], key: str):
    vals = [o.split("=", 1)[1] for o in overrides if o.startswith(f"{key}=")]
    return vals[-1] if vals else None


def overrides_text(summary: dict) -> str:
    return f"overrides `{' '.join(summary['overrides'])}`" if summary["overrides"] else "no overrides"


def settings_lines(check: Check) -> list[str]:
    s, kind = check.summary, check.spec.kind
    if kind == "learning":
        st = s["settings"]
        env = st.get("env") or [o for o in st["overrides"] if o.startswith("env.")]
        env = env if isinstance(env, str) else " ".join(env)
        lines = [f"- Setting `{st.get('setting', 'demo')}`: {env}.",
                 f"- {st['steps']} RL steps of {st['B']} tasks × {st['G']} rollouts"
                 + (f", {st['minibatches']} mini-batches a step" if st.get("minibatches") else "")
                 + (f", lr {st['lr']:g}" if st.get("lr") else "")
                 + (f", KL coefficient {st['kl_coef']:g}" if st.get("kl_coef") is not None else "")
                 + (f", loss aggregation {st['loss_agg']}" if st.get("loss_agg") else "")
                 + (f", reward source {st['reward_source']}" if st.get("reward_source") else "") + "."]
        lines.append(f"- Every run's overrides: `{' '.join(st['overrides'])}`.")
        lines.append(f"- π_SFT: `{st['model']}` (the path the runs were given).")
    elif kind == "rro":
        st = s["settings"]
        lines = [f"- Env: {st['env']}; {st['tasks']} training tasks per collection, N = N_max = {st['candidates']} "
                 f"candidates, m = {st['mc_rollouts']} MC rollouts, temperature {st['temperature']:g}.",
                 f"- DPO: lr {st['dpo_lr']:g}, batch {st['dpo_batch']}, {st['dpo_epochs']:g} epochs, β 0.1.",
                 f"- π_SFT: `{st['model']}`; held-out evaluation on {st['eval_episodes']} tasks, greedy (π_SFT is "
                 "evaluated once)."]
    elif kind == "dpo":
        lines = ["- Every stored `rro_samples` WebShop run (`benchmarks/rro_dpo_settings.py` lines them up by "
                 "collection): each DPO setting trains on the same collections, the rising (RRO) collections of the "
                 "5-seed WebShop check, made under the paper's rule (an invalid candidate gets its MC estimate).",
                 "- A collection's seed pairs the settings: differences are taken collection by collection.",
                 "- Where a setting ran on both the CPU and a GPU, the CPU run is used (their lr 1e-4 runs agree to "
                 "three decimals)."]
    elif s.get("test_levels"):
        lines = [f"- `creditflow demo` with its defaults, one run per seed, each building its own π_SFT (seeded); "
                 f"{overrides_text(s)}; at step 0 (π_SFT) and at the end, greedy evaluation on "
                 f"{s['eval_levels']} validation levels (`env.eval_seed_offset`, the split every choice of the demo's "
                 f"defaults was made on) and on {s['test_levels']} test levels (`env.test_seed_offset`, used for "
                 "nothing but this report; [evaluation splits](../environments.md#evaluation-splits)).",
                 "- The table below reads the test split; the validation split is beside it in "
                 "[Validation and test](#validation-and-test)."]
    else:
        lines = [f"- `creditflow demo` with its defaults, one run per seed, each building its own π_SFT (seeded); "
                 f"{overrides_text(s)}; held-out evaluation on {s['eval_levels']} levels at step 0 "
                 "(π_SFT) and at the end."]
    return lines


def _range(values: list[float], fmt: str) -> str:
    lo, hi = format(min(values), fmt), format(max(values), fmt)
    return lo if lo == hi else f"{lo}-{hi}"


def run_machines_lines(check: Check) -> list[str]:
    """The per-run records' machine blocks (learning checks since issue 87), grouped by machine, threads and what
    shared it, with the ranges of what varies from run to run; runs without one counted."""
    if check.spec.kind != "learning":
        return []
    groups: dict[tuple, list] = {}
    missing = 0
    for r in check.runs:
        m = r.extra.get("machine")
        if not m:
            missing += 1
            continue
        key = (machine_text({k: m.get(k) for k in ("cpu", "cores", "gpu", "cpu_family_model", "torch", "numpy")}),
               m.get("torch_threads"), m.get("shared"))
        groups.setdefault(key, []).append((r, m))
    lines = []
    for (where, threads, shared), runs in groups.items():
        ms = [m for _, m in runs]
        rates = [m["matmul_gflops"] for m in ms if m.get("matmul_gflops")]
        loads = [x for m in ms for x in (m.get("load_average_start") or [])[:1] + (m.get("load_average_end") or [])[:1]]
        dates = sorted({m["date"] for m in ms if m.get("date")})
        parts = [where, f"{threads} torch thread{'s' if threads != 1 else ''}" if threads else None,
                 f"one large float32 matrix product at {_range(rates, '.0f')} GFLOP/s" if rates else None,
                 f"load average {_range(loads, 'g')} at the runs' starts and ends" if loads else None,
                 f"{dates[0]}" + (f" to {dates[-1]}" if len(dates) > 1 else "") if dates else None,
                 f"shared with: {shared}" if shared else "what shared it not said"]
        names = ", ".join(f"{name(r.arm)} s{r.seed}" for r, _ in runs)
        lines.append(f"- Machine per run: {'; '.join(x for x in parts if x)} ({names}).")
    if missing:
        lines.append(f"- Machine per run: not recorded for {missing} runs (made before run records kept it)."
                     if lines else f"- Machine per run: not recorded ({missing} runs, made before run records kept "
                     "their machine).")
    return lines


def records_line(check: Check) -> str:
    folders = sorted({r.source.rsplit("/", 1)[0] + "/" if r.source.endswith(".json") and "_runs/" in r.source
                      else r.source for r in check.runs})
    return ("- Records: " + ", ".join(f"`{f}`" for f in folders) + f" ({len(check.runs)} runs); summary "
            f"`benchmarks/results/{check.spec.stem}.json`.")


def results_section(check: Check, metric: str = "held_out") -> list[str]:
    rows = []
    for arm in [*check.arms, "sft"]:
        s = check.arm(arm, metric)
        if s.mean is None:
            continue
        per_seed = ", ".join(f3(v) for v in s.values)
        if arm == "sft" and check.sft_value() is not None:  # one π_SFT, evaluated once (greedy): no spread
            rows.append([name(arm), "every run", f3(s.mean), "–", "–", "–", "the same in every run"])
            continue
        rows.append([name(arm), f"{s.n}" + (f" of {len(check.expected_seeds)}" if check.coverage(arm) else ""),
                     f3(s.mean), f3(s.sd), interval(s.boot), interval(s.t) if s.n <= stats.SMALL_N else "–",
                     per_seed])
    what = metric_text(check) if metric == "held_out" else TRAIN_AUC_METRIC
    return [f"Metric: {what}. Seeds in seed order.", "",
            *table(["arm", "seeds", "mean", "sd (ddof 1)", "95% bootstrap", "95% t", "per seed"], rows)]


def paired_section(check: Check, metric: str = "held_out") -> list[str]:
    claimed = {(a, b) for _, pairs in [("", check.spec.claims), *check.spec.extra_claims] for a, b in pairs}
    comparisons = []
    for i, a in enumerate(check.arms):
        for b in check.arms[i + 1:]:  # a claimed pair as claimed, else the later arm minus the earlier
            comparisons.append((a, b) if (a, b) in claimed else (b, a))
    if metric == "held_out":  # π_SFT has a held-out value, no training curve
        comparisons += [(a, "sft") for a in check.arms]
    rows = []
    for a, b in comparisons:
        p = check.pair(a, b, metric)
        if p.n == 0:
            continue
        s = p.summary
        rows.append([diff_label(a, b), p.n, signed(s.mean), interval(s.boot, sign=True),
                     interval(s.t, sign=True) if p.n <= stats.SMALL_N else "–", f"{p.wins} of {p.n}",
                     {1: "yes, above", -1: "yes, below", 0: "no"}[p.separated],
                     "claimed: above" if (a, b) in claimed else ""])
        bad = check.mismatched_sft(a, b)
        if bad:
            rows[-1][0] += f" (seeds {seeds_text(bad)} left out: different π_SFT)"
    return ["Differences a − b taken seed by seed (same π_SFT, same seed), mean over the paired seeds.", "",
            *table(["a − b", "seeds", "mean", "95% bootstrap", "95% t", "a above b on", "separated", "claim"], rows)]


def verdict_lines(check: Check, metric: str = "held_out") -> list[str]:
    out = []
    for label, verdict, ps in check.verdicts(metric):
        detail = "; ".join(f"{name(a)} > {name(b)}: {pair_word(p)} ({p.n} seeds)" for a, b, p in ps)
        out.append(f"- {'' if not label else label + ': '}**{verdict}** ({detail})")
    return out


TRAIN_AUC_METRIC = ("area under the on-policy training success curve: the mean over RL steps 1..T of "
                    "`train/success_rate`, the share of the step's B × G sampled training rollouts (T = 1) that "
                    "succeed, every step as recorded, unweighted, no smoothing or rolling window")
CURRICULUM_ARMS = ("grpo+crps", "grpo+expreplay", "rewardflow+crps")


def training_tasks_text(check: Check) -> str:
    """What a learning check's training tasks are: a finite set of games that repeat, or fresh procedural levels."""
    st = check.summary.get("settings", {})
    env = st.get("env") or []
    games = _override(env if isinstance(env, list) else [], "env.kwargs.num_games")
    if games:
        return f"one of the env's {games} training games each, which repeat through the run"
    return "fresh levels from the training seeds (below 10⁶), a level seen before only by chance"


def curve_comparable(check: Check) -> bool:
    """False where a curriculum arm's training rollouts include replay groups: they start from stored states near a
    success, so that arm's training success is not the fresh-task success of the other arms."""
    return not any(a in CURRICULUM_ARMS for a in check.arms)


def training_curve_section(check: Check) -> list[str]:
    """The training-curve counterpart of Results and Paired differences, with its own verdicts."""
    lines = ["On-policy training success, step by step, from the same runs: how often each arm's own sampled "
             f"rollouts (T = 1) succeed on the tasks each step draws ({training_tasks_text(check)}), over the whole "
             "run, where held-out success is one greedy evaluation at its end. The curve is in every run record "
             "(`curves`); its area is the record's `mean_train_success`.", ""]
    if not curve_comparable(check):
        lines += ["**Not a like-for-like measure here**: the curriculum arms' training rollouts include replay groups "
                  "that start from stored states near a success (CRPS, ExpReplay), which the other arms do not "
                  "have, so their training success is higher by construction. Their numbers are shown; their "
                  "differences from the other arms do not rank the credit.", ""]
    lines += ["Reproduced on the training curve (the claim's pairs, π_SFT aside):", "",
              *(verdict_lines(check, "train_auc") or ["- not tested"]), "",
              *results_section(check, "train_auc"), "", *paired_section(check, "train_auc")]
    return lines


def per_run_section(check: Check) -> list[str]:
    kind = check.spec.kind
    rows = []
    if kind == "learning":
        header = ["arm", "seed", "π_SFT", "after RL", "gain", "train success (curve area)", "all-fail groups", "RL min",
                  "resumed at step", "π_SFT sha256"]
        for r in sorted(check.runs, key=lambda r: (check.arms.index(r.arm), r.seed)):
            e = r.extra
            rows.append([name(r.arm), r.seed, f3(r.sft_value), f3(r.value),
                         signed(r.value - r.sft_value) if r.sft_value is not None else "–",
                         f3(e.get("mean_train_success")), f3(e.get("mean_all_zero_frac")),
                         f"{e['rl_minutes']:.1f}" if e.get("rl_minutes") is not None else "–",
                         e.get("resumed_at_step") or "–", (r.sft_sha or "not recorded")[:12]])
    elif kind == "rro":
        header = ["arm", "seed", "samples / step", "pairs", "MC rollouts", "DPO chosen", "DPO rejected", "success",
                  "score", "π_SFT sha256"]
        for r in sorted(check.runs, key=lambda r: (r.seed, check.arms.index(r.arm))):
            e = r.extra
            rows.append([name(r.arm), r.seed, f2(e["samples_per_step"]), e["pairs"], e["rollouts"],
                         signed(e.get("dpo_chosen_reward")), signed(e.get("dpo_rejected_reward")),
                         f3(e["success_rate"]), f3(r.value), (r.sft_sha or "not recorded")[:12]])
    elif kind == "dpo":
        header = ["setting", "collection", "pairs", "device", "score", "success", "bought", "invalid", "DPO chosen",
                  "DPO rejected", "records"]
        for r in check.runs:
            e = r.extra
            rows.append([r.arm, f"rising s{r.seed}", e["pairs"], e["device"], f3(r.value), f3(e["success"]),
                         f2(e["bought"]), f2(e["invalid"]), signed(e["chosen"]), signed(e["rejected"]),
                         f"`{e['records']}`"])
    else:
        header = ["seed", "π_SFT", "after RL", "gain", "minutes", "machine", "record"]
        for r in sorted(check.runs, key=lambda r: r.seed):
            rows.append([r.seed, f3(r.sft_value), f3(r.value), signed(r.value - r.sft_value),
                         f"{r.extra['minutes']:.1f}", machine_text(r.extra.get("machine")), f"`{r.source}`"])
    return table(header, rows)


def figure_lines(check: Check) -> tuple[list[str], dict]:
    png = RESULTS / f"{check.spec.stem}.png"
    if check.spec.kind == "demo" and not check.summary.get("test_levels"):
        png = RESULTS / "demo_learning_curve.png"
    if not png.exists():
        return [], {}
    target = f"img/{png.name}"
    return [f"![{check.spec.title}]({target})", "",
            f"Figure: `{rel(png)}`, written by the check's script (mean over seeds, ± the std over seeds as a band, "
            "ddof 0)."], {target: png.read_bytes()}


def render_narrative(stem: str, context: dict) -> list[str]:
    path = NARRATIVE / f"{stem}.md"
    if not path.exists():
        return []
    env = jinja2.Environment(undefined=jinja2.StrictUndefined, keep_trailing_newline=False, autoescape=False,
                             trim_blocks=True, lstrip_blocks=True)
    env.filters.update(f3=f3, f2=f2, signed=signed, pct=pct, span=span, interval=interval, name=name,
                       separation=separation)
    env.tests["startswith"] = lambda value, prefix: str(value).startswith(prefix)
    text = env.from_string(path.read_text(encoding="utf-8")).render(zip=zip, **context).strip()
    return reflow(text.splitlines())


def page(check: Check, context: dict) -> tuple[str, dict]:
    spec = check.spec
    fig, files = figure_lines(check)
    m = check.summary.get("machine")
    lines = [f"# {spec.title}", "",
             f"<!-- generated by benchmarks/report.py from benchmarks/results/{spec.stem}.json and its records; "
             f"the text comes from benchmarks/narrative/{spec.stem}.md -->", ""]
    if spec.status:
        lines += [f"Status: {spec.status}.", ""]
    short, source = CLAIMS[spec.claim]
    lines += [f"Claim tested: {short} ({source}). Reproduced:", "", *verdict_lines(check), ""]
    if check.train_curves:
        caveat = "" if curve_comparable(check) else "; not like for like here, the curriculum arms replay near a success"
        lines += [f"On the training curve ([area under on-policy training success](#training-curve){caveat}):", "",
                  *(verdict_lines(check, "train_auc") or ["- not tested"]), ""]
    lines += ["## Setting", "", *settings_lines(check),
              f"- π_SFT identity: {check.sft_identity()}.",
              f"- Machine (summary): {machine_text(m)}." if m else "- Machine: per run, below.",
              *run_machines_lines(check), records_line(check), "",
              "## Results", "", *results_section(check), "",
              "## Paired differences", "", *paired_section(check), ""]
    if check.train_curves:
        lines += ["## Training curve", "", *training_curve_section(check), ""]
    lines += ["## Per run", "", *per_run_section(check), ""]
    if spec.kind == "demo" and check.summary.get("test_levels"):
        lines += [*demo_test_section(check), ""]
    elif spec.kind == "demo":
        lines += [*demo_sections(), ""]
    if spec.kind == "dpo":
        lines += [*dpo_all_runs(check.summary), ""]
    if fig:
        lines += ["## Curves", "", *fig, ""]
    narrative = render_narrative(spec.stem, {**context, "c": check})
    if narrative:
        lines += ["## What it shows", "", *narrative, ""]
    if check.summary.get("note"):
        lines += ["## Run notes", "", "From the summary's `note`:", "", f"> {check.summary['note']}", ""]
    lines += ["Statistics: [how to read these numbers](index.md#how-to-read-the-numbers)."]
    return "\n".join(lines) + "\n", files


# ------------------------------------------------------------------------------------------------------------
# the credit audit (issue 71): benchmarks/credit_audit.py's summaries credit_audit_<setting>.json
# ------------------------------------------------------------------------------------------------------------

AUDIT_SETTINGS = ["sokoban6", "sokoban7", "sokoban7_1box", "household", "webshop", "sql"]  # table order
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
        return _ordered(self.summary["accuracy"][self.measured_policies[0]][0]["accuracy"]["arms"])

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
        return _ordered(self.summary["race_fresh"] if self.fresh else self.summary.get("race", {}))

    @property
    def shared_arms(self) -> list[str]:
        return _ordered(self.summary.get("race", {}))

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


def _ordered(arms) -> list[str]:
    known = list(NAMES)
    return sorted(arms, key=lambda a: (known.index(a) if a in known else len(known), a))


def load_audits() -> list[Audit]:
    """Every setting with a summary, and those the benchmark runs LM policies for with none yet (an empty one)."""
    out = []
    for s in AUDIT_SETTINGS:
        path = RESULTS / f"credit_audit_{s}.json"
        if path.exists():
            out.append(Audit(s, read_json(path)))
        elif s in AUDIT_TITLES:
            out.append(Audit(s, {"title": AUDIT_TITLES[s], "accuracy": {}, "race": {}, "rro": {}, "settings": {},
                                 "missing": True}))
    return out


def _summary_cell(values: dict) -> str:
    return arm_cell(stats.summarize([values[k] for k in sorted(values)]))


def _diff_cell(p: stats.Paired) -> str:
    return f"{signed(p.summary.mean)} {interval(p.summary.boot, sign=True)}" if p.n >= 2 else "–"


def _verdicts_detail(verdicts) -> str:
    texts = []
    for label, verdict, ps in verdicts:
        detail = "; ".join(f"{diff_label(x, y)} {_diff_cell(p)} ({p.wins} of {p.n} seeds above)" for x, y, p in ps)
        texts.append((f"{label}: " if label else "") + f"**{verdict}** ({detail})")
    return "; ".join(texts) or "not tested"


def not_resolved_text(a: Audit, policy: str) -> str:
    n = len(a.summary["accuracy"][policy])
    return (f"**not resolved** ({a.resolved(policy)} steps with |A^π| > 2 SE over {n} seeds, fewer than "
            f"{RESOLVED_MIN}): it ranks nothing")


def audit_verdict_text(a: Audit, part: str, policy: str | None = None, rate: str = "own") -> str:
    """The generated verdict of one cell: accuracy under ``policy`` ("not resolved" where too few steps resolve), or
    the race at ``rate``."""
    if part == "accuracy":
        if not a.is_resolved(policy):
            return not_resolved_text(a, policy)
        return _verdicts_detail(a.accuracy_verdicts(policy))
    return _verdicts_detail(a.race_verdicts(rate))


def race_rate_text(a: Audit) -> str:
    rates = a.summary.get("race_rates") or {}
    if not rates:
        return "no rate chosen yet (no tuning record)"
    return ", ".join(f"{name(arm)} {rates[arm]:g}" for arm in _ordered(rates))


def audit_settings_lines(a: Audit) -> list[str]:
    s, st = a.summary, a.summary["settings"]
    opts = ", ".join(f"{k}={v}" for k, v in s["options"].items()) or "defaults"
    lines = [f"- Env `{s['env']}` ({opts}); parts run: {', '.join(s['parts'])}; the reward is success (1 at the end "
             "of a successful episode, 0 elsewhere).",
             "- Behaviour policies: " + ("; ".join(f"{policy_text(p)} (`{p}`)" for p in a.policies) or "none yet")
             + (f"; no record yet: {', '.join(AUDIT_KINDS[k] for k in a.missing_kinds)}" if a.missing_kinds else "")
             + ".",
             *([f"- Free-text states (no admissible actions) choose among a menu kept per state: "
                f"{s['menu']['size']} actions sampled from `{s['menu']['model']}` (sha256 {s['menu']['sha256'][:12]}…, "
                f"{', '.join(s['menu']['overrides']) or 'its own settings'}) plus the expert's "
                "(`creditflow audit --model`)" + (f"; that model is not committed: `{s['menu']['build']}` rebuilds it"
                                                   if s["menu"].get("build") else "") + "."] if s.get("menu") else []),
             f"- Coverage{' and accuracy' if a.measured else ''}: {st['seeds']} seeds × {st['tasks']} tasks × "
             f"{st['group_size']} rollouts" + (f"; A^π of every step from {st['m']} + {st['m']} Monte-Carlo "
                                                "continuations of the restored state" if a.measured else "")
             + (f" (M = {s['fair_m']} for the policies other than the ε-expert)" if s.get("fair_m") else "") + "."]
    for label, run in (s.get("lm_runs") or {}).items():
        seeds = s["accuracy"].get(label, [])
        secs = sum(x["seconds"] for x in seeds)
        audited = sum(x["accuracy"].get("audited", x["accuracy"]["steps"]) for x in seeds if "accuracy" in x)
        steps = sum(x["accuracy"]["steps"] for x in seeds if "accuracy" in x)
        lines.append(f"- The LM policy (`{label}`): `{run.get('model')}` ({', '.join(run.get('overrides') or [])}"
                     f"{'; env ' + ', '.join(f'{k}={v}' for k, v in (run.get('options') or {}).items()) if run.get('options') else ''}"
                     f"), every action sampled from it; a random {run.get('subsample')} steps per seed audited with "
                     f"M = {run.get('m')}: {audited} of {steps} steps over {len(seeds)} seeds, "
                     f"{secs / 3600:.2f} CPU-hours of wall time (one thread a process).")
    if s.get("bias"):
        first = next(iter(s["bias"].values()))[0]
        lines.append(f"- Bias apart from noise: {first['rounds']} groups of every task per seed, the same tasks as "
                     "accuracy; A^π per distinct (task, state, step, action).")
    if a.fresh:
        grid = ", ".join(f"{x:g}" for x in st.get("race_lrs", ()))
        lines.append(f"- Race: a fresh pool of {st['race_pool']} tasks per seed (seed s: env seeds {st['race_offset']} + "
                     f"{st['race_pool']}s + j), {st['race_seeds']} seeds per arm and rate; {st['race_groups']} tasks × "
                     f"{st['group_size']} rollouts an iteration, {st['race_episodes']} training episodes, PPO-clip "
                     f"(NumPy, {st['race_epochs']} epochs, clip 0.2) on a tabular softmax keyed by (task, state); "
                     f"every arm at every rate of {grid}; its own rate the best mean AUC on "
                     f"{st.get('race_tune_seeds')} tuning seeds (pools below {st['race_offset']}, disjoint from the "
                     f"reported ones): {race_rate_text(a)}; the common rate {a.common_rate:g}.")
    if s.get("race"):
        lines.append("- Earlier race (before issue 85, kept): 50 seeds per arm on one pool of 8 tasks shared by every "
                     "seed (env seeds 100000-100007), lr 1 for every arm, rows keyed by state_key alone.")
    if s["rro"]:
        lines.append(f"- RRO pairs: at every state of one rollout per task, N = N_max = {st['rro_candidates']}, "
                     f"process rewards from m = {st['rro_m']} continuations, each pair judged by {st['rro_truth_m']} "
                     "more per action.")
    lines += [f"- Machine: {machine_text(s.get('machine'))}." + (f" {s['note']}" if s.get("note") else ""),
              f"- Records: `{s['records']}`; summary `benchmarks/results/credit_audit_{a.setting}.json` "
              "(`benchmarks/credit_audit.py`)."]
    return lines


def audit_missing_page(a: Audit) -> str:
    return "\n".join([f"# Credit audit: {a.title}", "",
                      "<!-- generated by benchmarks/report.py: this setting has no record yet -->", "",
                      "No record yet. The benchmark runs it: `python -m benchmarks.credit_audit --setting "
                      f"{a.setting}` (its LM policy needs the setting's π_SFT; docs/audit.md says how to build it).",
                      ""]) + "\n"


def audit_page(a: Audit) -> str:
    """A credit audit's results page: the verdicts per behaviour policy, the setting, then one section per part."""
    if a.summary.get("missing"):
        return audit_missing_page(a)
    s = a.summary
    lines = [f"# Credit audit: {s['title']}", "",
             f"<!-- generated by benchmarks/report.py from benchmarks/results/credit_audit_{a.setting}.json -->", "",
             "What the estimators' credit is worth against the true advantage A^π of a fixed behaviour policy, and how "
             "fast each trains a tabular policy with no LM in the way ([the audit](../audit.md)). Every verdict names "
             "its behaviour policy; none is pooled over policies.", ""]
    if a.measured or a.missing_kinds:
        lines += [f"Claim tested: {CLAIMS['credit'][0]} ({CLAIMS['credit'][1]}), as closeness to A^π (Spearman per "
                  "step, seed by seed), under each behaviour policy:", ""]
        noted = set()
        for p in a.measured_policies:
            kind = policy_kind(p)
            note = "" if kind in noted else f" ({KIND_NOTES[kind]})"
            noted.add(kind)
            lines.append(f"- {policy_text(p)}{note}: " + audit_verdict_text(a, "accuracy", p) + ".")
        for k in a.missing_kinds:
            lines.append(f"- {AUDIT_KINDS[k]} ({KIND_NOTES[k]}): no record yet.")
        lines.append("")
    if a.fresh:
        lines += ["Race (area under the greedy success curve, a fresh pool per seed), each arm at its own learning rate "
                  "(chosen on tuning seeds): " + audit_verdict_text(a, "race") + ".", "",
                  f"The same at the common rate {a.common_rate:g}: " + audit_verdict_text(a, "race", rate="common")
                  + ".", ""]
    elif "race" in s["parts"]:
        lines += ["Race on fresh pools with tuned rates: no record yet.", ""]
    if s.get("race"):
        lines += ["Earlier race (one pool shared by every seed, lr 1 for every arm): "
                  + audit_verdict_text(a, "race", rate="shared") + ".", ""]
    lines += ["## Setting", "", *audit_settings_lines(a), ""]
    if any("coverage" in (s["accuracy"][p] or [{}])[0] for p in a.policies):
        lines += _audit_coverage(a)
    if a.measured:
        lines += _audit_accuracy(a)
    if s.get("bias"):
        lines += _audit_bias(a)
    if a.fresh:
        lines += _audit_race(a)
    elif "race" in s.get("parts", ()):  # the cells that link here say "no record yet"; so does the page
        lines += ["## Learning race", "", "No record yet of the race on a fresh pool per seed with each arm's rate "
                  "tuned on other seeds (issue 85); `benchmarks/credit_audit.py --parts race` runs it. The earlier "
                  "race, one pool shared by every seed at lr 1, is below.", ""]
    if s.get("race"):
        lines += _audit_shared_race(a)
    if s["rro"]:
        lines += _audit_rro(a)
    lines += ["Statistics: [how to read these numbers](index.md#how-to-read-the-numbers)."]
    return "\n".join(lines) + "\n"


def _audit_coverage(a: Audit) -> list[str]:
    """The coverage section: how much of each policy's batches a state-keyed estimator can use."""
    from creditflow.auditing.coverage import reading
    from creditflow.auditing.run import pooled_coverage

    s = a.summary
    lines = ["## Coverage", ""]
    rows = []
    labels = [p for p in a.policies if "coverage" in (s["accuracy"][p] or [{}])[0]]
    for label in labels:
        seeds = s["accuracy"][label]
        cov = [x["coverage"] for x in seeds]
        rows.append([policy_text(label), _summary_cell({x["seed"]: x["success"] for x in seeds}),
                     _summary_cell({x["seed"]: c["shared"] for x, c in zip(seeds, cov)}),
                     _summary_cell({x["seed"]: c["mixed_groups"] for x, c in zip(seeds, cov)}),
                     _summary_cell({x["seed"]: c["path_to_success"] for x, c in zip(seeds, cov)}),
                     "; ".join(f"{name(n)} {f3(sum(c['at_trajectory_level'][n] for c in cov) / len(cov))}"
                               for n in _ordered(cov[0]["at_trajectory_level"]))])
    lines += table(["policy", "success", "steps sharing a state", "mixed groups", "steps with a path to success",
                    "steps at the trajectory-level value (mean)"], rows) + [""]
    for label in labels:  # the reading `creditflow audit` prints, from the same pooled coverage
        lines.append(f"- Reading ({policy_text(label)}): {reading(pooled_coverage(s['accuracy'][label]))}")
    snaps = [p for p in labels if policy_kind(p) == "tabular"]
    for label in snaps:
        info = [x["policy"] for x in s["accuracy"][label] if isinstance(x.get("policy"), dict)]
        if info:
            lines.append(f"- {policy_text(label)}: frozen after {sum(i['episodes'] for i in info) / len(info):.0f} "
                         f"training episodes on average, at probe success "
                         f"{_summary_cell({k: i['probe_success'] for k, i in enumerate(info)})}; the target reached in "
                         f"{sum(bool(i['reached']) for i in info)} of {len(info)} seeds.")
    lines.append("")
    return lines


def _claimed_pairs(arms: list[str]) -> list[tuple[str, str]]:
    out = []
    for _, pairs in AUDIT_CLAIMS["accuracy"]:
        out += [p for p in pairs if p[0] in arms and p[1] in arms and p not in out]
    return out


def _audit_accuracy(a: Audit) -> list[str]:
    """The accuracy section: each arm's credit against A^π per policy, and the claimed pairs per policy."""
    s = a.summary
    lines = ["## Advantage accuracy", "",
             "Mean over seeds [95% bootstrap]. Sign agreement and AUC count steps whose |A^π| exceeds 2 standard "
             "errors; \"within\" compares steps of one group that share a state. A policy with fewer than "
             f"{RESOLVED_MIN} such steps over its seeds is not resolved: its table is shown, its verdict ranks nothing.",
             ""]
    for label in a.measured_policies:
        seeds = s["accuracy"][label]
        steps = sum(x["accuracy"]["steps"] for x in seeds)
        audited = sum(x["accuracy"].get("audited", x["accuracy"]["steps"]) for x in seeds)
        res = a.resolved(label)
        lines += [f"### {policy_text(label)}", "",
                  f"{len(seeds)} seeds, {steps} steps" + (f" ({audited} audited, a random subsample)" if audited < steps
                                                          else "") + f", {res} with |A^π| > 2 SE"
                  + ("" if a.is_resolved(label) else ": **not resolved**") + ".", ""]
        rows = [[name(arm)] + [_summary_cell(a.accuracy(arm, m, label)) for m in AUDIT_METRICS] for arm in a.arms]
        lines += table(["arm", *AUDIT_METRICS.values()], rows) + [""]
    pairs = _claimed_pairs(a.arms)
    if pairs:
        lines += ["### The claimed pairs, per policy", "",
                  "Spearman a − b seed by seed [95% bootstrap]; sep. = separated from zero; n.r. = the policy is not "
                  "resolved.", ""]
        rows = []
        for x, y in pairs:
            row = [diff_label(x, y)]
            for label in a.measured_policies:
                p = stats.paired(a.accuracy(x, policy=label), a.accuracy(y, policy=label))
                row.append(_diff_cell(p) + (" sep." if p.separated else "") + ("" if a.is_resolved(label) else " n.r."))
            rows.append(row)
        lines += table(["a − b", *[policy_text(p) for p in a.measured_policies]], rows) + [""]
    return lines


def _audit_bias(a: Audit) -> list[str]:
    """Bias apart from noise: mean credit per (task, state, action) against A^π, and the across-group noise."""
    s = a.summary
    lines = ["## Bias apart from noise", "",
             "Per (task, state, action) seen in two groups or more of the same tasks: Pearson and Spearman of the "
             "arm's mean credit with A^π (bias: is the credit, on average, an increasing function of A^π?) and the "
             "noise share, the across-group variance of its credit over that variance plus the spread of the means "
             "(0: every group gives a pair the same credit). Spearman per step (the accuracy section) mixes the two.",
             ""]
    for label, seeds in s["bias"].items():
        if not seeds:
            continue
        lines += [f"### {policy_text(label)}", "",
                  f"{len(seeds)} seeds × {seeds[0]['rounds']} groups of each task; {sum(x['triples'] for x in seeds)} "
                  f"(task, state, action) seen in two groups or more, {sum(x['resolved'] for x in seeds)} with |A^π| > "
                  "2 SE.", ""]
        arms = _ordered(seeds[0]["arms"])
        val = lambda arm, k: {x["seed"]: x["arms"][arm][k] for x in seeds if x["arms"][arm][k] == x["arms"][arm][k]}  # noqa: E731
        rows = [[name(arm), _summary_cell(val(arm, "pearson")), _summary_cell(val(arm, "spearman")),
                 _summary_cell(val(arm, "noise_share")),
                 _summary_cell(a.accuracy(arm, "spearman", label)) if a.has_accuracy(label) else "–"] for arm in arms]
        lines += table(["arm", "Pearson of E[credit] with A^π", "Spearman of E[credit] with A^π", "noise share",
                        "Spearman per step (accuracy)"], rows) + [""]
    return lines


def _race_table(a: Audit, rate: str) -> list[str]:
    rows = []
    for arm in a.race_arms:
        runs = a.race(arm, "auc", rate)
        reached = sorted(v for v in a.race(arm, "episodes_to_half", rate).values() if v is not None)
        med = reached[len(reached) // 2] if reached else None
        lr = a.own_rate(arm) if rate == "own" else a.common_rate if rate == "common" else None
        rows.append([name(arm), "–" if lr is None else f"{lr:g}", len(runs), _summary_cell(runs),
                     _summary_cell(a.race(arm, "final", rate)), f"{len(reached)} of {len(runs)}",
                     "–" if med is None else str(med)])
    return table(["arm", "lr", "seeds", "AUC", "final success", "reached 50%", "episodes to 50% (median of those)"],
                 rows) + [""]


def _race_pairs(a: Audit, rate: str) -> list[str]:
    """The paired AUC differences: every pair of the earlier race (as its pages had them), the claimed pairs at the
    fair race's rates."""
    rows = []
    claimed = {p for _, pairs in AUDIT_CLAIMS["race"] for p in pairs}
    have = a.race_arms if rate != "shared" else a.shared_arms
    for i, x in enumerate(have):
        for y in have[i + 1:]:
            if rate != "shared" and (x, y) not in claimed and (y, x) not in claimed:
                continue
            px, py = (x, y) if (x, y) in claimed or (y, x) not in claimed else (y, x)
            p = stats.paired(a.race(px, rate=rate), a.race(py, rate=rate))
            rows.append([diff_label(px, py), p.n, _diff_cell(p), f"{p.wins} of {p.n}",
                         {1: "yes, above", -1: "yes, below", 0: "no"}[p.separated],
                         "claimed: above" if (px, py) in claimed else ""])
    return table(["a − b (AUC)", "seeds", "mean [95% bootstrap]", "a above b on", "separated", "claim"], rows) + [""]


def _audit_race(a: Audit) -> list[str]:
    """The fair race: each arm at its own rate and at the common one, its AUC at every rate of the grid."""
    st = a.summary["settings"]
    lines = ["## Learning race", "",
             "Greedy success on each seed's own pool; AUC = mean of the curve after its start. Each arm's own rate is "
             "the best mean AUC on the tuning seeds; the reported seeds never entered that choice.", "",
             "### At each arm's own rate", "", *_race_table(a, "own"), *_race_pairs(a, "own"),
             f"### At the common rate {a.common_rate:g}", "", *_race_table(a, "common"), *_race_pairs(a, "common"),
             "### Every rate of the grid", "",
             "Mean AUC over the reported seeds, and over the tuning seeds in brackets (which picked the rate, *).", ""]
    grid = list(dict.fromkeys([*st.get("race_lrs", ()), st.get("race_lr", 1.0)]))
    rows = []
    for arm in a.race_arms:
        tune = {}
        for r in a.summary.get("race_tuning", {}).get(arm, []):
            tune.setdefault(float(r["lr"]), []).append(r["auc"])
        row = [name(arm)]
        for lr in grid:
            rep = list(a.race(arm, rate=lr).values())
            t = tune.get(float(lr))
            row.append((f3(sum(rep) / len(rep)) if rep else "–") + (f" ({f3(sum(t) / len(t))})" if t else "")
                       + (" *" if a.own_rate(arm) == float(lr) else ""))
        rows.append(row)
    lines += table(["arm", *[f"lr {x:g}" for x in grid]], rows) + [""]
    return lines


def _audit_shared_race(a: Audit) -> list[str]:
    s = a.summary
    lines = ["## Earlier race: one pool shared by every seed", "",
             "The race of the records before issue 85, kept as it ran: every seed trained and was scored on the same "
             "8 tasks, every arm at lr 1, table rows keyed by state_key alone (household's keys name no game, so two "
             "pool games could share logits). Greedy success on the pool; AUC = mean of the curve after its start.", ""]
    rows = []
    for arm in a.shared_arms:
        runs = s["race"][arm]
        reached = sorted(r["episodes_to_half"] for r in runs if r["episodes_to_half"] is not None)
        med = reached[len(reached) // 2] if reached else None
        rows.append([name(arm), len(runs), _summary_cell(a.race(arm, rate="shared")),
                     _summary_cell(a.race(arm, "final", "shared")), f"{len(reached)} of {len(runs)}",
                     "–" if med is None else str(med)])
    lines += table(["arm", "seeds", "AUC", "final success", "reached 50%", "episodes to 50% (median of those)"],
                   rows) + [""]
    lines += _race_pairs(a, "shared")
    return lines


def _audit_rro(a: Audit) -> list[str]:
    """RRO's pairs against Q^π, per policy and sampler."""
    s = a.summary
    lines = ["## RRO's pairs against Q^π", "",
              "Accuracy: the share of resolved pairs (chosen and rejected differ, their Q^π by more than 2 standard "
              "errors) whose chosen action has the higher Q^π; correct pairs per sampled candidate.", ""]
    rows = []
    for label, seeds in s["rro"].items():
        for smp in ("rising", "fixed"):
            val = lambda k: {x["seed"]: x[smp][k] for x in seeds if x[smp][k] == x[smp][k]}  # noqa: E731
            rows.append([label, "RRO (rising)" if smp == "rising" else "fixed-5", _summary_cell(val("accuracy")),
                         _summary_cell(val("samples_per_step")), _summary_cell(val("correct_per_sample")),
                         sum(x[smp]["pairs"] for x in seeds), sum(x[smp]["resolved"] for x in seeds)])
        for k in ("accuracy", "correct_per_sample"):
            p = stats.paired({x["seed"]: x["rising"][k] for x in seeds if x["rising"][k] == x["rising"][k]},
                             {x["seed"]: x["fixed"][k] for x in seeds if x["fixed"][k] == x["fixed"][k]})
            rows.append([label, f"rising − fixed, {k.replace('_', ' ')}", _diff_cell(p) +
                         (" (separated)" if p.separated else ""), "", "", "", ""])
    lines += table(["policy", "sampler", "pair accuracy", "samples / step", "correct pairs / sample", "pairs",
                    "resolved"], rows) + [""]
    return lines


def _short_verdict(a: Audit, verdicts) -> str:
    return "; ".join((f"{label}: " if label else "") + v for label, v, _ in verdicts) or "not tested"


def audit_rows(audits: list[Audit], link_prefix: str) -> list[list[str]]:
    """The detailed results table's audit rows: one per (setting, behaviour policy), and the race."""
    rows = []
    for a in audits:
        link = f"{link_prefix}{a.page}"
        for p in a.measured_policies:
            arms = "; ".join(f"{name(x)} {_summary_cell(a.accuracy(x, policy=p))}" for x in a.arms)
            verdict = (_short_verdict(a, a.accuracy_verdicts(p)) if a.is_resolved(p) else
                       f"not resolved ({a.resolved(p)} resolved steps)")
            rows.append([f"[Credit audit: {a.title}, accuracy]({link})", f"{a.title}; behaviour policy {policy_text(p)}",
                         arms, "Spearman of the credit with Monte-Carlo A^π per step", "– (no LM)" if policy_kind(p) !=
                         "lm" else "the LM is the behaviour policy", CLAIMS["credit"][0] + " (closer to A^π)", verdict])
        for k in a.missing_kinds:
            rows.append([f"[Credit audit: {a.title}, accuracy]({link})", f"{a.title}; behaviour policy {AUDIT_KINDS[k]}",
                         "no record yet", "Spearman of the credit with Monte-Carlo A^π per step", "–",
                         CLAIMS["credit"][0] + " (closer to A^π)", "no record yet"])
        if a.fresh or a.summary.get("race"):
            rate = "own" if a.fresh else "shared"
            arms = "; ".join(f"{name(x)} {_summary_cell(a.race(x, rate=rate))}" for x in a.race_arms)
            what = ("a fresh pool per seed, each arm at its own rate (" + race_rate_text(a) + ")" if a.fresh else
                    "one pool shared by every seed, lr 1 (before issue 85)")
            rows.append([f"[Credit audit: {a.title}, race]({link}#learning-race)",
                         f"{a.title}; tabular softmax from zero, {a.summary['settings']['race_episodes']} episodes, "
                         + what, arms, "area under the greedy success curve on the task pool",
                         "– (no LM: a tabular policy)", CLAIMS["credit"][0] + "; " + CLAIMS["crps"][0],
                         _short_verdict(a, a.race_verdicts(rate))])
    return rows


def audit_speed_rows() -> tuple[list[list[str]], list[str]]:
    path = RESULTS / "credit_audit_speed.json"
    if not path.exists():
        return [], []
    sp = read_json(path)
    ca, race = sp["coverage_accuracy"], sp["race"]
    load = sp.get("load_average_before_after")
    where = machine_text({**sp["machine"], "date": sp["machine"]["date"][:10]}) + (
        f"; {sp['threads']} thread; load average {load[0]:.1f}-{load[1]:.1f} "
        f"({'shared' if max(load) > int(sp['threads'] or 1) + 0.5 else 'its own thread alone'})" if load else
        "; summed per-seed wall times of the setting's own run (shared machine)" if sp.get("source") else "")
    return [[f"credit audit, coverage + accuracy, Sokoban 6×6 ({ca['seeds']} seeds × {len(ca['policies'])} policies, "
             f"M = {ca['m']})", f"{ca['seconds']:.0f} s", f"{ca['limit_seconds']} s: the issue's limit",
             f"{ca['seconds'] / ca['limit_seconds']:.2f}× of it", where, "`credit_audit_speed.json`"],
            [f"credit audit, race of {race['seeds']} seeds × {len(race['arms'])} arms, Sokoban 6×6 "
             f"({race['episodes']} episodes a run)", f"{race['seconds']:.0f} s", f"{race['limit_seconds']} s: the issue's limit",
             f"{race['seconds'] / race['limit_seconds']:.2f}× of it", where, "`credit_audit_speed.json`"]], \
        ["credit_audit_speed.json"]


# ------------------------------------------------------------------------------------------------------------
# the LM race (issue 87): benchmarks/lm_race.py's records lm_race_<setting>_runs/ and summaries
# ------------------------------------------------------------------------------------------------------------

# the race settings the pages are written for, records or not: the demo's levels and the harder setting the pilot
# chooses (``benchmarks/lm_race.py --measure``; "sokoban7" is its first candidate: name the chosen one here)
LM_RACES = {"demo": "Sokoban 6×6, 1 box (the demo's levels)", "sokoban7": "Sokoban 7×7, 1 box"}
LM_RACE_ARMS = ("grpo", "gigpo", "rewardflow", "graphgpo")  # lm_race.DEFAULT_METHODS
LM_RACE_CLAIMS = [("", CREDIT_CLAIM), *GRAPH_CLAIMS]
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
        return _ordered({r.arm for r in self.runs})

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
            out.append((label, stats.ordering_verdict([p for _, _, p in ps]), ps))
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


def _race_runs(stem: str, threshold: float | None) -> list[Run]:
    runs = [race_run(_arm_seed(path.stem)[0], read_json(path), rel(path), threshold)
            for path in sorted((RESULTS / f"{stem}_runs").glob("*_s*.json"))]
    budgets = {(r.extra["steps"], r.extra["pool"]) for r in runs}
    if len(budgets) > 1:  # runs of another budget (a smoke run, a changed setting) must not join one race
        raise SystemExit(f"error: {rel(RESULTS / stem)}_runs/ mixes budgets (RL steps, pool): {sorted(budgets)}")
    return runs


def load_lm_races() -> list[LMRace]:
    """Every race setting of :data:`LM_RACES`, and any other with a summary: its records, its pilot's."""
    found = {p.stem.removeprefix("lm_race_") for p in RESULTS.glob("lm_race_*.json")
             if not p.stem.endswith(("_pilot", "_smoke")) and not p.stem.startswith("lm_race_pools_")}
    races = []
    for setting in [*LM_RACES, *sorted(found - set(LM_RACES))]:
        path = RESULTS / f"lm_race_{setting}.json"
        summary = read_json(path) if path.exists() else None
        threshold = (summary or {}).get("settings", {}).get("threshold")
        pilot_path = RESULTS / f"lm_race_{setting}_pilot.json"
        pilot_threshold = read_json(pilot_path)["settings"]["threshold"] if pilot_path.exists() else None
        title = (summary or {}).get("settings", {}).get("title") or LM_RACES.get(setting, setting)
        races.append(LMRace(setting, title, summary, _race_runs(f"lm_race_{setting}", threshold),
                            _race_runs(f"lm_race_{setting}_pilot", pilot_threshold)))
    return races


def pool_measurements(setting: str) -> list[dict]:
    """``lm_race.py --measure`` records of a setting (π_SFT on the pools of tuning seeds), oldest π_SFT first."""
    return [read_json(p) for p in sorted(RESULTS.glob(f"lm_race_pools_{setting}_*.json"))
            if not p.stem.endswith("_smoke")]


def lm_race_page(race: LMRace) -> str:
    lines = [f"# LM race: {race.title}", "",
             f"<!-- generated by benchmarks/report.py from benchmarks/results/lm_race_{race.setting}_runs/ -->", "",
             "The credit audit's [tabular race](../audit.md) with the LM in the tabular policy's place "
             "(`benchmarks/lm_race.py`): π_SFT, then RL on a fixed pool of tasks drawn per seed, the greedy policy "
             "playing the pool every few steps; the curve's area, its final value and the first step at a threshold, "
             "scored as the tabular race scores its own. Arms are paired by seed: the same pool, task sequence and "
             "π_SFT.", ""]
    if not race.runs:
        lines += ["**Not run yet**: no record in "
                  f"`benchmarks/results/lm_race_{race.setting}_runs/`. The commands, the pilot first: "
                  "[Benchmarks](../benchmarks.md#rerunning-a-learning-check).", ""]
    else:
        lines += [f"Claim tested: {CLAIMS['credit'][0]}, and the graph estimators' papers' claims where their arms ran.",
                  "", "On the pool (area under the greedy pool success curve):", "",
                  *_race_verdict_lines(race, "auc"), "",
                  "On new levels (the test split, greedy, after RL; the same runs):", "",
                  *_race_verdict_lines(race, "test_final"), "",
                  "## Setting", "", *_race_setting_lines(race), "",
                  "## Results", "", *_race_results(race), "",
                  "## Paired differences", "", *_race_paired(race), "",
                  "## Per run", "", *_race_per_run(race.runs, race.arms), ""]
    lines += _race_pilot_lines(race)
    lines += ["Statistics: [how to read these numbers](index.md#how-to-read-the-numbers)."]
    return "\n".join(lines) + "\n"


def _race_verdict_lines(race: LMRace, key: str) -> list[str]:
    out = []
    for label, verdict, ps in race.verdicts(key):
        detail = "; ".join(f"{name(a)} > {name(b)}: {pair_word(p)} ({p.n} seeds)" for a, b, p in ps)
        out.append(f"- {label + ': ' if label else ''}**{verdict}** ({detail})")
    return out or ["- not tested (the claimed arms have no paired runs yet)"]


def _race_setting_lines(race: LMRace) -> list[str]:
    st = race.settings
    shas = sorted({r.sft_sha for r in race.runs if r.sft_sha})
    lines = []
    if st:
        lines += [f"- Setting `{st['setting']}`: {' '.join(st['env'])}.",
                  f"- {st['steps']} RL steps of {st['B']} tasks × {st['G']} rollouts on a pool of {st['pool']} tasks; "
                  f"the greedy policy plays the pool every {st['eval_every']} steps; threshold {st['threshold']:g}; "
                  f"{st['test_levels']} test levels before and after RL.",
                  f"- Seed s plays the pool of env seeds {st['pool_base']:,} + {st['pool_stride']:,} · s + i "
                  f"(i < {st['pool']}).", f"- Every run's overrides: `{' '.join(st['overrides'])}`.",
                  f"- π_SFT: `{st['model']}`."]
    else:
        lines.append("- The summary (`lm_race_<setting>.json`, written when an invocation ends) is not there yet: the "
                     "threshold is unknown, so steps to it are not shown.")
    lines.append("- π_SFT identity: " + (", ".join(f"sha256 `{s[:12]}`" for s in shas) or "not recorded") + ".")
    check = Check(Spec("", "learning", "", "", "credit", []), {}, race.runs, race.arms, [])
    return lines + run_machines_lines(check) + [f"- Records: `benchmarks/results/lm_race_{race.setting}_runs/` "
                                                f"({len(race.runs)} runs)."]


def _race_results(race: LMRace) -> list[str]:
    rows = []
    for arm in race.arms:
        runs = [r for r in race.runs if r.arm == arm]
        reached = sorted(r.extra["reached_at"] for r in runs if r.extra["reached_at"] is not None)
        rows.append([name(arm), len(runs), _summary_cell(race.values(arm, "auc")),
                     _summary_cell(race.values(arm, "final")), _summary_cell(race.values(arm, "start")),
                     f"{len(reached)} of {len(runs)}" if race.settings else "–",
                     str(reached[len(reached) // 2]) if reached else "–",
                     _summary_cell(race.values(arm, "test_start")), _summary_cell(race.values(arm, "test_final"))])
    return ["Mean over seeds [95% bootstrap]; pool success is greedy, one episode per pool task.", "",
            *table(["arm", "seeds", "pool AUC", "final pool success", "π_SFT on the pool", "reached the threshold",
                    "steps to it (median of those)", "new levels, π_SFT", "new levels, after RL"], rows)]


def _race_paired(race: LMRace) -> list[str]:
    claimed = {p for _, pairs in LM_RACE_CLAIMS for p in pairs}
    rows = []
    for i, x in enumerate(race.arms):
        for y in race.arms[i + 1:]:
            a, b = (x, y) if (x, y) in claimed or (y, x) not in claimed else (y, x)
            cells = []
            for key in LM_RACE_METRICS:
                p = race.pair(a, b, key)
                cells.append(f"{_diff_cell(p)}, {p.wins} of {p.n}" + (" sep." if p.separated else ""))
            rows.append([diff_label(a, b), *cells, "claimed: above" if (a, b) in claimed else ""])
    return ["Differences a − b seed by seed: mean [95% bootstrap], seeds where a is above b; sep. = separated "
            "(benchmarks/stats.py).", "",
            *table(["a − b", *[m for m in LM_RACE_METRICS.values()], "claim"], rows)]


def _race_per_run(runs: list[Run], arms: list[str]) -> list[str]:
    rows = []
    for r in sorted(runs, key=lambda r: (arms.index(r.arm) if r.arm in arms else len(arms), r.seed)):
        e = r.extra
        rows.append([name(r.arm), r.seed, f"{e['offset']:,}–{e['offset'] + e['pool'] - 1:,}" if e["pool"] else "–",
                     f3(e["start"]),
                     f3(e["auc"]), f3(e["final"]), e["reached_at"] if e["reached_at"] is not None else "–",
                     f3(e["test_start"]), f3(e["test_final"]), f3(e["train_auc"]),
                     f"{e['rl_minutes']:.1f}" if e.get("rl_minutes") is not None else "–",
                     e.get("resumed_at_step") or "–", (r.sft_sha or "not recorded")[:12]])
    return table(["arm", "seed", "pool", "π_SFT on the pool", "pool AUC", "final", "threshold at step",
                  "new levels, π_SFT", "new levels, after", "train success (curve area)", "RL min",
                  "resumed at step", "π_SFT sha256"], rows)


def _race_pilot_lines(race: LMRace) -> list[str]:
    """The pilot (tuning seeds, in none of the verdicts above) and the pool measurements that chose the setting."""
    lines = []
    measured = pool_measurements(race.setting)
    if measured:
        rows = []
        for m in measured:
            per = m["seeds"]
            greedy = [sum(v["greedy"]) / len(v["greedy"]) for v in per.values()]
            sampled = [sum(v["sampled"]) / len(v["sampled"]) for v in per.values()]
            mixed = [sum(0 < x < 1 for x in v["sampled"]) / len(v["sampled"]) for v in per.values()]
            rows.append([f"`{m['sft_sha256'][:12]}`", ", ".join(per), m["pool"], span(greedy), span(sampled),
                         span(mixed, "pct"), f"{m['minutes']:.1f}"])
        lines += ["## π_SFT on candidate pools", "",
                  "`benchmarks/lm_race.py --measure` on tuning seeds: π_SFT's greedy success on each seed's pool, its "
                  "success with sampled episodes (`group_size` per task, the training temperature) and the share of "
                  "pool tasks whose sampled group mixes successes and failures (range over the seeds).", "",
                  *table(["π_SFT sha256", "seeds", "pool", "greedy success", "sampled success", "mixed groups",
                          "minutes"], rows), ""]
    if race.pilot:
        arms = _ordered({r.arm for r in race.pilot})
        lines += ["## Pilot", "",
                  f"Tuning seeds (from 100 up), in no verdict above: `benchmarks/results/lm_race_{race.setting}_pilot_runs/` "
                  f"({len(race.pilot)} runs). The settings above were fixed from them before the reported seeds ran.", "",
                  *_race_per_run(race.pilot, arms), ""]
    return lines


# ------------------------------------------------------------------------------------------------------------
# the prediction table (issue 87): does the audit's order of the estimators predict the LM's?
# ------------------------------------------------------------------------------------------------------------

PREDICTION_PAGE = "audit-predicts-lm.md"
# per LM race setting, the records of the same setting at the other levels: the audit's summary
# (credit_audit_<audit>.json: its ε-expert policies, and an LM behaviour policy where one was audited, any accuracy
# policy not named eps=...) and the held-out learning check of the same levels and π_SFT. The audit has 7×7 with
# 2 boxes only, so a 7×7 1-box race has no audit until one is run.
PREDICTIONS = {"demo": {"audit": "sokoban6", "held_out": "credit_learning_demo100"},
               "sokoban7": {"audit": "sokoban7_1box", "held_out": None}}
PREDICTION_PAIRS = [("rewardflow", "gigpo"), ("gigpo", "grpo"), ("rewardflow", "grpo"), ("graphgpo", "gigpo"),
                    ("graphgpo", "grpo"), ("graphgpo", "rewardflow")]
PREDICTORS = {"lm_audit": "credit vs A^π, π_SFT as behaviour policy", "eps_audit": "credit vs A^π, ε-expert",
              "tabular": "tabular race (AUC)"}
LM_LEVELS = {"pool": "LM race, pool AUC", "race_new": "LM race, new levels after it",
             "curve": "100-step check, training curve", "held_out": "100-step check, held-out success"}


def prediction_sources(race: LMRace, audits: dict, checks: dict) -> dict:
    """Column -> ``f(a, b) -> Paired`` (None: no record) for one race setting."""
    spec = PREDICTIONS.get(race.setting, {})
    audit = audits.get(spec.get("audit"))
    check = checks.get(spec.get("held_out"))

    def audit_acc(policies):
        def f(a, b):
            if audit is None or not policies or not audit.measured or a not in audit.arms or b not in audit.arms:
                return None
            return stats.paired(audit.accuracy(a, policies=policies), audit.accuracy(b, policies=policies))
        return f

    def race_pair(key):
        return lambda a, b: race.pair(a, b, key) if a in race.arms and b in race.arms else None

    def check_pair(metric):
        return lambda a, b: (check.pair(a, b, metric) if check is not None and a in check.arms and b in check.arms
                             else None)

    eps = [p for p in audit.policies if p.startswith("eps=")] if audit is not None and audit.measured else []
    return {"lm_audit": audit_acc(audit.lm_policies if audit is not None and audit.measured else []),
            "eps_audit": audit_acc(eps),
            "tabular": lambda a, b: (stats.paired(audit.race(a), audit.race(b)) if audit is not None
                                     and a in audit.race_arms and b in audit.race_arms else None),
            "pool": race_pair("auc"), "race_new": race_pair("test_final"),
            "curve": check_pair("train_auc"), "held_out": check_pair("held_out")}


def _prediction_cell(p: stats.Paired | None) -> str:
    if p is None or p.n == 0:
        return "no record"
    if p.n < 2:
        return f"not tested ({p.n} seed)"
    return f"{pair_word(p)}: {signed(p.summary.mean)} ({p.wins} of {p.n})"


def prediction_agreement(cells: dict) -> list[list[str]]:
    """For each predictor × LM level: over the pairs both tested, on how many the mean differences have the same
    sign, and, of the pairs separated in both, on how many the direction agrees."""
    rows = []
    for pred, label in PREDICTORS.items():
        row = [label]
        for lm in LM_LEVELS:
            both = [(x, y) for x, y in zip(cells[pred], cells[lm]) if x is not None and y is not None
                    and x.n >= 2 and y.n >= 2]
            if not both:
                row.append("no pair with records in both")
                continue
            same = sum((x.summary.mean > 0) == (y.summary.mean > 0) for x, y in both)
            sep = [(x, y) for x, y in both if x.separated and y.separated]
            agree = sum(x.separated == y.separated for x, y in sep)
            row.append(f"same sign on {same} of {len(both)}; separated in both: {len(sep)}"
                       + (f", agreeing on {agree}" if sep else ""))
        rows.append(row)
    return rows


def prediction_page(races: list, audits: list, checks: list) -> str:
    by_audit = {a.setting: a for a in audits}
    by_check = {c.spec.stem: c for c in checks}
    lines = ["# Does the audit predict the LM?", "",
             "<!-- generated by benchmarks/report.py from the audit, LM race and learning records it names -->", "",
             "For each LM race setting, one row per estimator pair a − b and one column per level of evidence, each "
             "cell the generated verdict from that level's records: the audit's credit against the true advantage "
             "A^π (under an LM's π_SFT as the behaviour policy, where audited, and under the ε-expert), the tabular "
             "race, the [LM race](../benchmarks.md#the-scripts) on its own pool and on new levels after it, and the "
             "100-step learning check of the same levels (its training curve and its held-out success). A cell: "
             "yes = a above b, separated; reversed = b above a, separated; in means only = a above b in the mean; "
             "no = otherwise; then the mean difference and the seeds where a is above b. No record: that level has "
             "not been run for this setting (or not with both arms).", ""]
    for race in races:
        spec = PREDICTIONS.get(race.setting, {})
        sources = prediction_sources(race, by_audit, by_check)
        cells = {k: [f(a, b) for a, b in PREDICTION_PAIRS] for k, f in sources.items()}
        audit, check = spec.get("audit"), spec.get("held_out")
        where = [f"[LM race](lm-race-{slug(race.setting)}.md)"]
        where.append(f"[audit](credit-audit-{audit}.md)" if audit in by_audit else f"audit `{audit}`: no record"
                     if audit else "no audit of this setting")
        where.append(f"[100-step check]({slug(check)}.md)" if check in by_check else "no 100-step check of this setting")
        rows = [[diff_label(a, b), *[_prediction_cell(cells[k][i]) for k in sources]]
                for i, (a, b) in enumerate(PREDICTION_PAIRS)]
        lines += [f"## {race.title}", "", "Records: " + ", ".join(where) + ".", "",
                  *table(["a − b", *PREDICTORS.values(), *LM_LEVELS.values()], rows), "",
                  "Does the order agree? Over the pairs both levels tested:", "",
                  *table(["predictor", *LM_LEVELS.values()], prediction_agreement(cells)), ""]
    lines += ["Statistics: [how to read these numbers](index.md#how-to-read-the-numbers)."]
    return "\n".join(lines) + "\n"


# ------------------------------------------------------------------------------------------------------------
# the claims table (issue 87): one row per claim, one column per level of evidence (the README's results)
# ------------------------------------------------------------------------------------------------------------

# (row, [(variant label, claimed pairs)]): every variant whose arms a source has gives that source an entry
CLAIM_ROWS = [
    ("RewardFlow > GiGPO > GRPO", [("", CREDIT_CLAIM)]),
    ("GraphGPO > GiGPO, GRPO", [("", GRAPH_CLAIMS[0][1]), ("reproduction preset", GRAPH_CLAIMS[1][1])]),
    ("G2PO > GRPO", [("", GRAPH_CLAIMS[2][1])]),
    ("GAGPO > GiGPO, GRPO", [("", GRAPH_CLAIMS[3][1])]),
    ("+ CRPS > + ExpReplay, + CRPS > GRPO", [("", CRPS_CLAIM)]),
    ("RRO > fixed-5, RRO > π_SFT", [("", RRO_CLAIM)]),
    ("RL > π_SFT (the demo's goal)", [("", [("rl", "sft")])]),
]
EVIDENCE = {"audit": "credit vs A^π", "tabular": "tabular race", "pool": "LM on its pool",
            "curve": "LM training curve", "new": "LM on new levels"}
SHORT = {  # how a cell names each setting
    "credit_learning": "6×6, 12 steps", "credit_learning_demo100": "6×6", "credit_learning_hard": "7×7, 2 boxes",
    "credit_learning_hard_binary": "7×7, 2 boxes, binary", "credit_learning_household": "household",
    "crps_learning": "6×6, 12 steps", "crps_learning_hard": "7×7, 2 boxes", "rro_samples": "Sokoban",
    "rro_samples_webshop": "WebShop", "demo_seeds": "validation levels", "demo_seeds_test": "test levels",
    "audit:sokoban6": "6×6", "audit:sokoban7": "7×7, 2 boxes", "audit:sokoban7_1box": "7×7, 1 box",
    "audit:household": "household", "audit:webshop": "WebShop", "audit:sql": "SQL", "race:demo": "6×6",
    "race:sokoban7": "7×7, 1 box"}
VERDICT_ORDER = ["yes", "in means only", "no", "reversed", "not resolved", "not tested", "not like for like",
                 "not run yet", "no record yet"]


def policy_short(label: str) -> str:
    """A behaviour policy in a claims-table cell: ``ε-expert 0.5``, ``uniform``, ``detour``, ``tabular 20%``, ``π_SFT``."""
    kind = policy_kind(label)
    return {"expert": f"ε-expert {label[4:]}", "uniform": "uniform", "detour": "detour",
            "tabular": f"tabular {100 * float(label.split('=')[1]):.0f}%" if kind == "tabular" else "",
            "lm": "π_SFT"}[kind]


KIND_SHORT = {"expert": "ε-expert", "uniform": "uniform", "detour": "detour", "tabular": "tabular", "lm": "π_SFT"}


def _entry(verdict: str, label: str, link: str) -> tuple[str, str]:
    return verdict, f"[{label}]({link})"


def _variants(variants, have, drop_sft=False):
    """(variant label, pairs) of the variants whose arms are all in ``have`` (π_SFT pairs dropped if asked)."""
    for label, pairs in variants:
        pairs = [p for p in pairs if not (drop_sft and "sft" in p)]
        if pairs and all(a in have and b in have for a, b in pairs):
            yield label, pairs


def _named(short: str, label: str) -> str:
    return f"{short}, {label}" if label else short


def claim_entries(variants, source: str, checks, audits, races, prefix: str) -> list[tuple[str, str]] | str:
    """One claim's entries at one level of evidence: (verdict, linked setting), or '–' where that level does not
    measure the claim."""
    out = []
    if source in ("audit", "tabular"):
        for a in audits:
            key = f"audit:{a.setting}"
            short, link = SHORT.get(key, a.setting), f"{prefix}{a.page}"
            if source == "audit":  # one entry per (setting, behaviour policy), never pooled over policies
                for p in a.measured_policies:
                    for label, pairs in _variants(variants, set(a.arms)):
                        verdict = (stats.ordering_verdict([stats.paired(a.accuracy(x, policy=p), a.accuracy(y, policy=p))
                                                           for x, y in pairs]) if a.is_resolved(p) else "not resolved")
                        out.append(_entry(verdict, _named(f"{short}, {policy_short(p)}", label), link))
                if any(True for _ in _variants(variants[:1], set(a.arms) if a.measured else AUDIT_ARMS)):
                    out += [_entry("no record yet", f"{short}, {KIND_SHORT[k]}", link) for k in a.missing_kinds]
                if a.summary["rro"] and variants[0][1] == RRO_CLAIM:  # RRO's pairs against Q^π: rising vs fixed
                    p = stats.paired(a.rro("rising"), a.rro("fixed"))
                    out.append(_entry(stats.ordering_verdict([p]), _named(short, "pair accuracy"), link))
            if source == "tabular":
                if a.fresh:
                    for rate, what in (("own", "own rates"), ("common", f"common rate {a.common_rate:g}")):
                        for label, pairs in _variants(variants, set(a.race_arms)):
                            ps = [stats.paired(a.race(x, rate=rate), a.race(y, rate=rate)) for x, y in pairs]
                            out.append(_entry(stats.ordering_verdict(ps), _named(f"{short}, {what}", label),
                                              f"{link}#learning-race"))
                elif "race" in a.summary.get("parts", ()) and any(True for _ in _variants(variants[:1], RACE_ARMS)):
                    out.append(_entry("no record yet", f"{short}, fresh pools, tuned rates", f"{link}#learning-race"))
                if a.summary.get("race"):
                    for label, pairs in _variants(variants, set(a.shared_arms)):
                        ps = [stats.paired(a.race(x, rate="shared"), a.race(y, rate="shared")) for x, y in pairs]
                        out.append(_entry(stats.ordering_verdict(ps), _named(f"{short}, one shared pool, lr 1", label),
                                          f"{link}#earlier-race-one-pool-shared-by-every-seed"))
        return out or "–"
    if source == "pool":
        runnable = any(True for _ in _variants(variants, set(LM_RACE_ARMS)))
        for race in races:
            key, link = f"race:{race.setting}", f"{prefix}{race.page}"
            for label, pairs in _variants(variants, set(race.arms)):
                out.append(_entry(stats.ordering_verdict([race.pair(x, y) for x, y in pairs]),
                                  _named(SHORT.get(key, race.setting), label), link))
            if not race.runs and runnable:
                out.append(_entry("not run yet", SHORT.get(key, race.setting), link))
        return out or "–"
    for c in checks:
        if c.spec.status:  # superseded
            continue
        have = set(c.arms) | {"sft"}
        if source == "curve":
            if not c.train_curves:
                continue
            for label, pairs in _variants(variants, have, drop_sft=True):
                verdict = stats.ordering_verdict([c.pair(x, y, "train_auc") for x, y in pairs])
                out.append(_entry(verdict if curve_comparable(c) else "not like for like",
                                  _named(SHORT.get(c.spec.stem, c.spec.stem), label), f"{prefix}{c.page}#training-curve"))
        else:
            for label, pairs in _variants(variants, have):
                out.append(_entry(stats.ordering_verdict([c.pair(x, y) for x, y in pairs]),
                                  _named(SHORT.get(c.spec.stem, c.spec.stem), label), f"{prefix}{c.page}"))
    if source == "new":
        for race in races:
            for label, pairs in _variants(variants, set(race.arms)):
                out.append(_entry(stats.ordering_verdict([race.pair(x, y, "test_final") for x, y in pairs]),
                                  _named(SHORT.get(f"race:{race.setting}", race.setting), label + " after the race"
                                         if label else "after the race"), f"{prefix}{race.page}"))
    return out or "–"


PENDING = ("not run yet", "no record yet")
# the arms an audit setting without records would have: every estimator arm, and in its race GRPO + each curriculum
AUDIT_ARMS = {a.name for a in audit_arms()}
RACE_ARMS = {a.name for a in audit_race_arms()}


def claim_cell(entries, detail: str | None = None) -> str:
    """Entries grouped by verdict: ``**yes**: [6×6](…), [household](…); **no**: …``. With ``detail`` (a link to
    the full table) the cell only counts them, ``**yes** 3 · **no** 1 · 2 not run yet``, for a table read in a
    minute."""
    if isinstance(entries, str):
        return entries
    groups: dict[str, list[str]] = {}
    for verdict, link in entries:
        groups.setdefault(verdict, []).append(link)
    order = sorted(groups, key=lambda v: VERDICT_ORDER.index(v) if v in VERDICT_ORDER else len(VERDICT_ORDER))
    if detail is None:
        return "; ".join(f"**{v}**: {', '.join(groups[v])}" for v in order)
    done = [f"**{v}** {len(groups[v])}" for v in order if v not in PENDING]
    pending = sum(len(groups[v]) for v in PENDING if v in groups)
    return f"[{' · '.join(done + ([f'{pending} not run yet'] if pending else []))}]({detail})"


def claims_table(checks, audits, races, prefix: str, compact: bool = False) -> list[str]:
    """The claims table; ``compact`` (the README): each cell counts its verdicts and links to the full table."""
    detail = f"{prefix}index.md#by-claim-and-level-of-evidence" if compact else None
    rows = [[claim, *[claim_cell(claim_entries(variants, src, checks, audits, races, prefix), detail)
                      for src in EVIDENCE]] for claim, variants in CLAIM_ROWS]
    how = ("counts the verdicts of the (setting, behaviour policy) entries that measure the claim at that level and "
           "links to them all" if compact else
           "gives the claim's verdict at that level of evidence, per setting, each linked to its page")
    return [*table(["claim", *EVIDENCE.values()], rows), "",
            f"Each cell {how}. **yes**: "
            "every claimed pair's seed-by-seed difference separated from zero in the claim's direction; **in means "
            "only**: right sign, not all separated; **reversed**: a pair separated the other way; **no**: otherwise; "
            "**not resolved**: too few steps with |A^π| > 2 SE (under 50) to rank anything; **not run yet** / **no "
            "record yet**: the benchmark exists, no record; –: no record measures it at that level. Credit vs A^π: "
            "the audit's credit against Monte-Carlo A^π, one entry per (setting, behaviour policy): the ε-expert "
            "(distance-greedy: its V^π falls with the distance to success, the shape graph credit computes), the "
            "uniform policy, the detour expert (competent, its V^π no function of the distance), the race's tabular "
            f"policy frozen at 20/50/80% success, π_SFT (the LM) ([which to trust when]({prefix}../audit.md#"
            "what-each-behaviour-policy-can-show)); RRO: its pairs' accuracy against Q^π. Tabular race: a tabular "
            "policy trained from zero, a fresh pool per seed, each arm at its own rate tuned on other seeds and at the "
            "common rate (and the earlier race on one shared pool at lr 1); LM on its pool: the tiny LM from π_SFT on a "
            f"fixed pool ([LM race]({prefix}lm-race-demo.md)); LM training curve: area under the learning "
            "checks' on-policy training success; LM on new levels: held-out success after RL (RRO: after DPO). "
            f"Generated by `benchmarks/report.py` from the records; the detailed table: [results]({prefix}index.md); "
            f"does the audit predict the LM? [prediction table]({prefix}{PREDICTION_PAGE})."]


# ------------------------------------------------------------------------------------------------------------
# the results table (README and index) and the performance table
# ------------------------------------------------------------------------------------------------------------


def results_table(checks: list[Check], link_prefix: str, audits: list | None = None) -> list[str]:
    rows = []
    for c in checks:
        arms = "; ".join(f"{name(a)} {arm_cell(c.arm(a))}" + (f" ({c.coverage(a)})" if c.coverage(a) else "")
                         for a in c.arms)
        sft = c.sft_value()
        sft_text = f3(sft) if sft is not None else (f"{f3(c.arm('sft').mean)} (mean; own per seed)"
                                                    if c.arm("sft").mean is not None else "–")
        ident = c.sft_identity()
        sft_text += ", identity not recorded" if ident.startswith("not recorded") else f", {ident}"
        title = f"[{c.spec.title}]({link_prefix}{c.page})" + (" (superseded)" if c.spec.status else "")
        curve = verdicts_text(c.verdicts("train_auc")) if c.train_curves else "–"
        if c.train_curves and not curve_comparable(c):
            curve += " (not like for like: curriculum arms replay near a success)"
        rows.append([title, c.spec.setting, arms, metric_text(c), sft_text, CLAIMS[c.spec.claim][0],
                     verdicts_text(c.verdicts()), curve])
    rows += [[*row, "–"] for row in audit_rows(audits or [], link_prefix)]
    return [*table(["check", "setting", "arms: mean [95% bootstrap], t [95% t-interval]", "metric", "π_SFT",
                    "claim", "reproduced", "reproduced on the training curve"], rows), "",
            "Mean over seeds; [ ]: 95% percentile bootstrap; t [ ]: 95% t-interval, given where n ≤ 5 "
            "(benchmarks/stats.py). Reproduced: yes = every claimed pair's seed-by-seed difference is separated "
            "from zero in the claim's direction; in means only = right sign, not separated; reversed = some "
            "pair separated the other way; no = otherwise. On the training curve: the same rule on the area under "
            "each run's on-policy training success curve (its mean over the RL steps), the claims against π_SFT "
            "aside. Generated by `benchmarks/report.py` from the records; each check's page has its settings, "
            f"per-seed values and paired differences ([results]({link_prefix}index.md))."]


def verdicts_text(verdicts: list) -> str:
    """A check's verdicts in one cell: each claim's word, and its pairs' words where the claim is not a plain yes."""
    return "; ".join((f"{label}: " if label else "") + v + (
        "" if v in ("yes", "not tested") or len(ps) < 2 else
        " (" + ", ".join(f"{name(a)} > {name(b)}: {pair_word(p)}" for a, b, p in ps) + ")")
        for label, v, ps in verdicts) or "not tested"


def performance_rows() -> tuple[list[list[str]], list[str]]:
    speed = read_json(RESULTS / "credit_speed.json")
    row = speed["rows"][0]
    credit_ms, ref_ms = row["ms"]["rewardflow"]["median"], row["reference_ms"]
    slow = min(row["paths_ms"], key=lambda p: row["speedup_paths_vs_reference"][p])
    rows = [["RewardFlow credit, one batch of "
             f"{row['tasks']} tasks × {row['trajectories'] // row['tasks']} rollouts ({row['transitions']:,} transitions)",
             f"{credit_ms:.1f} ms (trainer's `compute`); slowest public path `{slow}` "
             f"{row['paths_ms'][slow]['median']:.1f} ms",
             f"{ref_ms:,.0f} ms: the official propagation (1000 Bellman-max sweeps, networkx)",
             f"{ref_ms / credit_ms:.0f}×; {row['speedup_paths_vs_reference'][slow]:.0f}×",
             machine_text({**speed["machine"], "date": speed["machine"]["date"][:10]}), "`credit_speed.json`"]]
    sources = ["credit_speed.json"]
    for stem in ("step_cost", "step_cost_1201"):
        sc = read_json(RESULTS / f"{stem}.json")
        med = sc["median"]
        base, fast = med["window+paper"]["step_s"], med["conversation+compact+shared"]["step_s"]
        rows.append([f"one RL step of the demo setting ({sc['settings']['tasks']} × {sc['settings']['group']}, "
                     f"{sc['settings']['torch_threads']} threads)",
                     f"{fast:.2f} s: `conversation` + `compact`, shared prefixes",
                     f"{base:.2f} s: `window` + `paper`, no sharing", f"{base / fast:.1f}×",
                     machine_text(sc["machine"]), f"`{stem}.json`"])
        sources.append(f"{stem}.json")
    lean = read_json(RESULTS / "step_cost_lean.json")
    lean_machine = (machine_text({**lean["machine"], "matmul_gflops": None}) +
                    f"; one large float32 matrix product at {lean['matmul_gflops_at_run_threads']['cpu']:.0f} GFLOP/s "
                    f"per CPU second; {lean['settings']['torch_threads']} thread; load average "
                    f"{lean['load']['start']['loadavg'][0]:g}-{lean['load']['end']['loadavg'][0]:g} (shared)")
    for base, ph in lean["phases"].items():
        d = ph["decode"]
        rows.append([f"one decode step of the tiny policy, batch {d['batch']} (a group's first turn, "
                     f"`{base.split('+')[0]}` layout), CPU seconds",
                     f"{d['lean']['ms_cpu']:.1f} ms: lean decoder (`policy.decode=lean`)",
                     f"{d['hf']['ms_cpu']:.1f} ms: transformers model call (`policy.decode=hf`)",
                     f"{d['ratio_cpu']:.2f}×", lean_machine, "`step_cost_lean.json`"])
    for batch, d in lean["smollm2"].items():
        rows.append([f"SmolLM2-135M decode, batch {batch}, CPU seconds",
                     f"{1000 * int(batch) / d['lean']['ms_cpu']:.1f} tokens/s: lean decoder",
                     f"{1000 * int(batch) / d['hf']['ms_cpu']:.1f} tokens/s: transformers model call",
                     f"{d['ratio_cpu']:.2f}×", lean_machine, "`step_cost_lean.json`"])
    sources.append("step_cost_lean.json")
    rt = read_json(RESULTS / "rollout_throughput.json")
    rows.append([f"rollouts, {rt['settings']['tasks']} × {rt['settings']['group']} episodes, tiny policy (untrained)",
                 f"{rt['batched']['env_steps_per_s']:.1f} env-steps/s: batched lockstep engine",
                 f"{rt['sequential']['env_steps_per_s']:.1f} env-steps/s: one env at a time",
                 f"{rt['batched']['env_steps_per_s'] / rt['sequential']['env_steps_per_s']:.2f}×",
                 machine_text(rt["machine"]), "`rollout_throughput.json`"])
    vl = read_json(RESULTS / "rollout_throughput_vllm.json")
    rows.append([f"rollouts, {vl['settings']['tasks']} × {vl['settings']['group']} episodes, generation backend",
                 f"{vl['vllm']['env_steps_per_s']:.1f} env-steps/s: vLLM (CPU)",
                 f"{vl['hf']['env_steps_per_s']:.1f} env-steps/s: transformers (`hf`)",
                 f"{vl['vllm']['env_steps_per_s'] / vl['hf']['env_steps_per_s']:.2f}×",
                 machine_text(vl["machine"]) + f"; load average {vl['load_average_before_after'][0]:g}-"
                 f"{vl['load_average_before_after'][1]:g} (shared)", "`rollout_throughput_vllm.json`"])
    audit_rows_, audit_sources = audit_speed_rows()
    return rows + audit_rows_, sources + ["rollout_throughput.json", "rollout_throughput_vllm.json"] + audit_sources


def performance_table() -> list[str]:
    rows, _ = performance_rows()
    return [*table(["what", "measured", "against", "ratio", "machine", "record"], rows), "",
            "Records under `benchmarks/results/`; medians of repeated calls or steps as each record says. "
            "Generated by `benchmarks/report.py`."]


def performance_page() -> str:
    lines = ["# Performance", "",
             "<!-- generated by benchmarks/report.py from the records named in the table -->", "",
             "Speed of creditflow's parts against the baseline each benchmark measures in the same run, on the "
             "machine it records. Every ratio is taken within one run.", "", *performance_table(), ""]
    narrative = render_narrative("performance", {"load": lambda f: read_json(RESULTS / f)})
    if narrative:
        lines += ["## What it shows", "", *narrative, ""]
    return "\n".join(lines) + "\n"


STATS_TEXT = """## How to read the numbers

- **Mean** over seeds; **sd**: the sample standard deviation over seeds (ddof 1). The benchmarks' own tables
  (`benchmarks/results/*.md`) write `±` for the std with ddof 0 (`np.std`) and say so.
- **95% bootstrap**: the percentile interval of the mean over 2,000 resamples of the seeds (rliable's stratified
  bootstrap, Agarwal et al. 2021, with one task; resampling seed 0, so every summary recomputes exactly).
  With 3-5 seeds it is too narrow (the resampled means can take only a few values), so the **95% t-interval**
  (mean ± t · sd / √n) is given beside it wherever n ≤ 5.
- **Paired differences**: arms of a check start from the same π_SFT with the same seed (the same task sequence),
  so they are compared seed by seed, a − b, which removes the spread π_SFT and the task draw put into both.
  A difference is **separated** from zero when its 95% bootstrap interval excludes zero and, with n ≤ 5, its
  95% t-interval does too. Seeds that only one arm has are left out of its differences.
- **π_SFT identity**: runs record the sha256 of their π_SFT's weights (`sft_sha256`) since
  2026-12-01 (learning checks) and 2026-11-27 (RRO); a seed whose two runs name different weights is not paired.
  Older records say "not recorded": those arms are paired by seed, and their π_SFT's held-out value is shown.
- **Reproduced** (the paper's ordering), from the claimed pairs' differences: **yes** = every claimed pair is
  separated in the claim's direction; **in means only** = every claimed pair's mean difference has the claim's
  sign, not all separated; **reversed** = at least one claimed pair is separated the other way; **no** = otherwise;
  **not tested** = a claimed pair has fewer than two paired seeds.
"""


def pretrained_section() -> list[str]:
    """The zero-shot record of SmolLM2-135M-Instruct (benchmarks/smollm2_zero_shot.py), when it exists."""
    path = RESULTS / "smollm2_zero_shot.json"
    if not path.exists():
        return []
    rec = read_json(path)
    s, model = rec["settings"], rec["settings"]["model_record"]
    rows = []
    for env in s["envs"]:
        r = rec["envs"].get(env)
        if r is None:
            continue
        if not r["ran"]:
            rows.append([env, "–", f"not run: {r['reason']}", "–", "–"])
            continue
        rows.append([env, str(r["episodes"]), f"{f3(r['success_rate'])} [{f3(r['ci95_exact'][0])}, "
                     f"{f3(r['ci95_exact'][1])}] ({r['successes']} of {r['episodes']})", f3(r["score"]),
                     f"{r['invalid_frac']:.2f}"])
    lines = ["## Pretrained baseline: SmolLM2-135M-Instruct, zero-shot", "",
             f"The first pretrained model in the results: SmolLM2-135M-Instruct ({model['parameters']:,} parameters, "
             f"LLaMA architecture), from the GGUF file `{model['converted_from']}` (sha256 `{model['sha256'][:12]}`) "
             f"dequantised to {model['dtype']} by `creditflow export --from-gguf` (`make smollm2`), with no training. "
             f"Held-out test split, one episode per task, greedy, the `{s['template']}` template in the "
             f"`{s['history']}` layout, episodes capped at {s['max_steps']} turns of at most {s['max_new_tokens']} "
             f"new tokens (the CPU budget; the envs' own caps are longer); {machine_text(rec['machine'])}.", "",
             *table(["env", "episodes", "success [95% Clopper-Pearson]", "score", "invalid actions"], rows), ""]
    for step in [rec.get("step"), *rec.get("steps_by_threads", {}).values()]:
        if not step:
            continue
        g = step["setting"]
        lines += [f"One RewardFlow step with it on Sokoban ({g['tasks']} task × {g['group']} rollouts, the same caps, "
                  f"`{g['layout']}`, KL {g['kl_coef']:g}) took {step['step_s']:.0f} s on "
                  f"{step.get('threads', s['torch_threads'])} torch thread(s): rollout {step['rollout_s']:.0f} s "
                  f"({step['generation_tokens_per_s']:.1f} generated tokens/s), reference log-probs "
                  f"{step['ref_s']:.0f} s, update {step['update_s']:.0f} s ({step['train_row_tokens']:,} tokens, "
                  f"{step['update_tokens_per_s']:.0f} tokens/s forward + backward). Load average "
                  f"{step['load']['start']['loadavg'][0]:g} at its start (2 cores; above 1, other jobs were running). Record: "
                  "`smollm2_zero_shot.json`.", ""]
    return lines


def index_page(checks: list[Check], audits: list | None = None, races: list | None = None) -> str:
    lines = ["# Results", "",
             "<!-- generated by benchmarks/report.py; run it after adding records, `make report` -->", "",
             "Every learning check creditflow has run, one page each, generated from the committed records "
             "(`benchmarks/results/`) by `benchmarks/report.py`: no number on these pages is typed by hand. "
             "All ran with the tiny from-scratch policy (0.9M parameters) on CPUs, some runs on lent GPUs; "
             "they check that the methods run and learn as the papers describe at that scale, not the papers' "
             "numbers.", "", *results_table(checks, "", audits), "",
             "## By claim and level of evidence", "",
             "The README's results table: each claim's verdicts, from the credit against A^π to the LM on new levels.",
             "", *claims_table(checks, audits or [], races or [], ""), "",
             "The LM race, setting by setting: " + ", ".join(f"[{r.title}]({r.page})" for r in races or []) + ".", "",
             *pretrained_section(), "Performance: [performance](performance.md).", "",
             STATS_TEXT.strip(), ""]
    return "\n".join(lines) + "\n"


def audit_readme_lines(audits: list, prefix: str) -> list[str]:
    """The README's audit verdicts on RewardFlow > GiGPO > GRPO, per setting and behaviour policy, in the words of
    the generated verdicts (a policy without a record says so)."""
    out = []
    for a in audits:
        if not (a.measured or a.missing_kinds or a.fresh or a.summary.get("race")):
            continue
        short, link = SHORT.get(f"audit:{a.setting}", a.setting), f"{prefix}{a.page}"
        cells = []
        for p in a.measured_policies:
            if not all(x in a.arms and y in a.arms for x, y in CREDIT_CLAIM):
                continue
            verdict = (stats.ordering_verdict([stats.paired(a.accuracy(x, policy=p), a.accuracy(y, policy=p))
                                               for x, y in CREDIT_CLAIM]) if a.is_resolved(p) else "not resolved")
            cells.append(f"{policy_short(p)} **{verdict}**")
        cells += [f"{KIND_SHORT[k]} **no record yet**" for k in a.missing_kinds]
        race = []
        if a.fresh:
            for rate, what in (("own", "own rates"), ("common", f"common rate {a.common_rate:g}")):
                if all(x in a.race_arms and y in a.race_arms for x, y in CREDIT_CLAIM):
                    ps = [stats.paired(a.race(x, rate=rate), a.race(y, rate=rate)) for x, y in CREDIT_CLAIM]
                    race.append(f"{what} **{stats.ordering_verdict(ps)}**")
        elif "race" in a.summary.get("parts", ()):
            race.append("fresh pools, tuned rates **no record yet**")
        if a.summary.get("race") and all(x in a.shared_arms and y in a.shared_arms for x, y in CREDIT_CLAIM):
            ps = [stats.paired(a.race(x, rate="shared"), a.race(y, rate="shared")) for x, y in CREDIT_CLAIM]
            race.append(f"one shared pool, lr 1 **{stats.ordering_verdict(ps)}**")
        line = f"- [{short}]({link}): closer to A^π, per behaviour policy: " + (", ".join(cells) or "–")
        if race:
            line += "; learns faster without an LM (tabular race): " + ", ".join(race)
        out.append(line + ".")
    return out + ["", "RewardFlow > GiGPO > GRPO, each pair separated seed by seed (**yes**), in the mean only, or not; "
                  "**not resolved**: fewer than 50 steps whose A^π is more than 2 standard errors from 0. Generated by "
                  "`benchmarks/report.py` from the audit's records."]


def readme_blocks(checks: list[Check], audits: list | None = None, races: list | None = None) -> dict[str, list[str]]:
    return {"results": claims_table(checks, audits or [], races or [], "docs/results/", compact=True),
            "performance": performance_table(), "audit": audit_readme_lines(audits or [], "docs/results/")}


def replace_block(text: str, key: str, body: list[str]) -> str:
    begin, end = MARKERS[key]
    pattern = re.compile(re.escape(begin) + r".*?" + re.escape(end), re.S)
    if not pattern.search(text):
        raise SystemExit(f"error: README.md has no {begin} ... {end} markers")
    return pattern.sub(lambda _: "\n".join([begin, *body, end]), text, count=1)


def generate() -> dict[Path, bytes]:
    """Every generated file's path and content (README.md with its blocks replaced)."""
    checks = [load_check(spec) for spec in SPECS]
    by_stem = {c.spec.stem: c for c in checks}
    context = {"checks": by_stem, "load": lambda f: read_json(RESULTS / f), "stats": stats, "paper": PAPER, "goals": GOALS,
               "math": math, "split_gains": split_gains}
    out: dict[Path, bytes] = {}
    for c in checks:
        text, files = page(c, context)
        out[DOCS / c.page] = text.encode()
        out.update({DOCS / k: v for k, v in files.items()})
    audits = load_audits()
    for a in audits:
        out[DOCS / a.page] = audit_page(a).encode()
    races = load_lm_races()
    for r in races:
        out[DOCS / r.page] = lm_race_page(r).encode()
    out[DOCS / PREDICTION_PAGE] = prediction_page(races, audits, checks).encode()
    out[DOCS / "index.md"] = index_page(checks, audits, races).encode()
    out[DOCS / "performance.md"] = performance_page().encode()
    readme = README.read_text(encoding="utf-8")
    for key, body in readme_blocks(checks, audits, races).items():
        readme = replace_block(readme, key, body)
    out[README] = readme.encode()
    return out


def stale(files: dict[Path, bytes]) -> list[str]:
    """The generated files whose committed content differs (or is missing), and stray files in docs/results/."""
    bad = [rel(p) for p, data in files.items() if not p.exists() or p.read_bytes() != data]
    extra = [rel(p) for p in DOCS.rglob("*") if p.is_file() and p not in files]
    return bad + [f"{x} (not generated any more)" for x in extra]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="write nothing; exit 1 if a generated file differs")
    args = ap.parse_args()
    files = generate()
    if args.check:
        bad = stale(files)
        for b in bad:
            print(f"out of date: {b}", file=sys.stderr)
        if bad:
            print("run: python -m benchmarks.report", file=sys.stderr)
        return 1 if bad else 0
    for p in DOCS.rglob("*"):
        if p.is_file() and p not in files:
            p.unlink()
    for p, data in files.items():
        p.parent.mkdir(parents=True, exist_ok=True)
        if not p.exists() or p.read_bytes() != data:
            p.write_bytes(data)
    print(f"wrote {len(files)} files under {rel(DOCS)}/ and README.md's tables")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
