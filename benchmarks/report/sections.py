"""The sections of a check's page: setting, machines, records, results, paired differences, verdicts."""

from __future__ import annotations

from benchmarks import stats
from benchmarks.report.checks import Check
from benchmarks.report.text import diff_label, f3, interval, machine_text, name, pair_word, seeds_text, signed, table


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
