"""Rollout throughput: the batched lockstep engine vs. one env at a time, same model and settings.

    python -m benchmarks.rollout_throughput [--model DIR] [--tasks 8] [--group 8] [--sequential 16]

Without ``--model`` it builds the tiny default policy (untrained: it uses the whole response budget
every turn, which is the worst case for generation). Reports env-steps/s and generated tokens/s for
both, and their ratio; writes ``benchmarks/results/rollout_throughput.{json,md}`` with machine info.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import torch


from benchmarks.machine import machine_info
from creditflow.config import build_config
from creditflow.rollout.engine import TaskSpec
from creditflow.envs.configured import env_factory
from creditflow.recipes.sft import load_or_build_policy
from creditflow.recipes.sections import engine_settings
from creditflow.rollout.factory import make_engine


def measure(engine, specs, group):
    engine.stats.__init__()
    t0 = time.perf_counter()
    trajs = engine.rollout(specs, group)
    seconds = time.perf_counter() - t0
    return {"episodes": len(trajs), "env_steps": engine.stats.env_steps,
            "generated_tokens": engine.stats.generated_tokens, "generate_calls": engine.stats.generate_calls,
            "seconds": seconds, "env_steps_per_s": engine.stats.env_steps / seconds,
            "tokens_per_s": engine.stats.generated_tokens / seconds}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=None)
    ap.add_argument("--tasks", type=int, default=8)
    ap.add_argument("--group", type=int, default=8)
    ap.add_argument("--sequential", type=int, default=16, help="episodes run one at a time")
    ap.add_argument("--max-new-tokens", type=int, default=16)
    ap.add_argument("--out", default=str(Path(__file__).parent / "results" / "rollout_throughput"))
    args = ap.parse_args()
    torch.manual_seed(0)
    with tempfile.TemporaryDirectory() as tmp:
        cfg = build_config(None, [f"out_dir={tmp}", f"generation.max_new_tokens={args.max_new_tokens}"]
                           + ([f"policy.model={args.model}"] if args.model else []))
        factory = env_factory(cfg.env, cfg.rollout.max_steps)
        model, tok = load_or_build_policy(cfg, Path(tmp), factory, log=lambda *_: None)
        engine = make_engine(engine_settings(cfg), model, tok, factory)
        engine.rollout([TaskSpec("warmup", 0)], 2)  # warm-up
        specs = [TaskSpec(f"sokoban/{s}", s) for s in range(args.tasks)]
        batched = measure(engine, specs, args.group)
        seq_runs = [measure(engine, [TaskSpec(f"sokoban/{s}", s)], 1) for s in range(args.sequential)]
    sequential = {k: sum(r[k] for r in seq_runs) for k in ("episodes", "env_steps", "generated_tokens",
                                                          "generate_calls", "seconds")}
    sequential["env_steps_per_s"] = sequential["env_steps"] / sequential["seconds"]
    sequential["tokens_per_s"] = sequential["generated_tokens"] / sequential["seconds"]
    result = {
        "benchmark": "rollout_throughput",
        "settings": {"tasks": args.tasks, "group": args.group, "sequential_episodes": args.sequential,
                     "max_new_tokens": args.max_new_tokens, "model": args.model or "tiny default (untrained)",
                     "env": "sokoban 6x6, 1 box, max 15 steps", "device": str(next(model.parameters()).device)},
        "batched": batched,
        "sequential": sequential,
        "speedup_env_steps": batched["env_steps_per_s"] / sequential["env_steps_per_s"],
        "speedup_tokens": batched["tokens_per_s"] / sequential["tokens_per_s"],
        "machine": machine_info(),
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(result, indent=2))
    md = [
        "# Rollout throughput: batched lockstep engine vs one env at a time", "",
        f"Machine: {result['machine']['cpu']} ({result['machine']['cores']} cores), torch "
        f"{result['machine']['torch']}, {result['machine']['date']}", "",
        "| mode | episodes | env steps | generated tokens | seconds | env-steps/s | tokens/s |",
        "|---|---|---|---|---|---|---|",
    ]
    for name in ("batched", "sequential"):
        r = result[name]
        md.append(f"| {name} | {r['episodes']} | {r['env_steps']} | {r['generated_tokens']} | {r['seconds']:.1f} | "
                  f"{r['env_steps_per_s']:.1f} | {r['tokens_per_s']:.0f} |")
    md += ["", f"Speed-up: **{result['speedup_env_steps']:.1f}x** env-steps/s, "
               f"**{result['speedup_tokens']:.1f}x** tokens/s.", ""]
    out.with_suffix(".md").write_text("\n".join(md))
    print("\n".join(md))


if __name__ == "__main__":
    main()
