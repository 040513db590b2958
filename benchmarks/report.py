"""The documentation's results, generated from the committed records: nothing in them is typed by hand.

    python -m benchmarks.report           # write docs/results/*.md (+ img/) and the README's two tables
    python -m benchmarks.report --check   # exit 1, naming the files, when a committed file is not what it generates

Reads every learning check's summary (``benchmarks/results/<check>.json``) and its per-run records
(``<check>_runs/``; checks made before records existed keep their runs inside the summary) and writes:

- ``docs/results/<check>.md``, one page per check: settings, machine, per-arm results, paired differences,
  per-run values, figure, and the narrative (``benchmarks/narrative/<check>.md``, hand-written, rendered with
  Jinja so that every number in it is an expression over the records, e.g. ``{{ c.arm('gigpo').mean | f3 }}``);
- ``docs/results/index.md`` (the results table, how to read it) and ``docs/results/performance.md``;
- the README's results table and performance table, between ``<!-- results:begin -->`` / ``<!-- results:end -->``
  and ``<!-- performance:begin -->`` / ``<!-- performance:end -->``.

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

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
NARRATIVE = ROOT / "benchmarks" / "narrative"
DOCS = ROOT / "docs" / "results"
README = ROOT / "README.md"
MARKERS = {"results": ("<!-- results:begin -->", "<!-- results:end -->"),
           "performance": ("<!-- performance:begin -->", "<!-- performance:end -->")}

NAMES = {"grpo": "GRPO", "gigpo": "GiGPO", "rewardflow": "RewardFlow", "rloo": "RLOO",
         "rewardflow_official": "RewardFlow (official preset)", "gigpo_official": "GiGPO (official preset)",
         "graphgpo": "GraphGPO", "g2po": "G2PO",
         "grpo+expreplay": "GRPO + ExpReplay", "grpo+crps": "GRPO + CRPS", "rewardflow+crps": "RewardFlow + CRPS",
         "rising": "RRO + DPO", "fixed": "fixed-5 + DPO", "sft": "π_SFT", "rl": "RewardFlow (demo defaults)"}
CREDIT_CLAIM = [("rewardflow", "gigpo"), ("gigpo", "grpo"), ("rewardflow", "grpo")]
OFFICIAL_CLAIM = [("rewardflow_official", "gigpo_official"), ("gigpo_official", "grpo"), ("rewardflow_official", "grpo")]
# what the two graph estimators' papers claim against the baselines they share with RewardFlow's (issue 72):
# GraphGPO (arXiv 2605.26684) over GiGPO and GRPO on Sokoban, G2PO (arXiv 2606.22995) over GRPO
GRAPH_CLAIMS = [("GraphGPO paper", [("graphgpo", "gigpo"), ("graphgpo", "grpo")]),
                ("G2PO paper", [("g2po", "grpo")])]
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

    def run_of(arm, r, source):
        return Run(arm, r["seed"], r["final_eval_success"], r.get("initial_eval_success"), r.get("sft_sha256"), source,
                   {k: r.get(k) for k in ("mean_train_success", "mean_all_zero_frac", "mean_entropy", "rl_minutes",
                                          "env_steps", "resumed_at_step", "diagnostics", "curves")})

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
            runs.append(run_of(arm, stored["record"], rel(path)))
    else:  # an older summary that still holds its runs (today's keep an index of their records: learning.run_index)
        for arm, rs in summary["runs"].items():
            if rs and "record" in rs[0]:
                raise SystemExit(f"error: {rel(RESULTS / stem)}.json indexes its runs in {rel(records)}, "
                                 "which is missing")
            runs += [run_of(arm, r, f"{rel(RESULTS / stem)}.json") for r in rs]
    for arm, folder in borrow.items():
        for path in sorted((RESULTS / folder).glob(f"{arm}_s*.json")):
            runs.append(run_of(arm, read_json(path)["record"], rel(path)))
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

    def values(self, arm: str) -> dict:
        """seed -> the arm's value (π_SFT: the held-out value of that seed's π_SFT)."""
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

    def arm(self, arm: str) -> stats.Summary:
        vals = self.values(arm)
        return stats.summarize([vals[s] for s in sorted(vals)])

    def pair(self, a: str, b: str) -> stats.Paired:
        """a − b over the seeds both have, leaving out a seed whose two runs name different π_SFT weights."""
        va, vb = self.values(a), self.values(b)
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

    def verdicts(self) -> list[tuple[str, str, list]]:
        """(label, verdict, [(a, b, Paired)]) for the claim, and for each extra claim whose arms exist."""
        out = []
        for label, pairs in [("", self.spec.claims), *self.spec.extra_claims]:
            present = self.claim_pairs(pairs)
            if label and len(present) < len(pairs):
                continue
            ps = [(a, b, self.pair(a, b)) for a, b in present]
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


def records_line(check: Check) -> str:
    folders = sorted({r.source.rsplit("/", 1)[0] + "/" if r.source.endswith(".json") and "_runs/" in r.source
                      else r.source for r in check.runs})
    return ("- Records: " + ", ".join(f"`{f}`" for f in folders) + f" ({len(check.runs)} runs); summary "
            f"`benchmarks/results/{check.spec.stem}.json`.")


def results_section(check: Check) -> list[str]:
    rows = []
    for arm in [*check.arms, "sft"]:
        s = check.arm(arm)
        if s.mean is None:
            continue
        per_seed = ", ".join(f3(v) for v in s.values)
        if arm == "sft" and check.sft_value() is not None:  # one π_SFT, evaluated once (greedy): no spread
            rows.append([name(arm), "every run", f3(s.mean), "–", "–", "–", "the same in every run"])
            continue
        rows.append([name(arm), f"{s.n}" + (f" of {len(check.expected_seeds)}" if check.coverage(arm) else ""),
                     f3(s.mean), f3(s.sd), interval(s.boot), interval(s.t) if s.n <= stats.SMALL_N else "–",
                     per_seed])
    return [f"Metric: {metric_text(check)}. Seeds in seed order.", "",
            *table(["arm", "seeds", "mean", "sd (ddof 1)", "95% bootstrap", "95% t", "per seed"], rows)]


def paired_section(check: Check) -> list[str]:
    claimed = {(a, b) for _, pairs in [("", check.spec.claims), *check.spec.extra_claims] for a, b in pairs}
    comparisons = []
    for i, a in enumerate(check.arms):
        for b in check.arms[i + 1:]:  # a claimed pair as claimed, else the later arm minus the earlier
            comparisons.append((a, b) if (a, b) in claimed else (b, a))
    comparisons += [(a, "sft") for a in check.arms]
    rows = []
    for a, b in comparisons:
        p = check.pair(a, b)
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


def verdict_lines(check: Check) -> list[str]:
    out = []
    for label, verdict, ps in check.verdicts():
        detail = "; ".join(f"{name(a)} > {name(b)}: {pair_word(p)} ({p.n} seeds)" for a, b, p in ps)
        out.append(f"- {'' if not label else label + ': '}**{verdict}** ({detail})")
    return out


def per_run_section(check: Check) -> list[str]:
    kind = check.spec.kind
    rows = []
    if kind == "learning":
        header = ["arm", "seed", "π_SFT", "after RL", "gain", "train success", "all-fail groups", "RL min",
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
    lines += [f"Claim tested: {short} ({source}). Reproduced:", "", *verdict_lines(check), "",
              "## Setting", "", *settings_lines(check),
              f"- π_SFT identity: {check.sft_identity()}.",
              f"- Machine (summary): {machine_text(m)}." if m else "- Machine: per run, below.",
              records_line(check), "",
              "## Results", "", *results_section(check), "",
              "## Paired differences", "", *paired_section(check), "",
              "## Per run", "", *per_run_section(check), ""]
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

AUDIT_SETTINGS = ["sokoban6", "sokoban7", "household", "webshop", "sql"]  # table order; a setting shows once its summary exists
AUDIT_METRICS = {"spearman": "Spearman", "sign": "sign agreement", "auc": "AUC", "within_spearman": "Spearman within",
                 "within_sign": "sign within", "within_auc": "AUC within"}
AUDIT_CLAIMS = {"accuracy": [("", CREDIT_CLAIM), *GRAPH_CLAIMS],
                "race": [("", CREDIT_CLAIM), ("CRPS", CRPS_CLAIM), *GRAPH_CLAIMS]}


@dataclass
class Audit:
    """One setting's audit summary: per-seed values of every part, arms as recorded."""

    setting: str
    summary: dict

    @property
    def page(self) -> str:
        return f"credit-audit-{self.setting}.md"

    @property
    def policies(self) -> list[str]:
        return list(self.summary["accuracy"])

    @property
    def measured(self) -> bool:
        """Whether advantage accuracy was run (coverage-only settings, such as SQL, have none)."""
        return bool(self.policies) and "accuracy" in self.summary["accuracy"][self.policies[0]][0]

    @property
    def arms(self) -> list[str]:
        return _ordered(self.summary["accuracy"][self.policies[0]][0]["accuracy"]["arms"] if self.measured else {})

    @property
    def race_arms(self) -> list[str]:
        return _ordered(self.summary["race"])

    def accuracy(self, arm: str, metric: str = "spearman", policy: str | None = None) -> dict:
        """seed -> the arm's metric (one policy, or the mean over every policy that measured it)."""
        per: dict = {}
        for label in [policy] if policy else self.policies:
            for s in self.summary["accuracy"][label]:
                value = s["accuracy"]["arms"].get(arm, {}).get(metric)
                if value is not None and value == value:
                    per.setdefault(s["seed"], []).append(value)
        return {seed: sum(v) / len(v) for seed, v in per.items()}

    def race(self, arm: str, key: str = "auc") -> dict:
        return {r["seed"]: r[key] for r in self.summary["race"].get(arm, [])}

    def verdicts(self, part: str) -> list[tuple[str, str, list]]:
        values = self.accuracy if part == "accuracy" else self.race
        have = self.arms if part == "accuracy" else self.race_arms
        out = []
        for label, pairs in AUDIT_CLAIMS[part]:
            if not all(a in have and b in have for a, b in pairs):
                continue
            ps = [(a, b, stats.paired(values(a), values(b))) for a, b in pairs]
            out.append((label, stats.ordering_verdict([p for _, _, p in ps]), ps))
        return out


