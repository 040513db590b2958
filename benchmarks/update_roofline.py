"""Why the RL step stops near 2x on the 2-core CPU: the tiny policy's passes are compute-bound.

    python -m benchmarks.update_roofline [--threads 2] [--repeats 3]

Part 1, measured: one forward + backward of a micro-batch of the tiny policy's architecture (random
weights: the rate does not depend on them) on rows as long as ``step_cost.py``'s median trained rows in
each layout (``window``: ~431 tokens, ``conversation``: ~1142), about ``rl.token_budget`` (16,384) tokens
each, the LM head applied at the trained positions only, as the update does it. The profiler splits the
time into matrix products, attention and the rest; each gets its FLOPs (counted from the shapes) and the
rate reached, next to the rate of one large matrix product on the same machine (the ceiling).

Part 2, arithmetic on a ``step_cost.py`` result (``--step-cost``, default the committed
``benchmarks/results/step_cost.json``): the FLOPs of one median step of ``window``+``paper`` and of
``conversation``+``compact`` (linear layers exactly from the token counts each step recorded; attention from
the mean prompt / row / episode length, which undercounts it), and their ratio: the most that changing the
layout can buy on a machine whose time follows the FLOPs.

Part 3, the 5x goal against those FLOPs: the least time the fast layout's median step can take here if it did
nothing but its arithmetic (no env, sampling or Python), with the linear maps at the rate of one large matrix
product (float32, and bfloat16 as ``policy.autocast=bf16`` gives them) and attention at the best rate SDPA
reaches on this machine (fwd + bwd over rows as long as the conversation layout's, float32 and bfloat16), against
the 5x budget (window+paper's measured step / 5). Run it on the day ``step_cost.py`` ran: both ceilings are in
the table, and this host's speed varies from day to day.

Writes ``benchmarks/results/update_roofline.{json,md}`` with machine info and the machine's load.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile


from benchmarks.machine import cpu_label, machine_info, matmul_gflops
from creditflow.policy.tiny import tiny_config

RESULTS = Path(__file__).resolve().parent / "results"
LAYOUTS = {"window": "window+paper", "conversation": "conversation+compact"}  # step_cost.json's names
TOKEN_BUDGET = 16384  # rl.token_budget's default: the tokens of one update micro-batch
FWD_BWD = {"linear": 3.0, "attention": 3.5}  # fwd+bwd / fwd: backward = 2 products per product; flash
#   attention's backward recomputes the scores (5 products against the forward's 2)
MEASURED = ("conversation+compact+shared", "conversation+compact+shared+bf16")  # step_cost's fast arms
MATMUL_OPS = ("aten::mm", "aten::addmm", "aten::bmm", "aten::matmul", "aten::linear")


def model_shape(model) -> dict:
    cfg = model.config
    layer_linear = sum(m.weight.numel() for m in model.model.layers.modules() if isinstance(m, torch.nn.Linear))
    return {"hidden": cfg.hidden_size, "layers": cfg.num_hidden_layers, "heads": cfg.num_attention_heads,
            "kv_heads": cfg.num_key_value_heads, "intermediate": cfg.intermediate_size, "vocab": cfg.vocab_size,
            "linear_params": layer_linear, "params": sum(p.numel() for p in model.parameters())}


def flops(shape: dict, *, tokens: float, head_positions: float, attention_pairs: float) -> dict:
    """Forward FLOPs: ``tokens`` through the layers' linear maps, ``head_positions`` through the LM head,
    ``attention_pairs`` (query, key) pairs in every layer (QK^T and AV: 2 products of hidden-size length)."""
    return {"linear": 2 * shape["linear_params"] * tokens + 2 * shape["vocab"] * shape["hidden"] * head_positions,
            "attention": 2 * 2 * shape["hidden"] * attention_pairs * shape["layers"]}


def causal_pairs(length: float) -> float:
    return length * (length + 1) / 2


def median_seconds(step, repeats: int) -> float:
    """Median wall time of ``step()`` over ``repeats`` calls, after one warm-up call."""
    step()
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        step()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def measure_micro_batch(model, shape: dict, row_len: int, trained_per_row: int, repeats: int) -> dict:
    rows = max(1, TOKEN_BUDGET // row_len)
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(3, shape["vocab"], (rows, row_len), generator=gen)

    def step():
        hidden = model.model(input_ids=ids).last_hidden_state[:, -trained_per_row:]
        logits = model.lm_head(hidden)
        logits.float().logsumexp(-1).mean().backward()

    seconds = median_seconds(step, repeats)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        step()
    by_kind = {"matmul": 0.0, "attention": 0.0, "other": 0.0}
    for ev in prof.key_averages():
        kind = ("attention" if "scaled_dot_product" in ev.key else "matmul" if ev.key in MATMUL_OPS else "other")
        by_kind[kind] += ev.self_cpu_time_total / 1e6
    total = sum(by_kind.values())
    fwd = flops(shape, tokens=rows * row_len, head_positions=rows * trained_per_row,
                attention_pairs=rows * causal_pairs(row_len))
    work = {"matmul": fwd["linear"] * FWD_BWD["linear"], "attention": fwd["attention"] * FWD_BWD["attention"]}
    return {"rows": rows, "row_tokens": row_len, "trained_per_row": trained_per_row, "seconds": seconds,
            "profile_share": {k: v / total for k, v in by_kind.items()},
            "gflop": {k: v / 1e9 for k, v in work.items()},
            # the profiled time per kind, scaled to the unprofiled median
            "gflops": {k: work[k] / 1e9 / (by_kind[k] / total * seconds) for k in work}}


def sdpa_rate(shape: dict, row_len: int, dtype: torch.dtype, repeats: int) -> float:
    """GFLOP/s of SDPA's forward + backward (causal, grouped-query heads, as the update calls it on unpadded
    rows) over one micro-batch of ``row_len``-token rows, at the tiny policy's head layout."""
    rows = max(1, TOKEN_BUDGET // row_len)
    head_dim = shape["hidden"] // shape["heads"]
    gen = torch.Generator().manual_seed(0)
    q = torch.randn(rows, shape["heads"], row_len, head_dim, generator=gen).to(dtype).requires_grad_()
    k, v = (torch.randn(rows, shape["kv_heads"], row_len, head_dim, generator=gen).to(dtype).requires_grad_()
            for _ in range(2))

    def step():
        out = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        out.float().sum().backward()

    one_layer = dict(shape, layers=1)
    work = flops(one_layer, tokens=0, head_positions=0, attention_pairs=rows * causal_pairs(row_len))["attention"]
    return work * FWD_BWD["attention"] / 1e9 / median_seconds(step, repeats)


def floor_seconds(step: dict, linear_gflops: float, attention_gflops: float) -> float:
    """The least time of a step that did only its arithmetic: its linear-map FLOPs at ``linear_gflops``, its
    attention FLOPs at ``attention_gflops`` (``step``: :func:`step_flops`)."""
    return step["linear_gflop"] / linear_gflops + step["attention_gflop"] / attention_gflops


def step_flops(shape: dict, work: dict, layout: str) -> dict:
    """FLOPs of one step from step_cost's recorded work (attention from mean lengths: a lower bound)."""
    decisions, episodes = work["decisions"], work["episodes"]
    if layout == "window":  # every decision prefills its own fresh prompt
        rollout_pairs = decisions * causal_pairs(work["prefill_tokens"] / decisions)
    else:  # each episode's tokens attend to everything before them (the prefix cache keeps it)
        rollout_pairs = episodes * causal_pairs((work["prefill_tokens"] + work["generated_tokens"]) / episodes)
    rollout = flops(shape, tokens=work["prefill_tokens"] + work["generated_tokens"],
                    head_positions=work["generated_tokens"] + decisions, attention_pairs=rollout_pairs)
    rows = work["train_rows"]
    update = flops(shape, tokens=work["train_row_tokens"], head_positions=work["trained_tokens"],
                   attention_pairs=rows * causal_pairs(work["train_row_tokens"] / max(rows, 1)))
    update = {k: v * FWD_BWD[k] for k, v in update.items()}
    out = {"rollout_gflop": sum(rollout.values()) / 1e9, "update_gflop": sum(update.values()) / 1e9,
           "update_attention_share": update["attention"] / sum(update.values()),
           "linear_gflop": (rollout["linear"] + update["linear"]) / 1e9,
           "attention_gflop": (rollout["attention"] + update["attention"]) / 1e9}
    out["step_gflop"] = out["rollout_gflop"] + out["update_gflop"]
    out["rollout_gflops"] = out["rollout_gflop"] / work["rollout_s"]
    out["update_gflops"] = out["update_gflop"] / work["update_s"]
    return out


def load_record(start: list[float], threads: int) -> dict:
    """The load averages around the run and whether other jobs plausibly shared the cores."""
    end = [round(x, 2) for x in os.getloadavg()]
    busy = max(start[0], end[0]) > 1.5 * threads
    return {"start": start, "end": end,
            "note": "other jobs shared the cores: rates are low" if busy else "no other heavy jobs"}


def markdown(r: dict) -> str:
    m, s = r["machine"], r["shape"]
    lines = [
        "# Where the RL step's time goes on the 2-core CPU", "",
        f"Machine: {cpu_label(m)} ({m['cores']} cores), torch {m.get('torch')}, {r['threads']} torch thread(s), "
        f"{m['date']}. Load average at start {r['load']['start']}, at end {r['load']['end']} ({r['load']['note']}).",
        "",
        f"Tiny policy: {s['params'] / 1e6:.2f}M parameters ({s['layers']} layers, hidden {s['hidden']}, "
        f"{s['heads']} heads / {s['kv_heads']} key-value heads, MLP {s['intermediate']}, vocabulary {s['vocab']}), "
        "float32. One large matrix product (2048^3) runs at "
        f"**{r['ceiling_gflops']:.0f} GFLOP/s** here.", "",
        "## One update micro-batch (forward + backward), measured", "",
        "| rows x tokens | trained tokens / row | s | matmul share | attention share | other | "
        "matmul GFLOP/s | attention GFLOP/s |", "|---|---|---|---|---|---|---|---|"]
    for name, b in r["micro_batches"].items():
        p, g = b["profile_share"], b["gflops"]
        lines.append(f"| {name}: {b['rows']} x {b['row_tokens']} | {b['trained_per_row']} | {b['seconds']:.2f} | "
                     f"{p['matmul']:.0%} | {p['attention']:.0%} | {p['other']:.0%} | {g['matmul']:.0f} | "
                     f"{g['attention']:.0f} |")
    lines += ["", f"## One RL step of {Path(r['goal']['step_cost']).name} (medians), counted", "",
              "| layout | rollout GFLOP | update GFLOP (attention share) | step GFLOP | rollout GFLOP/s | "
              "update GFLOP/s | step s |", "|---|---|---|---|---|---|---|"]
    for name, f in r["steps"].items():
        lines.append(f"| {name} | {f['rollout_gflop']:.0f} | {f['update_gflop']:.0f} "
                     f"({f['update_attention_share']:.0%}) | {f['step_gflop']:.0f} | {f['rollout_gflops']:.0f} | "
                     f"{f['update_gflops']:.0f} | {f['step_s']:.2f} |")
    lines += ["", f"FLOP ratio window+paper / conversation+compact: **{r['flop_ratio']:.2f}x** per step "
                  f"(measured step-time ratio {r['time_ratio']:.2f}x).", "", r["reading"]]
    g = r["goal"]
    lines += ["", "## The 5x goal against the fast layout's arithmetic", "",
              f"step_cost result: `{g['step_cost']}` ({g['step_cost_date']}, large float32 product then "
              f"{g['step_cost_matmul_gflops']} GFLOP/s; now {r['ceiling_gflops']:.0f}). window+paper's median step: "
              f"{g['baseline_s']:.2f} s, so 5x needs conversation+compact's step in **{g['budget_s']:.2f} s**. "
              f"Its median step does {g['linear_gflop']:.0f} GFLOP in linear maps and LM head and "
              f"{g['attention_gflop']:.0f} GFLOP of attention (counted from mean lengths: at least that). "
              f"SDPA forward + backward over {g['sdpa_rows']}: {g['sdpa_gflops']['float32']:.0f} GFLOP/s in "
              f"float32, {g['sdpa_gflops']['bfloat16']:.3g} in bfloat16; one large bfloat16 product "
              f"{g['bf16_ceiling_gflops']:.3g} GFLOP/s.", "",
              "| if the step did only its arithmetic, with | linear at GFLOP/s | attention at GFLOP/s | floor s | "
              "most speed-up |", "|---|---|---|---|---|"]
    for f in g["floors"]:
        lines.append(f"| {f['case']} | {f['linear_gflops']:.3g} | {f['attention_gflops']:.3g} | "
                     f"{f['seconds']:.2f} | {f['speedup']:.1f}x |")
    lines += ["", g["reading"]]
    return "\n".join(lines) + "\n"


def goal(args, step_cost: dict, shape: dict, steps: dict, batches: dict, ceiling: float) -> dict:
    """Part 3: the fast layout's floors against the 5x budget."""
    base, fast = (steps[n] for n in LAYOUTS.values())
    row_len = batches["conversation"]["row_tokens"]
    sdpa = {name: sdpa_rate(shape, row_len, dtype, args.repeats)
            for name, dtype in (("float32", torch.float32), ("bfloat16", torch.bfloat16))}
    measured = max(b["gflops"]["attention"] for b in batches.values())  # inside the model's own passes
    best_attention = max(measured, *sdpa.values())
    bf16 = matmul_gflops(repeats=args.repeats, dtype="bfloat16")
    budget = base["step_s"] / 5
    cases = [("float32: every FLOP at the large float32 product's rate", ceiling, ceiling),
             ("float32: attention at the best SDPA rate measured here", ceiling, best_attention),
             ("bf16 linear maps (policy.autocast=bf16), attention at the best SDPA rate", bf16, best_attention)]
    floors = []
    for case, linear_rate, attention_rate in cases:
        seconds = floor_seconds(fast, linear_rate, attention_rate)
        floors.append({"case": case, "linear_gflops": linear_rate, "attention_gflops": attention_rate,
                       "seconds": seconds, "speedup": base["step_s"] / seconds, "within_budget": seconds <= budget})
    fp32 = floors[1]
    speedups = step_cost.get("speedups", {})
    bf16_case = floors[2]
    reading = (f"In float32, with attention at the best rate SDPA reaches here, conversation+compact's arithmetic "
               f"alone takes {fp32['seconds']:.2f} s against the {budget:.2f} s that 5x allows: at most "
               f"{fp32['speedup']:.1f}x over window+paper, before any env step, sampling or Python. "
               + ("So 5x at the same objective is out of reach on this machine with these kernels. "
                  if not fp32["within_budget"] else "So the arithmetic leaves room for 5x here. ")
               + (f"bf16 linear maps (policy.autocast=bf16, which changes samples and loss by rounding) would bring "
                  f"the floor to {bf16_case['seconds']:.2f} s ({bf16_case['speedup']:.1f}x). "
                  if bf16_case["seconds"] < fp32["seconds"] else
                  f"This CPU has no native bfloat16 (one large bf16 product: {bf16:.3g} GFLOP/s), so bf16 autocast "
                  f"cannot lower it. ")
               + "Measured in that step_cost run: "
               + ", ".join(f"{name} {speedups[name]['step_s']:.1f}x" for name in MEASURED if name in speedups) + ".")
    return {"step_cost": args.step_cost, "step_cost_date": step_cost["machine"].get("date"),
            "step_cost_matmul_gflops": step_cost["machine"].get("matmul_gflops"),
            "baseline_s": base["step_s"], "budget_s": budget, "linear_gflop": fast["linear_gflop"],
            "attention_gflop": fast["attention_gflop"], "sdpa_rows": f"{TOKEN_BUDGET // row_len} x {row_len}",
            "sdpa_gflops": sdpa, "attention_gflops_in_model": measured, "bf16_ceiling_gflops": bf16,
            "floors": floors, "reading": reading}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--vocab", type=int, default=406, help="vocabulary size (the demo's tokenizer: 406)")
    ap.add_argument("--step-cost", default=str(RESULTS / "step_cost.json"),
                    help="the step_cost.py result to count (run both on the same day)")
    ap.add_argument("--out", default=str(RESULTS / "update_roofline"))
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    load_start = [round(x, 2) for x in os.getloadavg()]
    from transformers import Qwen2ForCausalLM

    step_cost = json.loads(Path(args.step_cost).read_text())
    median = step_cost["median"]
    config = tiny_config(attn_implementation="sdpa")
    config.vocab_size = args.vocab
    model = Qwen2ForCausalLM(config)
    shape = model_shape(model)
    batches = {}
    for layout, name in LAYOUTS.items():
        w = median[name]
        row_len = round(w["train_row_tokens"] / w["train_rows"])
        per_row = max(1, round(w["trained_tokens"] / w["train_rows"]))
        batches[layout] = measure_micro_batch(model, shape, row_len, per_row, args.repeats)
    steps = {name: {**step_flops(shape, median[name], layout), "step_s": median[name]["step_s"]}
             for layout, name in LAYOUTS.items()}
    base, fast = (steps[n] for n in LAYOUTS.values())
    result = {
        "benchmark": "update_roofline", "threads": args.threads, "shape": shape,
        "ceiling_gflops": matmul_gflops(repeats=args.repeats), "micro_batches": batches, "steps": steps,
        "flop_ratio": base["step_gflop"] / fast["step_gflop"], "time_ratio": base["step_s"] / fast["step_s"],
        "load": load_record(load_start, args.threads),
        "machine": machine_info(),
    }
    rates = [v for b in batches.values() for v in b["gflops"].values()]
    result["reading"] = (
        f"The micro-batches' matrix products and attention run at {min(rates):.0f}-{max(rates):.0f} GFLOP/s "
        f"({min(rates) / result['ceiling_gflops']:.0%}-{max(rates) / result['ceiling_gflops']:.0%} of the large "
        f"product's rate); the steps' updates at {base['update_gflops']:.0f} (window+paper) and "
        f"{fast['update_gflops']:.0f} GFLOP/s (conversation+compact). The conversation layout does "
        f"{result['flop_ratio']:.1f}x fewer FLOPs per step (its long rows' attention is "
        f"{fast['update_attention_share']:.0%} of its update FLOPs, counted from mean lengths, so at least that); "
        f"the step-time ratio is {result['time_ratio']:.1f}x.")
    result["goal"] = goal(args, step_cost, shape, steps, batches, result["ceiling_gflops"])
    out = Path(args.out)
    out.with_suffix(".json").write_text(json.dumps(result, indent=2))
    out.with_suffix(".md").write_text(markdown(result))
    print(markdown(result))


if __name__ == "__main__":
    main()
