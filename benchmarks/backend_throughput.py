"""Rollout throughput by generation backend: HF ``generate`` vs a colocated vLLM engine, same tasks.

    .venv-vllm/bin/python -m benchmarks.backend_throughput [--model DIR] [--tasks 8] [--group 8]

Runs the lockstep engine (B tasks x G rollouts of Sokoban) once with each backend after a warm-up
rollout, and reports env-steps/s and generated tokens/s, plus the vLLM engine's start time, its first
(cold) rollout and the time of one weight sync. Without ``--model`` it builds the tiny default policy
(untrained: it uses the whole response budget every turn). Writes
``benchmarks/results/rollout_throughput_vllm.{json,md}`` (``--out`` to change), with machine info and the
load average, since the machine may be shared.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

import torch


from benchmarks.machine import machine_info
from creditflow.config import build_config
from creditflow.envs.configured import env_factory
from creditflow.policy.backends.factory import close_backend, make_backend
from creditflow.recipes.sft import load_or_build_policy
from creditflow.recipes.sections import engine_settings
from creditflow.rollout.factory import make_engine
from creditflow.rollout.engine import TaskSpec


def measure(engine, specs, group) -> dict:
    engine.stats.__init__()
    t0 = time.perf_counter()
    trajs = engine.rollout(specs, group)
    seconds = time.perf_counter() - t0
    s = engine.stats
    return {"episodes": len(trajs), "env_steps": s.env_steps, "generated_tokens": s.generated_tokens,
            "generate_calls": s.generate_calls, "seconds": seconds, "generate_seconds": s.generate_seconds,
            "env_steps_per_s": s.env_steps / seconds, "tokens_per_s": s.generated_tokens / seconds,
            "generate_tokens_per_s": s.generated_tokens / s.generate_seconds}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=None)
    ap.add_argument("--tasks", type=int, default=8)
    ap.add_argument("--group", type=int, default=8)
    ap.add_argument("--max-new-tokens", type=int, default=16)
    ap.add_argument("--device", default="auto")
    ap.add_argument("--out", default=str(Path(__file__).parent / "results" / "rollout_throughput_vllm"))
    ap.add_argument("--note", default="", help="A line for the results (e.g. what else ran on the machine).")
    args = ap.parse_args()
    torch.manual_seed(0)
    load_before = os.getloadavg()
    results: dict = {}
    with tempfile.TemporaryDirectory() as tmp:
        base = [f"out_dir={tmp}", f"generation.max_new_tokens={args.max_new_tokens}", f"policy.device={args.device}"]
        base += [f"policy.model={args.model}"] if args.model else []
        cfg = build_config(None, base)
        factory = env_factory(cfg.env, cfg.rollout.max_steps)
        model, tok = load_or_build_policy(cfg, Path(tmp), factory, log=lambda *_: None)
        model_dir = Path(args.model) if args.model else Path(tmp) / "tiny_model"
        specs = [TaskSpec(f"sokoban/{s}", s) for s in range(args.tasks)]
        for name in ("hf", "vllm"):
            cfg = build_config(None, base + [f"policy.backend={name}"])
            t0 = time.perf_counter()
            backend = make_backend(cfg.policy, cfg.seed, model, tok, model_dir)
            start = time.perf_counter() - t0
            try:
                engine = make_engine(engine_settings(cfg), model, tok, factory, backend=backend)
                cold = measure(engine, [TaskSpec("warmup", 10_000)], 2)
                results[name] = measure(engine, specs, args.group)
                results[name].update(backend_start_s=start, cold_rollout_s=cold["seconds"])
                if name == "vllm":
                    t0 = time.perf_counter()
                    for _ in range(5):
                        backend.sync_weights(model)
                    results[name]["weight_sync_ms"] = (time.perf_counter() - t0) / 5 * 1000
            finally:
                close_backend(backend)
    result = {
        "benchmark": "rollout_throughput_vllm",
        "settings": {"tasks": args.tasks, "group": args.group, "max_new_tokens": args.max_new_tokens,
                     "model": args.model or "tiny default (untrained, 0.9M parameters)",
                     "env": "sokoban 6x6, 1 box, max 15 steps", "device": str(next(model.parameters()).device),
                     "dtype": str(next(model.parameters()).dtype)},
        **results,
        "vllm_vs_hf_env_steps": results["vllm"]["env_steps_per_s"] / results["hf"]["env_steps_per_s"],
        "vllm_vs_hf_generate_tokens": results["vllm"]["generate_tokens_per_s"] / results["hf"]["generate_tokens_per_s"],
        "load_average_before_after": [round(load_before[0], 2), round(os.getloadavg()[0], 2)],
        "torch_threads": os.environ.get("OMP_NUM_THREADS", "default"),
        "note": args.note,
        "machine": machine_info(),
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(result, indent=2))
    m = result["machine"]
    md = [
        "# Rollout throughput: HF generate vs colocated vLLM, same lockstep engine and tasks", "",
        f"Machine: {m['cpu']} ({m['cores']} cores), {m.get('gpu') or 'no GPU'}, torch {m.get('torch')}, {m['date']}; "
        f"device {result['settings']['device']}, {result['settings']['dtype']}; 1-min load average "
        f"{result['load_average_before_after'][0]} before, {result['load_average_before_after'][1]} after; "
        f"OMP_NUM_THREADS={result['torch_threads']}.", "",
        *([args.note, ""] if args.note else []),
        f"{args.tasks} tasks x {args.group} rollouts, up to {args.max_new_tokens} tokens per turn, "
        f"{result['settings']['model']}.", "",
        "| backend | env steps | generated tokens | seconds | env-steps/s | tokens/s | generation tokens/s | "
        "start s | cold rollout s |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for name in ("hf", "vllm"):
        r = result[name]
        md.append(f"| {name} | {r['env_steps']} | {r['generated_tokens']} | {r['seconds']:.1f} | "
                  f"{r['env_steps_per_s']:.1f} | {r['tokens_per_s']:.0f} | {r['generate_tokens_per_s']:.0f} | "
                  f"{r['backend_start_s']:.1f} | {r['cold_rollout_s']:.1f} |")
    md += ["", f"vLLM / HF: **{result['vllm_vs_hf_env_steps']:.2f}x** env-steps/s, "
               f"**{result['vllm_vs_hf_generate_tokens']:.2f}x** generation tokens/s. "
               f"One weight sync into the engine: {results['vllm']['weight_sync_ms']:.0f} ms.", ""]
    out.with_suffix(".md").write_text("\n".join(md))
    print("\n".join(md))


if __name__ == "__main__":
    main()