def _ordered(arms) -> list[str]:
    known = list(NAMES)
    return sorted(arms, key=lambda a: (known.index(a) if a in known else len(known), a))


def load_audits() -> list[Audit]:
    return [Audit(s, read_json(RESULTS / f"credit_audit_{s}.json")) for s in AUDIT_SETTINGS
            if (RESULTS / f"credit_audit_{s}.json").exists()]


def _summary_cell(values: dict) -> str:
    return arm_cell(stats.summarize([values[k] for k in sorted(values)]))


def _diff_cell(p: stats.Paired) -> str:
    return f"{signed(p.summary.mean)} {interval(p.summary.boot, sign=True)}" if p.n >= 2 else "–"


def audit_verdict_text(a: Audit, part: str) -> str:
    texts = []
    for label, verdict, ps in a.verdicts(part):
        detail = "; ".join(f"{diff_label(x, y)} {_diff_cell(p)} ({p.wins} of {p.n} seeds above)" for x, y, p in ps)
        texts.append((f"{label}: " if label else "") + f"**{verdict}** ({detail})")
    return "; ".join(texts) or "not tested"


def audit_settings_lines(a: Audit) -> list[str]:
    s, st = a.summary, a.summary["settings"]
    opts = ", ".join(f"{k}={v}" for k, v in s["options"].items()) or "defaults"
    lines = [f"- Env `{s['env']}` ({opts}); parts run: {', '.join(s['parts'])}; the reward is success (1 at the end "
             "of a successful episode, 0 elsewhere).",
             f"- Behaviour policies: the env's expert mixed with uniform admissible actions at {', '.join(a.policies)}.",
             *([f"- Free-text states (no admissible actions) choose among a menu kept per state: "
                f"{s['menu']['size']} actions sampled from `{s['menu']['model']}` (sha256 {s['menu']['sha256'][:12]}…, "
                f"{', '.join(s['menu']['overrides']) or 'its own settings'}) plus the expert's "
                "(`creditflow audit --model`)" + (f"; that model is not committed: `{s['menu']['build']}` rebuilds it"
                                                   if s["menu"].get("build") else "") + "."] if s.get("menu") else []),
             f"- Coverage{' and accuracy' if a.measured else ''}: {st['seeds']} seeds × {st['tasks']} tasks × "
             f"{st['group_size']} rollouts" + (f"; A^π of every step from {st['m']} + {st['m']} Monte-Carlo "
                                                "continuations of the restored state." if a.measured else ".")]
    if s["race"]:
        lines.append(f"- Race: {st['race_seeds']} seeds per arm; a pool of {st['race_pool']} tasks, {st['race_groups']} "
                     f"tasks × {st['group_size']} rollouts an iteration, {st['race_episodes']} training episodes, "
                     f"PPO-clip (NumPy, {st['race_epochs']} epochs, clip 0.2) with lr {st['race_lr']:g} on a tabular "
                     f"softmax; greedy success on the pool every {st['race_eval_every']} iterations.")
    if s["rro"]:
        lines.append(f"- RRO pairs: at every state of one rollout per task, N = N_max = {st['rro_candidates']}, "
                     f"process rewards from m = {st['rro_m']} continuations, each pair judged by {st['rro_truth_m']} "
                     "more per action.")
    lines += [f"- Machine: {machine_text(s.get('machine'))}." + (f" {s['note']}" if s.get("note") else ""),
              f"- Records: `{s['records']}`; summary `benchmarks/results/credit_audit_{a.setting}.json` "
              "(`benchmarks/credit_audit.py`)."]
    return lines


