"""The demo's sections: every ``benchmarks/demo_seeds.py`` record paired by seed with the defaults, and the
validation and test gains of the same runs.
"""

from __future__ import annotations

from dataclasses import dataclass

from benchmarks import stats
from benchmarks.report import paths
from benchmarks.report.checks import Check
from benchmarks.report.paths import read_json
from benchmarks.report.text import f3, interval, machine_text, seeds_text, signed, table

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
        summary = read_json(paths.RESULTS / f"{stem}.json")
        runs = {}
        for folder in summary.get("sources", [f"{stem}_runs"]):
            for path in sorted((paths.RESULTS / folder).glob("s*.json")):
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
    demo = read_json(paths.RESULTS / "demo_machine.json")
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
