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
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

from benchmarks import step_cost, step_perf
from benchmarks.machine import cpu_label, machine_info
from creditflow.policy.backends.base import SamplingParams

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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="runs/step_cost_models", help="where step_cost's pi_SFT are cached")
    ap.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    ap.add_argument("--repeats", type=int, default=3, help="interleaved repeats of the unprofiled timing")
    ap.add_argument("--out", default=str(Path(__file__).parent / "results" / "decode_floor"))
    ap.add_argument("--markdown", action="store_true", help="only rewrite <out>.md from <out>.json")
    args = ap.parse_args()
    out = Path(args.out)
    if args.markdown:
        if not out.with_suffix(".json").is_file():
            ap.error(f"--markdown: no record at {out.with_suffix('.json')}")
        out.with_suffix(".md").write_text(markdown(json.loads(out.with_suffix(".json").read_text())))
        return
    if args.threads < 1 or args.repeats < 1:
        ap.error("--threads and --repeats must be at least 1")
    torch.set_num_threads(args.threads)
    t0 = time.perf_counter()
    result = run(args)
    result["benchmark_minutes"] = round((time.perf_counter() - t0) / 60, 1)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(result, indent=2) + "\n")
    out.with_suffix(".md").write_text(markdown(result))
    print(markdown(result))


if __name__ == "__main__":
    main()