def audit_page(a: Audit) -> str:
    """A credit audit's results page: the claims' verdicts, the setting, then one section per part it ran."""
    s = a.summary
    lines = [f"# Credit audit: {s['title']}", "",
             f"<!-- generated by benchmarks/report.py from benchmarks/results/credit_audit_{a.setting}.json -->", "",
             "What the estimators' credit is worth against the true advantage A^π of a fixed policy, and how fast each "
             "trains a tabular policy with no LM in the way ([the audit](../audit.md)).", ""]
    if a.measured:
        lines += [f"Claim tested: {CLAIMS['credit'][0]} ({CLAIMS['credit'][1]}), as closeness to A^π "
                  "(Spearman, per seed the mean over the policies): " + audit_verdict_text(a, "accuracy") + ".", ""]
    if s["race"]:
        lines += ["Race (area under the greedy success curve): " + audit_verdict_text(a, "race") + ".", ""]
    lines += ["## Setting", "", *audit_settings_lines(a), ""]
    first = s["accuracy"][a.policies[0]][0] if a.policies else {}
    if "coverage" in first:
        lines += _audit_coverage(a)
    if "accuracy" in first:
        lines += _audit_accuracy(a)
    if s["race"]:
        lines += _audit_race(a)
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
    for label in a.policies:
        seeds = s["accuracy"][label]
        cov = [x["coverage"] for x in seeds]
        rows.append([label, _summary_cell({x["seed"]: x["success"] for x in seeds}),
                     _summary_cell({x["seed"]: c["shared"] for x, c in zip(seeds, cov)}),
                     _summary_cell({x["seed"]: c["mixed_groups"] for x, c in zip(seeds, cov)}),
                     _summary_cell({x["seed"]: c["path_to_success"] for x, c in zip(seeds, cov)}),
                     "; ".join(f"{name(n)} {f3(sum(c['at_trajectory_level'][n] for c in cov) / len(cov))}"
                               for n in _ordered(cov[0]["at_trajectory_level"]))])
    lines += table(["policy", "success", "steps sharing a state", "mixed groups", "steps with a path to success",
                    "steps at the trajectory-level value (mean)"], rows) + [""]
    for label in a.policies:  # the reading `creditflow audit` prints, from the same pooled coverage
        lines.append(f"- Reading ({label}): {reading(pooled_coverage(s['accuracy'][label]))}")
    lines.append("")
    return lines


