"""What docs/real_model.md's commands cost: SFT of SmolLM2-135M-Instruct on Sokoban's expert, then RewardFlow RL
from π_SFT, on this machine's CPU, at the page's tiny budgets (issue 90).

    python -m benchmarks.smollm2_train [--model models/smollm2] [--work runs/smollm2_train] [--threads N]

Runs the page's two commands as written (``SFT`` and ``RL`` below; the page quotes them from here), each as a
``creditflow`` process, and records the wall time of each, the seconds per SFT optimizer step (the SFT phase's time, as its closing log
line says, over its steps), π_SFT's held-out success as ``sft`` printed it, and per RL step the phase times
of ``metrics.jsonl`` (rollout, reference log-probs, update), with the size of one checkpoint, the machine and the
load average before and after. Writes ``benchmarks/results/smollm2_train.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shlex
import subprocess
import sys
import time
from pathlib import Path

from benchmarks.cache import write_json
from benchmarks.machine import machine_info

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "benchmarks" / "results" / "smollm2_train.json"

# the page's commands (docs/real_model.md), {model} and {work} filled in
SFT = ("creditflow sft --env sokoban --model {model} --out {work}/sft policy.device=cpu seed=0 sft.demos=8 "
       "sft.epochs=2 sft.batch_size=4 sft.lr=1e-4 sft.max_length=1024 rl.eval_episodes=4 rollout.max_steps=5 "
       "generation.max_new_tokens=48")
RL = ("creditflow train --algo rewardflow --model {work}/sft/sft_model --out {work}/rf policy.device=cpu seed=0 "
      "rl.steps=2 rollout.tasks_per_step=1 rollout.group_size=4 rollout.max_steps=5 generation.max_new_tokens=48 "
      "rl.lr=1e-6 rl.eval_every=0 rl.eval_episodes=4 rl.save_every=1 logging.report_to=none")


def _children_cpu() -> float:
    """CPU seconds (user + system) of this process's finished children."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run(command: str, threads: int | None) -> dict:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TOKENIZERS_PARALLELISM": "false", "HF_HUB_OFFLINE": "1"}
    if threads:
        env["OMP_NUM_THREADS"] = str(threads)
    argv = shlex.split(command)
    before, t0, cpu0 = [round(x, 2) for x in os.getloadavg()], time.perf_counter(), _children_cpu()
    proc = subprocess.run([sys.executable, "-m", "creditflow", *argv[1:]], capture_output=True, text=True, env=env,
                          cwd=ROOT)
    seconds = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"{argv[:2]} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return {"command": command, "seconds": round(seconds, 1), "cpu_seconds": round(_children_cpu() - cpu0, 1),
            "loadavg_before": before,
            "loadavg_after": [round(x, 2) for x in os.getloadavg()], "log": proc.stderr.strip().splitlines()[-16:]}


def phase_seconds(log: list[str], prefix: str) -> float | None:
    """The duration of the phase whose closing line (``SFT: 5/5 steps in 0:02:13``, a log that is not a terminal)
    starts with ``prefix``."""
    for line in log:
        if line.startswith(prefix) and " steps in " in line:
            h, m, sec = line.rsplit(" ", 1)[-1].split(":")
            return int(h) * 3600 + int(m) * 60 + int(sec)
    return None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="models/smollm2")
    ap.add_argument("--work", default="runs/smollm2_train")
    ap.add_argument("--threads", type=int, default=None, help="OMP_NUM_THREADS (default: torch's own, every core)")
    args = ap.parse_args()
    work = Path(args.work)
    if work.exists():
        raise SystemExit(f"{work} exists: give another --work or remove it")
    fill = {"model": args.model, "work": args.work}
    record = {"machine": machine_info(), "threads": args.threads or "torch default", "model": args.model}
    sft = run(SFT.format(**fill), args.threads)
    metrics = json.loads((work / "sft" / "sft_metrics.json").read_text())
    runtime = phase_seconds(sft["log"], "SFT: ")
    sft.update(steps=metrics["sft/steps"], examples=metrics["sft/examples"], train_loss=metrics["sft/train_loss"],
               train_seconds=runtime, seconds_per_step=round(runtime / metrics["sft/steps"], 1) if runtime else None,
               eval={k: metrics[k] for k in metrics if k.startswith("eval/")})
    record["sft"] = sft
    rl = run(RL.format(**fill), args.threads)
    rows = [json.loads(line) for line in (work / "rf" / "metrics.jsonl").read_text().splitlines() if line.strip()]
    rl["steps"] = [{k: (round(v, 2) if isinstance(v, float) else v) for k, v in r.items()
                    if k.startswith("time/") or k in ("step", "train/success_rate", "train/invalid_frac",
                                                       "train/samples", "train/update_skipped", "train/grad_norm",
                                                       "eval/success_rate")} for r in rows]
    ckpt = sorted((work / "rf" / "checkpoints").glob("step_*"))[-1]
    rl["checkpoint_bytes"] = sum(f.stat().st_size for f in ckpt.rglob("*") if f.is_file())
    rl["optimizer_bytes"] = (ckpt / "optimizer.pt").stat().st_size
    record["rl"] = rl
    write_json(OUT, record, newline=True)
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
