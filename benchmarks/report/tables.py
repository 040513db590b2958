"""The detailed results table (README and index) with its audit rows, and the performance table."""

from __future__ import annotations

from benchmarks.report import paths
from benchmarks.report.audit_pages import race_rate_text
from benchmarks.report.audits import AUDIT_KINDS, Audit, policy_kind, policy_text
from benchmarks.report.checks import Check, curve_comparable
from benchmarks.report.claims import CLAIMS
from benchmarks.report.paths import read_json
from benchmarks.report.sections import metric_text
from benchmarks.report.text import arm_cell, f3, machine_text, name, pair_word, summary_cell, table


def _short_verdict(a: Audit, verdicts) -> str:
    return "; ".join((f"{label}: " if label else "") + v for label, v, _ in verdicts) or "not tested"


def audit_rows(audits: list[Audit], link_prefix: str) -> list[list[str]]:
    """The detailed results table's audit rows: one per (setting, behaviour policy), and the race."""
    rows = []
    for a in audits:
        link = f"{link_prefix}{a.page}"
        for p in a.measured_policies:
            arms = "; ".join(f"{name(x)} {summary_cell(a.accuracy(x, policy=p))}" for x in a.arms)
            verdict = (_short_verdict(a, a.accuracy_verdicts(p)) if a.is_resolved(p) else
                       f"not resolved ({a.resolved(p)} resolved steps)")
            rows.append([f"[Credit audit: {a.title}, accuracy]({link})", f"{a.title}; behaviour policy {policy_text(p)}",
                         arms, "Spearman of the credit with Monte-Carlo A^π per step", "– (no LM)" if policy_kind(p) !=
                         "lm" else "the LM is the behaviour policy", CLAIMS["credit"][0] + " (closer to A^π)", verdict])
        for k in a.missing_kinds:
            rows.append([f"[Credit audit: {a.title}, accuracy]({link})", f"{a.title}; behaviour policy {AUDIT_KINDS[k]}",
                         "no record yet", "Spearman of the credit with Monte-Carlo A^π per step", "–",
                         CLAIMS["credit"][0] + " (closer to A^π)", "no record yet"])
        if a.fresh or a.summary.get("race"):
            rate = "own" if a.fresh else "shared"
            arms = "; ".join(f"{name(x)} {summary_cell(a.race(x, rate=rate))}" for x in a.race_arms)
            what = ("a fresh pool per seed, each arm at its own rate (" + race_rate_text(a) + ")" if a.fresh else
                    "one pool shared by every seed, lr 1 (before issue 85)")
            rows.append([f"[Credit audit: {a.title}, race]({link}#learning-race)",
                         f"{a.title}; tabular softmax from zero, {a.summary['settings']['race_episodes']} episodes, "
                         + what, arms, "area under the greedy success curve on the task pool",
                         "– (no LM: a tabular policy)", CLAIMS["credit"][0] + "; " + CLAIMS["crps"][0],
                         _short_verdict(a, a.race_verdicts(rate))])
    return rows


def audit_speed_rows() -> tuple[list[list[str]], list[str]]:
    path = paths.RESULTS / "credit_audit_speed.json"
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
        title = f"[{c.spec.title}]({link_prefix}{c.page})" + (" (superseded)" if c.spec.status else "")
        curve = verdicts_text(c.verdicts("train_auc")) if c.train_curves else "–"
        if c.train_curves and not curve_comparable(c):
            curve += " (not like for like: curriculum arms replay near a success)"
        rows.append([title, c.spec.setting, arms, metric_text(c), sft_text, CLAIMS[c.spec.claim][0],
                     verdicts_text(c.verdicts()), curve])
    rows += [[*row, "–"] for row in audit_rows(audits or [], link_prefix)]
    return [*table(["check", "setting", "arms: mean [95% bootstrap], t [95% t-interval]", "metric", "π_SFT",
                    "claim", "reproduced", "reproduced on the training curve"], rows), "",
            "Mean over seeds; [ ]: 95% percentile bootstrap; t [ ]: 95% t-interval, given where n ≤ 5 "
            "(benchmarks/stats.py). Reproduced: yes = every claimed pair's seed-by-seed difference is separated "
            "from zero in the claim's direction; in means only = right sign, not separated; reversed = some "
            "pair separated the other way; no = otherwise. On the training curve: the same rule on the area under "
            "each run's on-policy training success curve (its mean over the RL steps), the claims against π_SFT "
            "aside. Generated by `benchmarks/report/` from the records; each check's page has its settings, "
            f"per-seed values and paired differences ([results]({link_prefix}index.md))."]


def verdicts_text(verdicts: list) -> str:
    """A check's verdicts in one cell: each claim's word, and its pairs' words where the claim is not a plain yes."""
    return "; ".join((f"{label}: " if label else "") + v + (
        "" if v in ("yes", "not tested") or len(ps) < 2 else
        " (" + ", ".join(f"{name(a)} > {name(b)}: {pair_word(p)}" for a, b, p in ps) + ")")
        for label, v, ps in verdicts) or "not tested"


