"""The prediction table (issue 87): does the audit's order of the estimators predict the LM's?"""

from __future__ import annotations

from benchmarks import stats
from benchmarks.report.paths import slug
from benchmarks.report.races import IN_PROGRESS, LMRace
from benchmarks.report.text import diff_label, pair_word, signed, table

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
# a cell whose audit policies resolve too few steps to rank anything (issue 85: never averaged into a verdict)
NOT_RESOLVED = "not resolved"
LM_LEVELS = {"pool": "LM race, pool AUC", "race_new": "LM race, new levels after it",
             "curve": "100-step check, training curve", "held_out": "100-step check, held-out success"}


def prediction_sources(race: LMRace, audits: dict, checks: dict) -> dict:
    """Column -> ``f(a, b) -> Paired`` (None: no record; :data:`NOT_RESOLVED`: an audit whose policies resolve too
    few steps) for one race setting; an audit column pools only its resolved policies."""
    spec = PREDICTIONS.get(race.setting, {})
    audit = audits.get(spec.get("audit"))
    check = checks.get(spec.get("held_out"))

    def audit_acc(policies):
        def f(a, b):
            if audit is None or not policies or not audit.measured or a not in audit.arms or b not in audit.arms:
                return None
            resolved = [p for p in policies if audit.is_resolved(p)]
            if not resolved:
                return NOT_RESOLVED
            return stats.paired(audit.accuracy(a, policies=resolved), audit.accuracy(b, policies=resolved))
        return f

    def race_pair(key):
        def f(a, b):
            if a not in race.arms or b not in race.arms:
                return None
            return IN_PROGRESS if race.in_progress else race.pair(a, b, key)
        return f

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


def _prediction_cell(p: stats.Paired | str | None) -> str:
    if p is NOT_RESOLVED:
        return "not resolved (under 50 resolved steps)"
    if p is IN_PROGRESS:
        return "in progress (the race has not ended)"
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
            both = [(x, y) for x, y in zip(cells[pred], cells[lm]) if isinstance(x, stats.Paired)
                    and isinstance(y, stats.Paired) and x.n >= 2 and y.n >= 2]
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


def prediction_cells(race: LMRace, by_audit: dict, by_check: dict, pairs=PREDICTION_PAIRS) -> dict[str, list]:
    """Column -> the cell of each pair a − b in ``pairs`` (:func:`prediction_sources`' values)."""
    return {k: [f(a, b) for a, b in pairs] for k, f in prediction_sources(race, by_audit, by_check).items()}


def race_prediction_lines(race: LMRace, audits: list, checks: list) -> list[str]:
    """An LM race page's section: per estimator pair, what the audit predicted (under the race's π_SFT and under
    the ε-expert) beside what the race found, and how often the signs agree; every level on the prediction page."""
    pairs = [(a, b) for a, b in PREDICTION_PAIRS if a in race.arms and b in race.arms]
    if not pairs:
        return []
    cells = prediction_cells(race, {a.setting: a for a in audits}, {c.spec.stem: c for c in checks}, pairs)
    shown = ["lm_audit", "eps_audit", "pool", "race_new"]
    if all(c is None for k in ("lm_audit", "eps_audit") for c in cells[k]):
        said = "No audit of these levels has a record, so nothing was predicted."
    else:
        pool = 1 + list(LM_LEVELS).index("pool")
        said = ("Against the order on the pool, over the pairs both tested: "
                + "; ".join(f"{row[0]}: {row[pool]}" for row in prediction_agreement(cells)[:2]) + ".")
    labels = {**PREDICTORS, **LM_LEVELS}
    rows = [[diff_label(a, b), *[_prediction_cell(cells[k][i]) for k in shown]] for i, (a, b) in enumerate(pairs)]
    return ["## What the audit predicted", "",
            "The credit audit of the same levels ranks the estimators by how close their credit is to A^π; a cell is "
            "the generated verdict (yes = a above b, separated; in means only = above in the mean; then the mean "
            f"difference and the seeds where a is above b). {said} Every level of evidence side by side: [does the "
            f"audit predict the LM?]({PREDICTION_PAGE}).", "",
            *table(["a − b", *(labels[k] for k in shown)], rows), ""]


def prediction_page(races: list, audits: list, checks: list) -> str:
    by_audit = {a.setting: a for a in audits}
    by_check = {c.spec.stem: c for c in checks}
    lines = ["# Does the audit predict the LM?", "",
             "<!-- generated by benchmarks/report/ from the audit, LM race and learning records it names -->", "",
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
        cells = prediction_cells(race, by_audit, by_check)
        audit, check = spec.get("audit"), spec.get("held_out")
        where = [f"[LM race](lm-race-{slug(race.setting)}.md)"]
        where.append(f"[audit](credit-audit-{audit}.md)" if audit in by_audit else f"audit `{audit}`: no record"
                     if audit else "no audit of this setting")
        where.append(f"[100-step check]({slug(check)}.md)" if check in by_check else "no 100-step check of this setting")
        rows = [[diff_label(a, b), *[_prediction_cell(cells[k][i]) for k in cells]]
                for i, (a, b) in enumerate(PREDICTION_PAIRS)]
        lines += [f"## {race.title}", "", "Records: " + ", ".join(where) + ".", "",
                  *table(["a − b", *PREDICTORS.values(), *LM_LEVELS.values()], rows), "",
                  "Does the order agree? Over the pairs both levels tested:", "",
                  *table(["predictor", *LM_LEVELS.values()], prediction_agreement(cells)), ""]
    lines += ["Statistics: [how to read these numbers](index.md#how-to-read-the-numbers)."]
    return "\n".join(lines) + "\n"
