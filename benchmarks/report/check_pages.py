"""One check's page (:func:`page`): its sections, the training curve, the per-run rows, the figure and the
hand-written narrative, rendered with Jinja over the records.
"""

from __future__ import annotations

import jinja2

from benchmarks.report import paths
from benchmarks.report.checks import Check, curve_comparable
from benchmarks.report.claims import CLAIMS
from benchmarks.report.demo import demo_sections, demo_test_section
from benchmarks.report.paths import rel
from benchmarks.report.records import override
from benchmarks.report.sections import (paired_section, records_line, results_section, run_machines_lines,
                                        settings_lines, verdict_lines)
from benchmarks.report.text import f2, f3, interval, machine_text, name, pct, reflow, separation, signed, span, table


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


def training_tasks_text(check: Check) -> str:
    """What a learning check's training tasks are: a finite set of games that repeat, or fresh procedural levels."""
    st = check.summary.get("settings", {})
    env = st.get("env") or []
    games = override(env if isinstance(env, list) else [], "env.kwargs.num_games")
    if games:
        return f"one of the env's {games} training games each, which repeat through the run"
    return "fresh levels from the training seeds (below 10⁶), a level seen before only by chance"


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
    png = paths.RESULTS / f"{check.spec.stem}.png"
    if check.spec.kind == "demo" and not check.summary.get("test_levels"):
        png = paths.RESULTS / "demo_learning_curve.png"
    if not png.exists():
        return [], {}
    target = f"img/{png.name}"
    return [f"![{check.spec.title}]({target})", "",
            f"Figure: `{rel(png)}`, written by the check's script (mean over seeds, ± the std over seeds as a band, "
            "ddof 0)."], {target: png.read_bytes()}


def render_narrative(stem: str, context: dict) -> list[str]:
    path = paths.NARRATIVE / f"{stem}.md"
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
             f"<!-- generated by benchmarks/report/ from benchmarks/results/{spec.stem}.json and its records; "
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
