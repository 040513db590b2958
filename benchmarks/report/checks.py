"""A check as its runs: per-arm summaries, paired differences on the same π_SFT, the claim's verdicts on the
held-out metric and on the training curve; :func:`load_check` reads one from its :class:`Spec`.
"""

from __future__ import annotations

from dataclasses import dataclass

from benchmarks import stats
from benchmarks.report import paths
from benchmarks.report.claims import NAMES, Spec
from benchmarks.report.paths import read_json, slug
from benchmarks.report.records import DPO_ARMS, Run, demo_runs, dpo_runs, learning_runs, override, rro_runs
from benchmarks.report.text import f3


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
        value = st.get("eval_episodes") or override(st.get("overrides", []), "rl.eval_episodes") or \
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
    summary = read_json(paths.RESULTS / f"{spec.stem}.json")
    if spec.kind == "learning":
        runs = learning_runs(spec.stem, summary, spec.borrow)
        if spec.diagnostics_file:
            old = read_json(paths.RESULTS / spec.diagnostics_file)["runs"]
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


CURRICULUM_ARMS = ("grpo+crps", "grpo+expreplay", "rewardflow+crps")


def curve_comparable(check: Check) -> bool:
    """False where a curriculum arm's training rollouts include replay groups: they start from stored states near a
    success, so that arm's training success is not the fresh-task success of the other arms."""
    return not any(a in CURRICULUM_ARMS for a in check.arms)
