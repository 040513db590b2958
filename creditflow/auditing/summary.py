"""The audit summary's issue-85 lines: the race at each arm's own learning rate, bias apart from noise, and one
verdict per (setting, behaviour policy), with "not resolved" where a policy's steps give too little signal.

:func:`creditflow.auditing.run.summary_lines` prints these after its tables (:func:`fair_lines`). A verdict
names its env and its behaviour policy and is never pooled over policies: a cell whose Monte Carlo resolves fewer
than :data:`~creditflow.auditing.run.RESOLVED_MIN` steps (|Â| > 2 SE, summed over its seeds) says "not
resolved" and ranks nothing.
"""

from __future__ import annotations

from itertools import combinations

import numpy as np

from creditflow.auditing.metrics import bootstrap_interval

RESOLVED_MIN = 50


def _mean_ci(values) -> str:
    v = [x for x in values if x is not None and x == x]
    if not v:
        return "–"
    ci = bootstrap_interval(v)
    return f"{np.mean(v):.3f}" + (f" [{ci[0]:.3f}, {ci[1]:.3f}]" if ci else "")


MIN_SEEDS = 5  # fewer seeds than this separate nothing in a verdict (a bootstrap of 2-4 values is no interval)


def separated(a: list, b: list) -> tuple[float | None, int]:
    """Mean of a − b over the seeds both have, and +1 / −1 where its 95% bootstrap interval excludes 0 above /
    below (0 otherwise, and with fewer than :data:`MIN_SEEDS` seeds)."""
    d = [x - y for x, y in zip(a, b) if x is not None and y is not None and x == x and y == y]
    if not d:
        return None, 0
    if len(d) < MIN_SEEDS:
        return float(np.mean(d)), 0
    ci = bootstrap_interval(d)
    if not ci or ci[0] <= 0 <= ci[1]:
        return float(np.mean(d)), 0
    return float(np.mean(d)), 1 if ci[0] > 0 else -1


def diff_text(a: list, b: list) -> str:
    """a − b seed by seed as text: the mean, its bootstrap interval, and * where the interval excludes 0."""
    d = [x - y for x, y in zip(a, b) if x is not None and y is not None and x == x and y == y]
    if not d:
        return "–"
    ci = bootstrap_interval(d)
    sep = "" if not ci or ci[0] <= 0 <= ci[1] else " *"
    return f"{np.mean(d):+.3f}" + (f" [{ci[0]:+.3f}, {ci[1]:+.3f}]" if ci else "") + sep


# ----------------------------------------------------------------------------------------------------------
# the race: runs per learning rate
# ----------------------------------------------------------------------------------------------------------


def common_rate(record: dict) -> float:
    return float(record.get("settings", {}).get("race_lr", 1.0))


def runs_at(runs: list, lr: float, default: float) -> list:
    """The runs at learning rate ``lr`` (a run recorded before rates were (issue 85) ran at ``default``), by seed."""
    return sorted((r for r in runs if float(r.get("lr", default)) == float(lr)), key=lambda r: r["seed"])


def race_common(record: dict) -> dict:
    """arm -> its reported runs at the common rate."""
    lr = common_rate(record)
    return {arm: runs_at(runs, lr, lr) for arm, runs in record["race"].items()}


def race_own(record: dict) -> dict:
    """arm -> (its own rate, its reported runs there), for the arms the tuning seeds gave a rate."""
    lr = common_rate(record)
    return {arm: (rate, runs_at(record["race"].get(arm, []), rate, lr))
            for arm, rate in (record.get("race_rates") or {}).items()}


def own_rate_lines(record: dict) -> list[str]:
    own = race_own(record)
    if not own:
        return []
    tuning = record.get("race_tuning") or {}
    n_tune = max((len({r["seed"] for r in v}) for v in tuning.values()), default=0)
    grid = ", ".join(f"{x:g}" for x in record["settings"].get("race_lrs", ()))
    out = [f"race at each arm's own learning rate (the best mean AUC on {n_tune} tuning seeds, their pools apart "
           f"from the reported seeds', over {grid}):"]
    for arm, (rate, runs) in own.items():
        out.append(f"  {arm} (lr {rate:g}, {len(runs)} seeds): AUC {_mean_ci([r['auc'] for r in runs])}; final "
                   f"{_mean_ci([r['final'] for r in runs])}")
    names = list(own)
    if len(names) > 1:
        out.append("  paired differences of AUC at own rates, a − b (* : 95% interval excludes 0):")
        for a, b in combinations(names, 2):
            ra, rb = ({r["seed"]: r["auc"] for r in own[x][1]} for x in (a, b))
            both = sorted(set(ra) & set(rb))
            out.append(f"    {a} − {b}: " + diff_text([ra[s] for s in both], [rb[s] for s in both]))
    return out


# ----------------------------------------------------------------------------------------------------------
# bias apart from noise
# ----------------------------------------------------------------------------------------------------------


