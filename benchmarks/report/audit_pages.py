"""A credit audit's page: the verdicts per behaviour policy, the setting, then one section per part
(:mod:`benchmarks.report.audit_sections`).
"""

from __future__ import annotations

from benchmarks.report.audit_sections import (accuracy_section, bias_section, coverage_section, race_section,
                                              rro_section, shared_race_section)
from benchmarks.report.audits import AUDIT_KINDS, KIND_NOTES, RESOLVED_MIN, Audit, policy_kind, policy_text
from benchmarks.report.claims import CLAIMS
from benchmarks.report.text import diff_cell, diff_label, machine_text, name, ordered


def _verdicts_detail(verdicts) -> str:
    texts = []
    for label, verdict, ps in verdicts:
        detail = "; ".join(f"{diff_label(x, y)} {diff_cell(p)} ({p.wins} of {p.n} seeds above)" for x, y, p in ps)
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
    return ", ".join(f"{name(arm)} {rates[arm]:g}" for arm in ordered(rates))


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
             + (f" (M = {s['fair_m']} for the policies other than the ε-expert"
                + (f", a random {s['fair_subsample']} steps of each seed audited" if s.get("fair_subsample") else "")
                + "".join(f"; {n} seeds under {policy_text(p)}, raised from {st['seeds']} by its count of resolved "
                          "steps" for p, n in (s.get("fair_seeds") or {}).items())
                + ")" if s.get("fair_m") else "") + "."]
    for label, run in (s.get("lm_runs") or {}).items():
        seeds = s["accuracy"].get(label, [])
        secs = sum(x["seconds"] for x in seeds)
        audited = sum(x["accuracy"].get("audited", x["accuracy"]["steps"]) for x in seeds if "accuracy" in x)
        steps = sum(x["accuracy"]["steps"] for x in seeds if "accuracy" in x)
        lines.append(f"- The LM policy (`{label}`): `{run.get('model')}` ("
                     + (f"weights' sha256 {run['sha256'][:12]}; " if run.get("sha256") else "")
                     + f"{', '.join(run.get('overrides') or [])}"
                     f"{'; env ' + ', '.join(f'{k}={v}' for k, v in (run.get('options') or {}).items()) if run.get('options') else ''}"
                     f"), every action sampled from it; a random {run.get('subsample')} steps per seed audited with "
                     f"M = {run.get('m')}: {audited} of {steps} steps over {len(seeds)} seeds, "
                     f"{secs / 3600:.2f} CPU-hours of wall time (one thread a process).")
    if s.get("bias"):
        first = next(iter(s["bias"].values()))[0]
        lines.append(f"- Bias apart from noise: {first['rounds']} groups of every task per seed, the same tasks as "
                     "accuracy; A^π per distinct (task, state, step, action)"
                     + (f" (of the steps of {st['bias_subsample']} random triples seen in two groups or more, per "
                        "seed)" if st.get("bias_subsample") else "")
                     + ".")
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
                      "<!-- generated by benchmarks/report/: this setting has no record yet -->", "",
                      "No record yet. The benchmark runs it: `python -m benchmarks.credit_audit --setting "
                      f"{a.setting}` (its LM policy needs the setting's π_SFT; docs/audit.md says how to build it).",
                      ""]) + "\n"


def audit_page(a: Audit) -> str:
    """A credit audit's results page: the verdicts per behaviour policy, the setting, then one section per part."""
    if a.summary.get("missing"):
        return audit_missing_page(a)
    s = a.summary
    lines = [f"# Credit audit: {s['title']}", "",
             f"<!-- generated by benchmarks/report/ from benchmarks/results/credit_audit_{a.setting}.json -->", "",
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
        lines += coverage_section(a)
    if a.measured:
        lines += accuracy_section(a)
    if s.get("bias"):
        lines += bias_section(a)
    if a.fresh:
        lines += race_section(a)
    elif "race" in s.get("parts", ()):  # the cells that link here say "no record yet"; so does the page
        lines += ["## Learning race", "", "No record yet of the race on a fresh pool per seed with each arm's rate "
                  "tuned on other seeds (issue 85); `benchmarks/credit_audit.py --parts race` runs it. The earlier "
                  "race, one pool shared by every seed at lr 1, is below.", ""]
    if s.get("race"):
        lines += shared_race_section(a)
    if s["rro"]:
        lines += rro_section(a)
    lines += ["Statistics: [how to read these numbers](index.md#how-to-read-the-numbers)."]
    return "\n".join(lines) + "\n"
