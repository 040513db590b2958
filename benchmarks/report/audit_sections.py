"""The sections of a credit audit's page, one per part: coverage, accuracy, bias apart from noise, the race on fresh
pools and the earlier one on a shared pool, RRO's pairs.
"""

from __future__ import annotations

from benchmarks import stats
from benchmarks.report.audits import AUDIT_CLAIMS, AUDIT_METRICS, RESOLVED_MIN, Audit, policy_kind, policy_text
from benchmarks.report.text import diff_cell, diff_label, f3, name, ordered, summary_cell, table


def coverage_section(a: Audit) -> list[str]:
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
        rows.append([policy_text(label), summary_cell({x["seed"]: x["success"] for x in seeds}),
                     summary_cell({x["seed"]: c["shared"] for x, c in zip(seeds, cov)}),
                     summary_cell({x["seed"]: c["mixed_groups"] for x, c in zip(seeds, cov)}),
                     summary_cell({x["seed"]: c["path_to_success"] for x, c in zip(seeds, cov)}),
                     "; ".join(f"{name(n)} {f3(sum(c['at_trajectory_level'][n] for c in cov) / len(cov))}"
                               for n in ordered(cov[0]["at_trajectory_level"]))])
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
                         f"{summary_cell({k: i['probe_success'] for k, i in enumerate(info)})}; the target reached in "
                         f"{sum(bool(i['reached']) for i in info)} of {len(info)} seeds.")
    lines.append("")
    return lines


def _claimed_pairs(arms: list[str]) -> list[tuple[str, str]]:
    out = []
    for _, pairs in AUDIT_CLAIMS["accuracy"]:
        out += [p for p in pairs if p[0] in arms and p[1] in arms and p not in out]
    return out


def accuracy_section(a: Audit) -> list[str]:
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
        rows = [[name(arm)] + [summary_cell(a.accuracy(arm, m, label)) for m in AUDIT_METRICS] for arm in a.arms]
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
                row.append(diff_cell(p) + (" sep." if p.separated else "") + ("" if a.is_resolved(label) else " n.r."))
            rows.append(row)
        lines += table(["a − b", *[policy_text(p) for p in a.measured_policies]], rows) + [""]
    return lines


def bias_section(a: Audit) -> list[str]:
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
        seen = sum(x.get("triples_seen", x["triples"]) for x in seeds)
        picked = sum(x["triples"] for x in seeds)
        resolved = sum(x["resolved"] for x in seeds)
        lines += [f"### {policy_text(label)}", "",
                  f"{len(seeds)} seeds × {seeds[0]['rounds']} groups of each task; {seen} (task, state, action) seen "
                  "in two groups or more" + (f", of which {picked} audited (a random subsample per seed)"
                                             if picked < seen else "")
                  + f", {resolved} with |A^π| > 2 SE"
                  + ("." if resolved >= RESOLVED_MIN else
                     f", under the {RESOLVED_MIN} a verdict needs: most triples' A^π is noise, so read the "
                     "correlations below as bounded by it (not resolved)."), ""]
        arms = ordered(seeds[0]["arms"])
        val = lambda arm, k: {x["seed"]: x["arms"][arm][k] for x in seeds if x["arms"][arm][k] == x["arms"][arm][k]}  # noqa: E731
        rows = [[name(arm), summary_cell(val(arm, "pearson")), summary_cell(val(arm, "spearman")),
                 summary_cell(val(arm, "noise_share")),
                 summary_cell(a.accuracy(arm, "spearman", label)) if a.has_accuracy(label) else "–"] for arm in arms]
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
        rows.append([name(arm), "–" if lr is None else f"{lr:g}", len(runs), summary_cell(runs),
                     summary_cell(a.race(arm, "final", rate)), f"{len(reached)} of {len(runs)}",
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
            rows.append([diff_label(px, py), p.n, diff_cell(p), f"{p.wins} of {p.n}",
                         {1: "yes, above", -1: "yes, below", 0: "no"}[p.separated],
                         "claimed: above" if (px, py) in claimed else ""])
    return table(["a − b (AUC)", "seeds", "mean [95% bootstrap]", "a above b on", "separated", "claim"], rows) + [""]


def race_section(a: Audit) -> list[str]:
    """The fair race: each arm at its own rate and at the common one, its AUC at every rate of the grid."""
    st = a.summary["settings"]
    lines = ["## Learning race", "",
             "Greedy success on each seed's own pool; AUC = mean of the curve after its start. Each arm's own rate is "
             "the best mean AUC on the tuning seeds; the reported seeds never entered that choice.", "",
             *([f"Not run yet on fresh pools: {', '.join(name(x) for x in a.fresh_missing)} (the race is committed "
                "arm by arm, each once all its tuning and reported seeds ran).", ""] if a.fresh_missing else []),
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


def shared_race_section(a: Audit) -> list[str]:
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
        rows.append([name(arm), len(runs), summary_cell(a.race(arm, rate="shared")),
                     summary_cell(a.race(arm, "final", "shared")), f"{len(reached)} of {len(runs)}",
                     "–" if med is None else str(med)])
    lines += table(["arm", "seeds", "AUC", "final success", "reached 50%", "episodes to 50% (median of those)"],
                   rows) + [""]
    lines += _race_pairs(a, "shared")
    return lines


def rro_section(a: Audit) -> list[str]:
    """RRO's pairs against Q^π, per policy and sampler."""
    s = a.summary
    lines = ["## RRO's pairs against Q^π", "",
              "Accuracy: the share of resolved pairs (chosen and rejected differ, their Q^π by more than 2 standard "
              "errors) whose chosen action has the higher Q^π; correct pairs per sampled candidate.", ""]
    rows = []
    for label, seeds in s["rro"].items():
        for smp in ("rising", "fixed"):
            val = lambda k: {x["seed"]: x[smp][k] for x in seeds if x[smp][k] == x[smp][k]}  # noqa: E731
            rows.append([label, "RRO (rising)" if smp == "rising" else "fixed-5", summary_cell(val("accuracy")),
                         summary_cell(val("samples_per_step")), summary_cell(val("correct_per_sample")),
                         sum(x[smp]["pairs"] for x in seeds), sum(x[smp]["resolved"] for x in seeds)])
        for k in ("accuracy", "correct_per_sample"):
            p = stats.paired({x["seed"]: x["rising"][k] for x in seeds if x["rising"][k] == x["rising"][k]},
                             {x["seed"]: x["fixed"][k] for x in seeds if x["fixed"][k] == x["fixed"][k]})
            rows.append([label, f"rising − fixed, {k.replace('_', ' ')}", diff_cell(p) +
                         (" (separated)" if p.separated else ""), "", "", "", ""])
    lines += table(["policy", "sampler", "pair accuracy", "samples / step", "correct pairs / sample", "pairs",
                    "resolved"], rows) + [""]
    return lines
