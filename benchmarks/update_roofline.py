"""Why the RL step stops near 2x on the 2-core CPU: the tiny policy's passes are compute-bound.

    python benchmarks/update_roofline.py [--threads 2] [--repeats 3]

Part 1, measured: one forward + backward of a micro-batch of the tiny policy's architecture (random
weights: the rate does not depend on them) on rows as long as ``step_cost.py``'s median trained rows in
each layout (``window``: ~431 tokens, ``conversation``: ~1142), about ``rl.token_budget`` (16,384) tokens
each, the LM head applied at the trained positions only, as the update does it. The profiler splits the
time into matrix products, attention and the rest; each gets its FLOPs (counted from the shapes) and the
rate reached, next to the rate of one large matrix product on the same machine (the ceiling).

Part 2, arithmetic on the committed ``benchmarks/results/step_cost.json``: the FLOPs of one median step
of ``window``+``paper`` and of ``conversation``+``compact`` (linear layers exactly from the token counts
each step recorded; attention from the mean prompt / row / episode length, which undercounts it), and
their ratio: the most that changing the layout can buy on a machine whose time follows the FLOPs.

Writes ``benchmarks/results/update_roofline.{json,md}`` with machine info and the machine's load.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.machine import machine_info, matmul_gflops  # noqa: E402
from creditflow.policy.model import tiny_config  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
LAYOUTS = {"window": "window+paper", "conversation": "conversation+compact"}  # step_cost.json's names
TOKEN_BUDGET = 16384  # rl.token_budget's default: the tokens of one update micro-batch
FWD_BWD = {"linear": 3.0, "attention": 3.5}  # fwd+bwd / fwd: backward = 2 products per product; flash
#   attention's backward recomputes the scores (5 products against the forward's 2)
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


def measure_micro_batch(model, shape: dict, row_len: int, trained_per_row: int, repeats: int) -> dict:
    rows = max(1, TOKEN_BUDGET // row_len)
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(3, shape["vocab"], (rows, row_len), generator=gen)

    def step():
        hidden = model.model(input_ids=ids).last_hidden_state[:, -trained_per_row:]
        logits = model.lm_head(hidden)
        logits.float().logsumexp(-1).mean().backward()

    step()  # warm-up
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        step()
        times.append(time.perf_counter() - t)
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
    seconds = statistics.median(times)
    return {"rows": rows, "row_tokens": row_len, "trained_per_row": trained_per_row, "seconds": seconds,
            "profile_share": {k: v / total for k, v in by_kind.items()},
            "gflop": {k: v / 1e9 for k, v in work.items()},
            # the profiled time per kind, scaled to the unprofiled median
            "gflops": {k: work[k] / 1e9 / (by_kind[k] / total * seconds) for k in work}}


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
           "update_attention_share": update["attention"] / sum(update.values())}
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
        f"Machine: {m['cpu']} ({m['cores']} cores), torch {m.get('torch')}, {r['threads']} torch thread(s), "
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
    lines += ["", "## One RL step of step_cost.json (medians), counted", "",
              "| layout | rollout GFLOP | update GFLOP (attention share) | step GFLOP | rollout GFLOP/s | "
              "update GFLOP/s | step s |", "|---|---|---|---|---|---|---|"]
    for name, f in r["steps"].items():
        lines.append(f"| {name} | {f['rollout_gflop']:.0f} | {f['update_gflop']:.0f} "
                     f"({f['update_attention_share']:.0%}) | {f['step_gflop']:.0f} | {f['rollout_gflops']:.0f} | "
                     f"{f['update_gflops']:.0f} | {f['step_s']:.2f} |")
    lines += ["", f"FLOP ratio window+paper / conversation+compact: **{r['flop_ratio']:.2f}x** per step "
                  f"(measured step-time ratio {r['time_ratio']:.2f}x).", "", r["reading"]]
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--vocab", type=int, default=406, help="vocabulary size (the demo's tokenizer: 406)")
    ap.add_argument("--out", default=str(RESULTS / "update_roofline"))
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    load_start = [round(x, 2) for x in os.getloadavg()]
    from transformers import Qwen2ForCausalLM

    step_cost = json.loads((RESULTS / "step_cost.json").read_text())
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
    out = Path(args.out)
    out.with_suffix(".json").write_text(json.dumps(result, indent=2))
    out.with_suffix(".md").write_text(markdown(result))
    print(markdown(result))


if __name__ == "__main__":
    main()