def performance_rows() -> tuple[list[list[str]], list[str]]:
    speed = read_json(paths.RESULTS / "credit_speed.json")
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
        sc = read_json(paths.RESULTS / f"{stem}.json")
        med = sc["median"]
        base, fast = med["window+paper"]["step_s"], med["conversation+compact+shared"]["step_s"]
        rows.append([f"one RL step of the demo setting ({sc['settings']['tasks']} × {sc['settings']['group']}, "
                     f"{sc['settings']['torch_threads']} threads)",
                     f"{fast:.2f} s: `conversation` + `compact`, shared prefixes",
                     f"{base:.2f} s: `window` + `paper`, no sharing", f"{base / fast:.1f}×",
                     machine_text(sc["machine"]), f"`{stem}.json`"])
        sources.append(f"{stem}.json")
    lean = read_json(paths.RESULTS / "step_cost_lean.json")
    lean_machine = (machine_text({**lean["machine"], "matmul_gflops": None}) +
                    f"; one large float32 matrix product at {lean['matmul_gflops_at_run_threads']['cpu']:.0f} GFLOP/s "
                    f"per CPU second; {lean['settings']['torch_threads']} thread; load average "
                    f"{lean['load']['start']['loadavg'][0]:g}-{lean['load']['end']['loadavg'][0]:g} (shared)")
    for base, ph in lean["phases"].items():
        d = ph["decode"]
        rows.append([f"one decode step of the tiny policy, batch {d['batch']} (a group's first turn, "
                     f"`{base.split('+')[0]}` layout), CPU seconds",
                     f"{d['lean']['ms_cpu']:.1f} ms: lean decoder (`policy.decode=lean`)",
                     f"{d['hf']['ms_cpu']:.1f} ms: transformers model call (`policy.decode=hf`)",
                     f"{d['ratio_cpu']:.2f}×", lean_machine, "`step_cost_lean.json`"])
    sources.append("step_cost_lean.json")
    smol = read_json(paths.RESULTS / "decode_floor_smollm2.json")
    for batch in ("1", "8"):
        d = smol["decode"][batch]
        rate = {p: 1000 * int(batch) / d[p]["ms_wall"] for p in ("hf", "lean", "lean+bf16")}
        rows.append([f"SmolLM2-135M decode, batch {batch}, wall seconds",
                     f"{rate['lean+bf16']:.1f} tokens/s: lean decoder on the bf16 rollout copy "
                     f"(`policy.rollout_dtype=bf16`); {rate['lean']:.1f} on the float32 weights",
                     f"{rate['hf']:.1f} tokens/s: transformers model call, float32",
                     f"{d['over_hf']['lean+bf16']['wall']:.2f}× (float32 lean: {d['over_hf']['lean']['wall']:.2f}×)",
                     machine_text({**smol["machine"], "matmul_gflops": None})
                     + f"; {smol['torch_threads']} threads; load average {smol['load']['start']['loadavg'][0]:g}-"
                     f"{smol['load']['end']['loadavg'][0]:g}", "`decode_floor_smollm2.json`"])
    sources.append("decode_floor_smollm2.json")
    floor = read_json(paths.RESULTS / "decode_floor.json")
    t, lean_ops = floor["timing"], floor["categories"]["lean"]
    rows.append([f"one decode step of the tiny policy, batch {floor['batch']} (`conversation` layout), CPU seconds; "
                 "what stops it",
                 f"{t['lean']['ms_cpu']:.2f} ms: lean decoder, of which {lean_ops['matrix products']:.2f} ms matrix "
                 f"products and {lean_ops['the draw']:.2f} ms the seeded draw (a step 4× faster than the transformers "
                 f"call's: {t['hf']['ms_cpu'] / 4:.2f} ms)",
                 f"{t['hf']['ms_cpu']:.2f} ms: transformers model call", f"{t['ratio_cpu']:.2f}×",
                 machine_text({**floor["machine"], "matmul_gflops": None})
                 + f"; one large float32 matrix product at {floor['matmul_gflops']['cpu']:.0f} GFLOP/s per CPU second; "
                 f"{floor['torch_threads']} thread; load average {floor['load']['loadavg'][0]:g}",
                 "`decode_floor.json`"])
    sources.append("decode_floor.json")
    rt = read_json(paths.RESULTS / "rollout_throughput.json")
    rows.append([f"rollouts, {rt['settings']['tasks']} × {rt['settings']['group']} episodes, tiny policy (untrained)",
                 f"{rt['batched']['env_steps_per_s']:.1f} env-steps/s: batched lockstep engine",
                 f"{rt['sequential']['env_steps_per_s']:.1f} env-steps/s: one env at a time",
                 f"{rt['batched']['env_steps_per_s'] / rt['sequential']['env_steps_per_s']:.2f}×",
                 machine_text(rt["machine"]), "`rollout_throughput.json`"])
    vl = read_json(paths.RESULTS / "rollout_throughput_vllm.json")
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
            "Generated by `benchmarks/report/`."]
