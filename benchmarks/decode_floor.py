"""What stops a decode step: the tiny policy's decode step at batch 64 on both paths of the ``hf`` backend, split
by operation, against the floor the matrix products set.

    python -m benchmarks.decode_floor [--models DIR] [--threads 1] [--repeats 3] [--out PATH] [--markdown]

Issue 86 asks for a decode step 4x faster than the transformers model call's at batch 64. This measures, in one
process on one machine, what any eager path's decode step costs at least: the same batch as
``step_cost.py --setting lean`` (the demo's RL settings, conversation + compact + shared prefixes, its pi_SFT
cached under ``--models``, the last full-size batch of one rollout from it: 8 distinct prompts x 8 rows), the ms
per decode step of both paths (``step_perf.decode_cost``: 17 tokens minus 1 token, interleaved, wall and CPU
medians), then torch's profiler on both paths (the same 17-minus-1 difference, per operation's own CPU time):

* matrix products (``mm``, ``addmm``: the linear layers and the LM head);
* attention products (``bmm``; the transformers call's attention kernel);
* the draw (``multinomial``'s ``exponential_``) and everything else (copies, indexing, norms, element-wise,
  Python and dispatch).

The floor: the decode step with everything but the matrix and attention products removed, and the matrix
products' arithmetic at the host's large-product rate. ``hf ms / floor ms`` is the largest speed-up any path
that keeps these kernels can reach. The profiler's own overhead inflates the many small operations, so the
shares are rough; the ms per step come from the unprofiled timing. Writes ``<out>.json`` and ``<out>.md``
(default ``benchmarks/results/decode_floor``) with the machine.

``--smollm2``: SmolLM2-135M-Instruct (``make smollm2``), whose decode step at small batches reads more bytes of
weights than it does arithmetic, on four paths side by side: hf and lean on its float32 weights (today's path
and the lean decoder), and both on the bfloat16 rollout copy (``policy.rollout_dtype=bf16``), at batch 1, 8 and
32 of distinct first-turn Sokoban prompts; the host's copy bandwidth and each dtype's weight-read time; what
the copy changes (the gap between its log-probs of its own samples and the float32 model's, the
``train/rollout_logprob_gap`` a run logs, and how often greedy decoding agrees). Default ``--out``:
``benchmarks/results/decode_floor_smollm2``.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

from benchmarks import step_cost, step_perf
from benchmarks.machine import cpu_label, machine_info
from creditflow.policy.backends.base import SamplingParams
from creditflow.policy.backends.hf import HFBackend
from creditflow.policy.load import load_policy

LAYOUT = "conversation+compact+shared"
STEPS = 16
CATEGORIES = {"matrix products": ("aten::mm", "aten::addmm"),
              "attention products": ("aten::bmm", "aten::baddbmm", "aten::_scaled_dot_product_flash_attention_for_cpu",
                                     "aten::_scaled_dot_product_attention_math"),
              "the draw": ("aten::exponential_",)}
OTHER = "everything else"


def op_split(backend, prompts, found, steps: int = STEPS) -> dict[str, dict]:
    """ms per decode step by operation (own CPU time; ``steps + 1`` tokens minus 1 token, profiled)."""

    def profiled(k: int) -> dict[str, tuple[float, int]]:
        torch.manual_seed(0)
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            backend._generate_cached(prompts, found, SamplingParams(max_new_tokens=k, temperature=1.0), keep=False)
        return {e.key: (e.self_cpu_time_total / 1000, e.count) for e in prof.key_averages()}

    profiled(steps + 1)  # warm-up
    one, many = profiled(1), profiled(steps + 1)
    ops = {}
    for key, (ms, calls) in many.items():
        ms0, calls0 = one.get(key, (0.0, 0))
        if calls > calls0:
            ops[key] = {"ms_per_step": (ms - ms0) / steps, "calls_per_step": (calls - calls0) / steps}
    return ops


def categorise(ops: dict[str, dict]) -> dict[str, float]:
    out = {name: 0.0 for name in [*CATEGORIES, OTHER]}
    for key, v in ops.items():
        name = next((c for c, keys in CATEGORIES.items() if key in keys), OTHER)
        out[name] += v["ms_per_step"]
    return out


def matrix_product_gflop(model, batch: int) -> float:
    """GFLOP of the linear layers and LM head for one token in each of ``batch`` rows."""
    linear = sum(m.weight.numel() for m in model.modules() if isinstance(m, torch.nn.Linear))
    return 2 * batch * linear / 1e9


def run(args) -> dict:
    step_cost.SETTING = []  # the demo's own RL settings, as --setting lean
    models = Path(args.models)
    sft = step_cost.sft_model(LAYOUT, models)
    trainer = step_cost.Trainer(LAYOUT, sft, models / LAYOUT / "rl_floor")
    batch = step_cost.decode_batch(step_cost.captured_prompts(trainer, 1000))
    trainer.restore(1000)
    model, tok = trainer.model, trainer.tok
    rates = step_perf.matmul_rates()
    timing = step_perf.decode_cost(model, tok, batch, args.repeats)
    paths = step_perf.backends(model, tok)
    split = {}
    for name, backend in paths.items():
        found = backend._prefill_distinct(batch)
        split[name] = op_split(backend, batch, found)
    categories = {name: categorise(ops) for name, ops in split.items()}
    gflop = matrix_product_gflop(model, len(batch))
    floors = {name: c["matrix products"] + c["attention products"] for name, c in categories.items()}
    hf_ms = timing["hf"]["ms_cpu"]
    return {"benchmark": "decode_floor", "layout": LAYOUT, "overrides": step_cost.LAYOUTS[LAYOUT],
            "batch": timing["batch"], "distinct_prompts": timing["distinct_prompts"],
            "context_tokens_mean": timing["context_tokens_mean"], "steps": STEPS, "repeats": args.repeats,
            "timing": timing, "ops": split, "categories": categories, "floor_ms": floors,
            "matrix_product_gflop": gflop, "matmul_gflops": rates,
            "matrix_products_at_rate_ms": 1000 * gflop / rates["cpu"],
            "best_ratio_over_hf": {name: hf_ms / floor for name, floor in floors.items()},
            "torch_threads": torch.get_num_threads(), "load": step_cost.load_snapshot(),
            "machine": machine_info()}


def markdown(r: dict) -> str:
    m, t, c = r["machine"], r["timing"], r["categories"]
    rate = r["matmul_gflops"]
    lines = ["# What stops a decode step: the tiny policy at batch 64", "",
             f"Machine: {cpu_label(m)} ({m['cores']} cores), torch {m['torch']}, {r['torch_threads']} torch "
             f"thread(s), {m['date']}; one 2048^3 float32 matrix product at {rate['wall']:g} GFLOP/s per wall second, "
             f"{rate['cpu']:g} per CPU second. Load average at the end {r['load']['loadavg']}.", "",
             f"The batch: {r['batch']} rows ({r['distinct_prompts']} distinct prompts, {t['context_tokens_mean']:.0f} "
             f"tokens of context on average), the last full-size batch of one rollout of the demo's RL step from its "
             f"{r['layout']} pi_SFT (`{' '.join(r['overrides'])}`), no stop token; a decode step is the time of "
             f"{r['steps'] + 1} tokens minus that of 1, over {r['steps']}.", "",
             "| path | ms per step, wall | ms per step, CPU |", "|---|---|---|",
             *[f"| decode={p} | {t[p]['ms_wall']:.2f} | {t[p]['ms_cpu']:.2f} |" for p in ("hf", "lean")], "",
             f"lean over hf: {t['ratio_wall']:.2f}x wall, {t['ratio_cpu']:.2f}x CPU.", "",
             "Where a decode step's CPU time goes (torch profiler, each operation's own CPU time, ms per step; the "
             "profiler's overhead inflates the small operations):", "",
             "| path | " + " | ".join(c["hf"]) + " | total |", "|---|" + "---|" * (len(c["hf"]) + 1)]
    for p in ("hf", "lean"):
        lines.append(f"| decode={p} | " + " | ".join(f"{v:.2f}" for v in c[p].values())
                     + f" | {sum(c[p].values()):.2f} |")
    hf_ms = t["hf"]["ms_cpu"]
    lean = c["lean"]
    lines += ["", "The floor:", "",
              f"- A decode step 4x faster than the hf path's would take {hf_ms / 4:.2f} ms (CPU). The lean path's "
              f"matrix products and the draw alone take {lean['matrix products'] + lean['the draw']:.2f} ms, leaving "
              f"{hf_ms / 4 - lean['matrix products'] - lean['the draw']:.2f} ms for attention "
              f"({lean['attention products']:.2f} now) and every other operation ({lean[OTHER]:.2f} now).",
              f"- The matrix and attention products alone take {r['floor_ms']['lean']:.2f} ms per step on the lean "
              f"path ({r['floor_ms']['hf']:.2f} on the hf path): with every other operation removed, a decode step "
              f"would be at best {r['best_ratio_over_hf']['lean']:.1f}x faster than the hf path's {hf_ms:.2f} ms "
              "(CPU).",
              f"- The linear layers and the LM head are {r['matrix_product_gflop'] * 1000:.1f} MFLOP per step: "
              f"{r['matrix_products_at_rate_ms']:.2f} ms at the host's large-product rate; the lean path runs them "
              f"in {c['lean']['matrix products']:.2f} ms, "
              f"{r['matrix_products_at_rate_ms'] / max(c['lean']['matrix products'], 1e-9):.0%} of that rate.",
              f"- The draw (multinomial's exponential_ over the {r['batch']} x vocabulary probabilities) is "
              f"{c['lean']['the draw']:.2f} ms on both paths: a different draw would change every seeded sample.", "",
              "The top operations of the lean path (ms per step, calls per step):", "",
              "| operation | ms | calls |", "|---|---|---|"]
    top = sorted(r["ops"]["lean"].items(), key=lambda kv: -kv[1]["ms_per_step"])[:12]
    lines += [f"| {k} | {v['ms_per_step']:.3f} | {v['calls_per_step']:.0f} |" for k, v in top]
    lines += ["", "Produced by `python -m benchmarks.decode_floor`; the JSON beside this file has every operation."]
    return "\n".join(lines) + "\n"


SMOL_BATCHES = (1, 8, 32)
SMOL_PATHS = ("hf", "lean", "hf+bf16", "lean+bf16")
ROOT = Path(__file__).resolve().parents[1]


def smollm2_dir() -> Path:
    return Path(os.environ.get("CREDITFLOW_SMOLLM2") or ROOT / "models" / "smollm2")


def fp32_logprobs(model, prompt: list[int], tokens: list[int]) -> list[float]:
    """log pi(token) of each of ``tokens`` after ``prompt`` under ``model`` (one forward pass)."""
    ids = torch.tensor([prompt + tokens])
    with torch.inference_mode():
        logp = model(input_ids=ids).logits[0, len(prompt) - 1:-1].float().log_softmax(-1)
    return logp.gather(-1, torch.tensor(tokens)[:, None])[:, 0].tolist()


def linear_pass(model, dtype: torch.dtype, repeats: int = 5) -> dict:
    """ms for one row through every linear layer of ``model`` (the LM head included), its weights cast to
    ``dtype`` once beforehand: the weight reads of a batch-1 decode step through ``F.linear`` alone, best of
    ``repeats``, and the bytes per second that makes."""
    weights = [m.weight.detach().to(dtype) for m in model.modules() if isinstance(m, torch.nn.Linear)]
    rows = {w.shape[1]: torch.randn(1, w.shape[1], dtype=dtype) for w in weights}

    def one_pass():
        for w in weights:
            torch.nn.functional.linear(rows[w.shape[1]], w)

    one_pass()
    best = min(step_perf.clock(one_pass)[0] for _ in range(repeats))
    size = sum(w.numel() * w.element_size() for w in weights)
    return {"ms": 1000 * best, "gb_per_s": size / best / 1e9, "mb": size / 1e6}


def copy_effects(model, tok, prompts: list[list[int]], tokens: int = 16) -> dict:
    """What sampling from the bf16 copy changes: per path, the mean (and largest) |log-prob| gap between the
    path's log-probs of its own seeded samples and the float32 model's (the trainer's view), and the share of
    prompts whose ``tokens`` greedy tokens equal the float32 lean path's."""
    paths = {"lean": HFBackend(model, step_perf._NoStop(tok), decode="lean"),
             "lean+bf16": HFBackend(model, step_perf._NoStop(tok), decode="lean", rollout_dtype="bf16")}
    out, greedy = {}, {}
    for name, backend in paths.items():
        torch.manual_seed(0)
        gens = backend.generate(prompts, SamplingParams(max_new_tokens=tokens, temperature=1.0))
        gaps = [abs(a - b) for p, g in zip(prompts, gens)
                for a, b in zip(g.logprobs, fp32_logprobs(model, p, g.token_ids))]
        greedy[name] = [g.token_ids for g in backend.generate(prompts, SamplingParams(max_new_tokens=tokens,
                                                                                       temperature=0.0))]
        out[name] = {"logprob_gap_mean": sum(gaps) / len(gaps), "logprob_gap_max": max(gaps)}
    out["greedy_equal_share"] = sum(a == b for a, b in zip(greedy["lean"], greedy["lean+bf16"])) / len(prompts)
    out["prompts"], out["tokens"] = len(prompts), tokens
    return out


def run_smollm2(args) -> dict:
    model, tok = load_policy(smollm2_dir(), "cpu")
    weights = {"float32": sum(p.numel() * p.element_size() for p in model.parameters()) / 1e6}
    weights["bfloat16"] = weights["float32"] / 2
    load_start = step_cost.load_snapshot()
    bandwidth = step_perf.copy_bandwidth()
    decode = {}
    for batch in SMOL_BATCHES:
        prompts = step_cost.smollm2_prompts(tok, batch)
        decode[str(batch)] = step_perf.decode_cost(model, tok, prompts, args.repeats, steps=8, bf16_copy=True)
        print(f"batch {batch}: " + ", ".join(f"{p} {decode[str(batch)][p]['ms_wall']:.1f} ms" for p in SMOL_PATHS),
              flush=True)
    effects = copy_effects(model, tok, step_cost.smollm2_prompts(tok, 8))
    linear = {"float32": linear_pass(model, torch.float32), "bfloat16": linear_pass(model, torch.bfloat16)}
    return {"benchmark": "decode_floor_smollm2", "model": "SmolLM2-135M-Instruct (models/smollm2, float32)",
            "batches": list(SMOL_BATCHES), "paths": list(SMOL_PATHS), "steps": 8, "repeats": args.repeats,
            "decode": decode, "weights_mb": weights, "copy_gbs": bandwidth,
            "weight_read_ms": {k: mb / 1e3 / bandwidth * 1e3 for k, mb in weights.items()},
            "copy_effects": effects, "linear_pass": linear, "torch_threads": torch.get_num_threads(),
            "load": {"start": load_start, "end": step_cost.load_snapshot()}, "machine": machine_info()}


def rl_steps(args) -> dict:
    """One RewardFlow step of SmolLM2 on Sokoban per arm, ``policy.rollout_dtype`` same then bf16, interleaved,
    ``args.step_repeats`` times each from the same weights, tasks and torch seed (smollm2_zero_shot's step: 1 task
    x 4 rollouts, 5 turns of 48 tokens, window + paper, KL 0.01), by phase; bf16 samples other tokens, so the
    work per step differs and the record keeps it."""
    from benchmarks import smollm2_zero_shot

    ns = argparse.Namespace(model=str(smollm2_dir()), scratch=str(ROOT / "runs" / "decode_floor_smollm2"),
                            step_tasks=1, step_group=4, max_steps=5, max_new_tokens=48)
    arms: dict[str, list] = {"same": [], "bf16": []}
    for k in range(args.step_repeats):
        for arm, steps in arms.items():
            ns.extra = [f"policy.rollout_dtype={arm}"]
            steps.append(smollm2_zero_shot.step_cost(ns))
            print(f"step {k} rollout_dtype={arm}: {json.dumps(steps[-1])}", flush=True)
    return {"arms": arms, "torch_threads": torch.get_num_threads(), "setting": arms["same"][0]["setting"]}


def markdown_smollm2(r: dict) -> str:
    m, d = r["machine"], r["decode"]
    e = r["copy_effects"]
    lines = ["# SmolLM2's decode step: float32 weights against the bfloat16 rollout copy", "",
             f"Machine: {cpu_label(m)} ({m['cores']} cores), torch {m['torch']}, {r['torch_threads']} torch "
             f"thread(s), {m['date']}; memory copies at {r['copy_gbs']:.1f} GB/s (one 512 MiB copy, read + write, "
             f"best of 3). Load average at the start {r['load']['start']['loadavg']}, at the end "
             f"{r['load']['end']['loadavg']}.", "",
             f"{r['model']}: first-turn Sokoban prompts (paper template, its chat template), one distinct prompt "
             f"a row, no stop token; a decode step is the time of {r['steps'] + 1} tokens minus that of 1, over "
             f"{r['steps']}, medians of {r['repeats']} interleaved repeats. Paths: `hf` is today's path "
             "(the transformers model call on the float32 weights), `lean` the lean decoder (`policy.decode=lean`) "
             "on them, `+bf16` the same on the bfloat16 rollout copy (`policy.rollout_dtype=bf16`).", "",
             "| batch | context tokens | " + " | ".join(f"{p} ms (tokens/s)" for p in r["paths"])
             + " | lean+bf16 over hf, wall (CPU) |", "|---|---|" + "---|" * (len(r["paths"]) + 1)]
    for batch in r["batches"]:
        row = d[str(batch)]  # keyed by str, as JSON keeps them
        cells = [f"{row[p]['ms_wall']:.1f} ({1000 * batch / row[p]['ms_wall']:.1f})" for p in r["paths"]]
        over = row["over_hf"]["lean+bf16"]
        lines.append(f"| {batch} | {row['context_tokens_mean']:.0f} | " + " | ".join(cells)
                     + f" | **{over['wall']:.2f}x** ({over['cpu']:.2f}x) |")
    w, t = r["weights_mb"], r["weight_read_ms"]
    row1 = d["1"]
    lines += ["", f"Weights read once per decode step: {w['float32']:.0f} MB in float32, {t['float32']:.1f} ms at the "
              f"copy bandwidth; {w['bfloat16']:.0f} MB in bfloat16, {t['bfloat16']:.1f} ms. On float32 weights no "
              f"path's batch-1 step can be shorter than {t['float32']:.1f} ms, "
              f"{1000 / t['float32']:.1f} tokens/s. What the batch-1 step pays instead is the linear layers' "
              f"matrix-vector products: one row through every linear layer and the LM head, nothing else, takes "
              f"{r['linear_pass']['float32']['ms']:.1f} ms in float32 "
              f"({r['linear_pass']['float32']['gb_per_s']:.1f} GB/s of weights) and "
              f"{r['linear_pass']['bfloat16']['ms']:.1f} ms in bfloat16 "
              f"({r['linear_pass']['bfloat16']['gb_per_s']:.1f} GB/s): a float32 path through these kernels is at "
              f"best {row1['hf']['ms_wall'] / r['linear_pass']['float32']['ms']:.2f}x faster than hf's "
              f"{row1['hf']['ms_wall']:.1f} ms at batch 1, with every other operation removed.", "",
              f"What the copy changes ({e['prompts']} prompts, {e['tokens']} tokens each, seeded samples at "
              "temperature 1): the mean |log-prob| gap between a path's log-probs of its own samples and the "
              "float32 model's, what a run logs as `train/rollout_logprob_gap`, is "
              f"{e['lean']['logprob_gap_mean']:.2e} on the float32 lean path (largest {e['lean']['logprob_gap_max']:.2e})"
              f" and {e['lean+bf16']['logprob_gap_mean']:.3f} on the bf16 copy (largest "
              f"{e['lean+bf16']['logprob_gap_max']:.3f}); greedy decoding gives the same {e['tokens']} tokens on "
              f"{e['greedy_equal_share']:.0%} of the prompts.", "",
              "Produced by `python -m benchmarks.decode_floor --smollm2`."]
    if r.get("rl_step"):
        st = r["rl_step"]
        lines += ["", f"One RL step of SmolLM2 (RewardFlow on Sokoban, {st['setting']['tasks']} task x "
                  f"{st['setting']['group']} rollouts, {st['setting']['max_steps']} turns of "
                  f"{st['setting']['max_new_tokens']} tokens, {st['setting']['layout']}, KL {st['setting']['kl_coef']}; "
                  f"{st['torch_threads']} threads), each arm from the same weights, tasks and seed, interleaved "
                  "(`--smollm2 --step`); wall seconds by phase (`mismatch`: the trainer's own log-probs of the "
                  "samples, for the logged gap):", "",
                  "| policy.rollout_dtype | rollout s | mismatch s | reference s | update s | step s | generated tokens "
                  "| generation tokens/s | rollout/trainer gap |", "|---|---|---|---|---|---|---|---|---|"]
        for arm, steps in st["arms"].items():
            for one in steps:
                gap = one.get("rollout_logprob_gap")
                lines.append(f"| {arm} | {one['rollout_s']} | {one['mismatch_s']} | {one['ref_s']} | {one['update_s']} "
                             f"| {one['step_s']} | {one['generated_tokens']} | {one['generation_tokens_per_s']} | "
                             + ("–" if gap is None else f"{gap:.3f}") + " |")
        lines += ["", "Produced by `python -m benchmarks.decode_floor --smollm2 --step` (added to the record above)."]
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="runs/step_cost_models", help="where step_cost's pi_SFT are cached")
    ap.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    ap.add_argument("--repeats", type=int, default=3, help="interleaved repeats of the unprofiled timing")
    ap.add_argument("--out", help="record path without suffix (default benchmarks/results/decode_floor, "
                                  "decode_floor_smollm2 with --smollm2)")
    ap.add_argument("--smollm2", action="store_true", help="SmolLM2's decode step, float32 against the bf16 copy")
    ap.add_argument("--step", action="store_true",
                    help="with --smollm2: add one SmolLM2 RL step per policy.rollout_dtype to the existing record")
    ap.add_argument("--step-repeats", type=int, default=2, help="with --step: steps per arm (default 2)")
    ap.add_argument("--markdown", action="store_true", help="only rewrite <out>.md from <out>.json")
    args = ap.parse_args()
    render = markdown_smollm2 if args.smollm2 else markdown
    out = Path(args.out or Path(__file__).parent / "results" / ("decode_floor_smollm2" if args.smollm2 else
                                                                 "decode_floor"))
    if args.markdown:
        if not out.with_suffix(".json").is_file():
            ap.error(f"--markdown: no record at {out.with_suffix('.json')}")
        out.with_suffix(".md").write_text(render(json.loads(out.with_suffix(".json").read_text())))
        return
    if args.threads < 1 or args.repeats < 1 or args.step_repeats < 1:
        ap.error("--threads, --repeats and --step-repeats must be at least 1")
    if args.smollm2 and not (smollm2_dir() / "config.json").is_file():
        ap.error(f"--smollm2: no model at {smollm2_dir()} (make smollm2, or set CREDITFLOW_SMOLLM2)")
    torch.set_num_threads(args.threads)
    if args.step:
        if not args.smollm2 or not out.with_suffix(".json").is_file():
            ap.error(f"--step adds to a --smollm2 record: run --smollm2 first (no record at {out.with_suffix('.json')})")
        result = json.loads(out.with_suffix(".json").read_text())
        result["rl_step"] = rl_steps(args)
        out.with_suffix(".json").write_text(json.dumps(result, indent=2) + "\n")
        out.with_suffix(".md").write_text(render(result))
        return
    t0 = time.perf_counter()
    result = run_smollm2(args) if args.smollm2 else run(args)
    result["benchmark_minutes"] = round((time.perf_counter() - t0) / 60, 1)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(result, indent=2) + "\n")
    out.with_suffix(".md").write_text(render(result))
    print(render(result))


if __name__ == "__main__":
    main()