def bias_lines(record: dict) -> list[str]:
    out = []
    for label, seeds in (record.get("bias") or {}).items():
        if not seeds:
            continue
        names = list(seeds[0]["arms"])
        out.append(f"bias apart from noise ({label}, {len(seeds)} seeds, {seeds[0]['rounds']} groups of each task; "
                   f"{sum(s['triples'] for s in seeds)} (task, state, action) seen in two groups or more, "
                   f"{sum(s['resolved'] for s in seeds)} with |A| > 2 SE):")
        for n in names:
            out.append(f"  {n}: E[credit] vs A^π pearson {_mean_ci([s['arms'][n]['pearson'] for s in seeds])}; "
                       f"spearman {_mean_ci([s['arms'][n]['spearman'] for s in seeds])}; noise share "
                       f"{_mean_ci([s['arms'][n]['noise_share'] for s in seeds])}")
    return out


# ----------------------------------------------------------------------------------------------------------
# verdicts per (setting, policy)
# ----------------------------------------------------------------------------------------------------------


def resolved_steps(seeds: list) -> int:
    return int(sum(s["accuracy"]["resolved"] for s in seeds if "accuracy" in s))


def accuracy_verdict(env: str, label: str, seeds: list, minimum: int = RESOLVED_MIN) -> str:
    """One line: the arms ordered by mean Spearman with A^π under one behaviour policy, each neighbour pair marked
    separated or not; or "not resolved" (fewer than ``minimum`` resolved steps over the seeds)."""
    res = resolved_steps(seeds)
    head = f"verdict ({env}, behaviour policy {label}, {len(seeds)} seeds, {res} steps with |A| > 2 SE)"
    if res < minimum:
        return f"{head}: not resolved (fewer than {minimum} resolved steps): it ranks nothing"
    names = list(seeds[0]["accuracy"]["arms"])
    vals = {n: [s["accuracy"]["arms"][n]["spearman"] for s in seeds] for n in names}
    means = {n: float(np.nanmean(v)) if any(x == x for x in v) else float("-inf") for n, v in vals.items()}
    order = sorted(names, key=lambda n: -means[n])
    parts = [f"{order[0]} {means[order[0]]:.3f}"]
    for a, b in zip(order, order[1:]):
        _, sep = separated(vals[a], vals[b])
        parts.append(("> " if sep > 0 else "≈ ") + f"{b} {means[b]:.3f}")
    return (f"{head}: closest to A^π by Spearman: " + " ".join(parts)
            + f" (>: separated over seeds, ≈: not; fewer than {MIN_SEEDS} seeds separate nothing)")


def policy_lines(label: str, seeds: list) -> list[str]:
    """What a prepared policy recorded (a tabular snapshot: where it was frozen)."""
    info = [s["policy"] for s in seeds if isinstance(s.get("policy"), dict)]
    if not info or "probe_success" not in info[0]:
        return []
    reached = sum(bool(i.get("reached")) for i in info)
    return [f"  {label}: frozen after {np.mean([i['episodes'] for i in info]):.0f} training episodes on average, "
            f"at probe success {_mean_ci([i['probe_success'] for i in info])}; target reached in {reached} of "
            f"{len(info)} seeds"]


def fair_lines(record: dict, verbose: bool = True) -> list[str]:
    """The issue-85 lines: the race at own rates, bias apart from noise, the per-policy verdicts; short (not
    ``verbose``): one line for the race at own rates and one per bias policy, the arms in order of their means."""
    if verbose:
        out = own_rate_lines(record) + bias_lines(record)
    else:
        out = []
        own = race_own(record)
        if own:
            means = sorted(((float(np.mean([r["auc"] for r in runs])) if runs else float("nan"), arm, rate)
                            for arm, (rate, runs) in own.items()), key=lambda t: -t[0] if t[0] == t[0] else 1e9)
            out.append(own_rate_lines(record)[0].rstrip(":") + ", mean AUC: "
                       + ", ".join(f"{arm} {m:.3f} (lr {rate:g})" for m, arm, rate in means))
        for label, seeds in (record.get("bias") or {}).items():
            if seeds:
                names = list(seeds[0]["arms"])
                pear = {n: float(np.nanmean([s["arms"][n]["pearson"] for s in seeds])) for n in names}
                out.append(f"bias apart from noise ({label}, {len(seeds)} seeds): E[credit] vs A^π Pearson, highest "
                           "first: " + ", ".join(f"{n} {pear[n]:.3f}" for n in sorted(names, key=lambda n: -pear[n]
                                                                                   if pear[n] == pear[n] else 1e9)))
    env = record.get("env", "env")
    for label, seeds in record["accuracy"].items():
        if seeds and "accuracy" in seeds[0]:
            if verbose:  # the short output has each policy's accuracy line already (run.short_lines)
                out.append(accuracy_verdict(env, label, seeds))
            out += policy_lines(label, seeds)
    return out