def _audit_accuracy(a: Audit) -> list[str]:
    """The accuracy section: each arm's credit against A^π per policy, and the paired differences."""
    s = a.summary
    lines = ["## Advantage accuracy", "",
              "Mean over seeds [95% bootstrap]. Sign agreement and AUC count steps whose |A^π| exceeds 2 standard "
              "errors; \"within\" compares steps of one group that share a state.", ""]
    for label in a.policies:
        seeds = s["accuracy"][label]
        steps = sum(x["accuracy"]["steps"] for x in seeds)
        res = sum(x["accuracy"]["resolved"] for x in seeds)
        lines += [f"### {label}", "", f"{len(seeds)} seeds, {steps} steps, {res} with |A^π| > 2 SE.", ""]
        rows = [[name(arm)] + [_summary_cell(a.accuracy(arm, m, label)) for m in AUDIT_METRICS] for arm in a.arms]
        lines += table(["arm", *AUDIT_METRICS.values()], rows) + [""]
    lines += ["### Paired differences, every policy", "",
              "Per seed, each metric is the mean over the policies; differences a − b seed by seed.", ""]
    rows = []
    for i, x in enumerate(a.arms):
        for y in a.arms[i + 1:]:
            px, py = (x, y) if (x, y) in CREDIT_CLAIM or (y, x) not in CREDIT_CLAIM else (y, x)
            cells = []
            for m in ("spearman", "sign", "auc", "within_spearman"):
                p = stats.paired(a.accuracy(px, m), a.accuracy(py, m))
                cells.append(_diff_cell(p) + (" sep." if p.separated else ""))
            rows.append([diff_label(px, py), *cells])
    lines += table(["a − b", "Spearman", "sign agreement", "AUC", "Spearman within"], rows) + [""]
    return lines


