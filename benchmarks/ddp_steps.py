"""RL steps/s with one process and with two data-parallel processes (``accelerate launch``) on this machine.

    python -m benchmarks.ddp_steps [--steps 4] [--tasks 8] [--work runs/ddp_steps]

The policy is the default tiny one (Qwen2 architecture, hidden 128, 4 layers), fine-tuned once by
``creditflow sft`` on 64 expert demos (1 epoch; cached under ``--work``) so that episodes have the lengths of
a policy that plays. Each configuration then runs ``creditflow train`` from it as a command line, exactly as
a user would: ``--tasks`` tasks x 4 rollouts per step, 16 new tokens, GRPO, the default KL term (so the
reference forward pass and the update run every step), same seed:

* 1 process x 1 torch thread (``python -m creditflow train``),
* 1 process x 2 torch threads (the same, using both cores),
* 2 processes x 1 torch thread (``accelerate launch --config_file configs/accelerate/ddp.yaml``, gloo).

Steps/s is 1 / the median of ``time/step_s`` over the steps after the first (warm-up); under two processes
``time/step_s`` is the slower process's. Env steps/s counts the episodes' steps of every process. Writes
``benchmarks/results/ddp_steps.{json,md}`` with machine info and the load average at start and end (other
jobs may share the cores; the note says so).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path


from benchmarks.machine import machine_info

ROOT = Path(__file__).resolve().parents[1]

ACCELERATE = Path(sys.executable).with_name("accelerate")
SETTINGS = ["rollout.group_size=4", "generation.max_new_tokens=16", "env.kwargs.describe_positions=true",
            "rl.eval_every=0", "rl.eval_episodes=4", "rl.save_every=0", "tensorboard=false", "policy.device=cpu"]
CONFIGS = {  # name: (processes, torch threads per process)
    "1 process x 1 thread": (1, 1),
    "1 process x 2 threads": (1, 2),
    "2 processes x 1 thread": (2, 1),
}


def env(threads: int) -> dict:
    return {**os.environ, "OMP_NUM_THREADS": str(threads), "TOKENIZERS_PARALLELISM": "false", "HF_HUB_OFFLINE": "1"}


def sft_model(work: Path) -> Path:
    """pi_SFT of the default tiny policy (built and fine-tuned once, then reused)."""
    model = work / "sft" / "sft_model"
    if not (model / "config.json").exists():
        subprocess.run([sys.executable, "-m", "creditflow", "sft", "--out", str(work / "sft"), "sft.demos=64",
                        "sft.epochs=1", "sft.batch_size=16", "env.kwargs.describe_positions=true",
                        "policy.device=cpu"], check=True, env=env(2), cwd=ROOT)
    return model


def run(name: str, processes: int, threads: int, model: Path, out: Path, steps: int, tasks: int) -> dict:
    """One ``creditflow train`` command line; its per-step times from metrics.jsonl."""
    args = ["-m", "creditflow", "train", "--model", str(model), "--out", str(out), f"rl.steps={steps}",
            f"rollout.tasks_per_step={tasks}", *SETTINGS]
    if processes == 1:
        cmd = [sys.executable, *args]
    else:
        cmd = [str(ACCELERATE), "launch", "--config_file", str(ROOT / "configs" / "accelerate" / "ddp.yaml"),
               "--num_processes", str(processes), *args]
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, env=env(threads), cwd=ROOT, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines() if line.strip()]
    timed = [r for r in rows if r["step"] >= 2]  # step 1 warms up
    step_s = statistics.median(r["time/step_s"] for r in timed)
    env_steps = statistics.median(b["env_steps"] - a["env_steps"] for a, b in zip(rows[1:], rows[2:]))
    result = {
        "name": name, "processes": processes, "threads": threads, "command": " ".join(cmd[:8]) + " ...",
        "steps_per_s": 1.0 / step_s, "step_s": step_s, "env_steps_per_s": env_steps / step_s,
        "rollout_s": statistics.median(r["time/rollout_s"] for r in timed),
        "update_s": statistics.median(r["time/update_s"] for r in timed),
        "ref_s": statistics.median(r["time/ref_s"] for r in timed),
        "episodes": timed[0]["train/episodes"], "world_size": timed[0]["dist/world_size"],
        "wall_s": wall, "step_times": [r["time/step_s"] for r in rows if r["step"] >= 1],
    }
    print(name, {k: round(v, 3) if isinstance(v, float) else v for k, v in result.items() if k != "step_times"},
          flush=True)
    return result


def markdown(result: dict) -> str:
    m, s = result["machine"], result["settings"]
    lines = [
        "# RL steps/s: one process vs two data-parallel processes", "",
        f"Machine: {m['cpu']} ({m['cores']} cores), torch {m['torch']}, {m['date']}. Load average at start "
        f"{result['load']['start']}, at end {result['load']['end']} ({result['load']['note']}).", "",
        f"`creditflow train` from the tiny default policy after a short SFT ({s['sft']}): {s['tasks']} tasks x "
        f"{s['group']} rollouts per step, {s['max_new_tokens']} new tokens, GRPO with the default KL term, "
        f"{s['steps']} steps; median over steps 2..{s['steps']} (step 1 warms up). Two processes run through "
        "`accelerate launch --config_file configs/accelerate/ddp.yaml --num_processes 2` (gloo); each rolls "
        "out half of the tasks and the gradients are summed.", "",
        "| configuration | steps/s | step s | rollout s | ref s | update s | env steps/s | episodes/step | "
        "every step's s | wall s (with start-up) |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in result["runs"]:
        each = ", ".join(f"{t:.1f}" for t in r["step_times"])
        lines.append(f"| {r['name']} | **{r['steps_per_s']:.3f}** | {r['step_s']:.2f} | {r['rollout_s']:.2f} | "
                     f"{r['ref_s']:.2f} | {r['update_s']:.2f} | {r['env_steps_per_s']:.1f} | {r['episodes']} | "
                     f"{each} | {r['wall_s']:.0f} |")
    lines += ["", result["notes"], ""]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--tasks", type=int, default=8, help="tasks per step (even: two processes split them)")
    ap.add_argument("--work", default="runs/ddp_steps", help="pi_SFT cache and the runs")
    ap.add_argument("--out", default=str(Path(__file__).parent / "results" / "ddp_steps"))
    ap.add_argument("--markdown", action="store_true", help="only rewrite OUT.md from OUT.json")
    args = ap.parse_args()
    out = Path(args.out)
    if args.markdown:
        out.with_suffix(".md").write_text(markdown(json.loads(out.with_suffix(".json").read_text())))
        return
    work = Path(args.work).resolve()
    model = sft_model(work)
    load_start = [round(x, 2) for x in os.getloadavg()]
    stamp = time.strftime("%H%M%S")
    runs = [run(name, p, t, model, work / f"{stamp}_{p}x{t}", args.steps, args.tasks)
            for name, (p, t) in CONFIGS.items()]
    load_end = [round(x, 2) for x in os.getloadavg()]
    busy = max(load_start[0], load_end[0]) > 1.0
    machine = machine_info()
    one, two = runs[0], runs[2]
    notes = (f"Two processes against one single-threaded process: {two['steps_per_s'] / one['steps_per_s']:.2f}x "
             f"steps/s; against one process with both cores' threads: "
             f"{two['steps_per_s'] / runs[1]['steps_per_s']:.2f}x. "
             f"On {machine['cores']} CPU cores a speed-up is not expected: the processes share the cores the "
             "single process can use as threads, and each adds a gradient all-reduce and a gather of the "
             "trajectories per step. The table shows that the data-parallel path is real and what it costs here; "
             "data parallelism pays where each process has its own GPU.")
    result = {
        "benchmark": "ddp_steps",
        "machine": machine,
        "settings": {"tasks": args.tasks, "group": 4, "max_new_tokens": 16, "steps": args.steps,
                     "sft": "64 expert demos x 1 epoch", "overrides": SETTINGS},
        "load": {"start": load_start, "end": load_end,
                 "note": "other jobs were running on the cores" if busy else "the machine was otherwise idle"},
        "runs": runs,
        "notes": notes,
    }
    out.with_suffix(".json").write_text(json.dumps(result, indent=2) + "\n")
    out.with_suffix(".md").write_text(markdown(result))
    print(markdown(result))


if __name__ == "__main__":
    main()
