"""The claims table (issue 87): one row per claim, one column per level of evidence (the README's results)."""

from __future__ import annotations

from benchmarks import stats
from benchmarks.report.audits import RACE_ARMS, policy_kind
from benchmarks.report.checks import curve_comparable
from benchmarks.report.claims import CREDIT_CLAIM, CRPS_CLAIM, GRAPH_CLAIMS, RRO_CLAIM
from benchmarks.report.prediction import PREDICTION_PAGE
from benchmarks.report.races import LM_RACE_ARMS
from benchmarks.report.text import table
from creditflow.auditing.estimators import arms as audit_arms

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
VERDICT_ORDER = ["yes", "in means only", "no", "reversed", "not resolved", "not tested", "in progress",
                 "not like for like", "not run yet", "no record yet"]


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
                    for label, pairs in _variants(variants, RACE_ARMS):  # arms whose fresh-pool runs are to come
                        if any(x in a.fresh_missing or y in a.fresh_missing for x, y in pairs):
                            out.append(_entry("not run yet", _named(f"{short}, fresh pools, tuned rates", label),
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
                out.append(_entry(race.verdict([race.pair(x, y) for x, y in pairs]),
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
                out.append(_entry(race.verdict([race.pair(x, y, "test_final") for x, y in pairs]),
                                  _named(SHORT.get(f"race:{race.setting}", race.setting), label + " after the race"
                                         if label else "after the race"), f"{prefix}{race.page}"))
    return out or "–"


PENDING = ("not run yet", "no record yet")
# the arms an audit setting without records would have: every estimator arm, and in its race GRPO + each curriculum
AUDIT_ARMS = {a.name for a in audit_arms()}


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
            "**not resolved**: too few steps with |A^π| > 2 SE (under 50) to rank anything; **in progress**: an LM "
            "race still running, no verdict drawn yet; **not run yet** / **no "
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
            f"Generated by `benchmarks/report/` from the records; the detailed table: [results]({prefix}index.md); "
            f"does the audit predict the LM? [prediction table]({prefix}{PREDICTION_PAGE})."]