def _audit_race(a: Audit) -> list[str]:
    """The learning race: each arm's success curve on the task pool, and the paired differences."""
    s = a.summary
    lines = ["## Learning race", "", "Greedy success on the task pool; AUC = mean of the curve after its start.", ""]
    rows = []
    for arm in a.race_arms:
        runs = s["race"][arm]
        reached = sorted(r["episodes_to_half"] for r in runs if r["episodes_to_half"] is not None)
        med = reached[len(reached) // 2] if reached else None
        rows.append([name(arm), len(runs), _summary_cell(a.race(arm)), _summary_cell(a.race(arm, "final")),
                     f"{len(reached)} of {len(runs)}", "–" if med is None else str(med)])
    lines += table(["arm", "seeds", "AUC", "final success", "reached 50%", "episodes to 50% (median of those)"],
                   rows) + [""]
    rows = []
    claimed = {p for _, pairs in AUDIT_CLAIMS["race"] for p in pairs}
    for i, x in enumerate(a.race_arms):
        for y in a.race_arms[i + 1:]:
            px, py = (x, y) if (x, y) in claimed or (y, x) not in claimed else (y, x)
            p = stats.paired(a.race(px), a.race(py))
            rows.append([diff_label(px, py), p.n, _diff_cell(p), f"{p.wins} of {p.n}",
                         {1: "yes, above", -1: "yes, below", 0: "no"}[p.separated],
                         "claimed: above" if (px, py) in claimed else ""])
    lines += table(["a − b (AUC)", "seeds", "mean [95% bootstrap]", "a above b on", "separated", "claim"], rows)
    lines.append("")
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


def audit_rows(audits: list[Audit], link_prefix: str) -> list[list[str]]:
    rows = []
    for a in audits:
        title = f"[Credit audit: {a.summary['title']}]({link_prefix}{a.page})"
        if a.measured:
            arms = "; ".join(f"{name(x)} {_summary_cell(a.accuracy(x))}" for x in a.arms)
            rows.append([title + ", accuracy", a.summary["title"] + f"; ε-expert at {', '.join(a.policies)}", arms,
                         "Spearman of the credit with Monte-Carlo A^π, per seed the mean over the policies",
                         "– (no LM: a fixed ε-expert policy)", CLAIMS["credit"][0] + " (closer to A^π)",
                         audit_verdict_text(a, "accuracy")])
        if a.summary["race"]:
            arms = "; ".join(f"{name(x)} {_summary_cell(a.race(x))}" for x in a.race_arms)
            race_title = f"[Credit audit: {a.summary['title']}, race]({link_prefix}{a.page}#learning-race)"
            rows.append([race_title, a.summary["title"] + "; tabular softmax from zero, "
                         f"{a.summary['settings']['race_episodes']} episodes", arms,
                         "area under the greedy success curve on the task pool",
                         "– (no LM: a tabular policy)", CLAIMS["credit"][0] + "; " + CLAIMS["crps"][0],
                         audit_verdict_text(a, "race")])
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
        verdicts = "; ".join((f"{label}: " if label else "") + v + (
            "" if v in ("yes", "not tested") or len(ps) < 2 else
            " (" + ", ".join(f"{name(a)} > {name(b)}: {pair_word(p)}" for a, b, p in ps) + ")")
            for label, v, ps in c.verdicts())
        title = f"[{c.spec.title}]({link_prefix}{c.page})" + (" (superseded)" if c.spec.status else "")
        rows.append([title, c.spec.setting, arms, metric_text(c), sft_text, CLAIMS[c.spec.claim][0], verdicts])
    rows += audit_rows(audits or [], link_prefix)
    return [*table(["check", "setting", "arms: mean [95% bootstrap], t [95% t-interval]", "metric", "π_SFT",
                    "claim", "reproduced"], rows), "",
            "Mean over seeds; [ ]: 95% percentile bootstrap; t [ ]: 95% t-interval, given where n ≤ 5 "
            "(benchmarks/stats.py). Reproduced: yes = every claimed pair's seed-by-seed difference is separated "
            "from zero in the claim's direction; in means only = right sign, not separated; reversed = some "
            f"pair separated the other way; no = otherwise. Generated by `benchmarks/report.py` from the records; "
            f"each check's page has its settings, per-seed values and paired differences ([results]({link_prefix}index.md))."]


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


def index_page(checks: list[Check], audits: list | None = None) -> str:
    lines = ["# Results", "",
             "<!-- generated by benchmarks/report.py; run it after adding records, `make report` -->", "",
             "Every learning check creditflow has run, one page each, generated from the committed records "
             "(`benchmarks/results/`) by `benchmarks/report.py`: no number on these pages is typed by hand. "
             "All ran with the tiny from-scratch policy (0.9M parameters) on CPUs, some runs on lent GPUs; "
             "they check that the methods run and learn as the papers describe at that scale, not the papers' "
             "numbers.", "", *results_table(checks, "", audits), "", *pretrained_section(),
             "Performance: [performance](performance.md).", "",
             STATS_TEXT.strip(), ""]
    return "\n".join(lines) + "\n"


def readme_blocks(checks: list[Check], audits: list | None = None) -> dict[str, list[str]]:
    return {"results": results_table(checks, "docs/results/", audits), "performance": performance_table()}


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
    out[DOCS / "index.md"] = index_page(checks, audits).encode()
    out[DOCS / "performance.md"] = performance_page().encode()
    readme = README.read_text(encoding="utf-8")
    for key, body in readme_blocks(checks, audits).items():
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
