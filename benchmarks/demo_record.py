"""One ``creditflow demo`` run with its defaults, as a user starts it, recorded (docs/results/demo-seeds.md).

    python -m benchmarks.demo_record [--work runs/demo_record] [key=value ...]

Runs the demo in its own process, times the whole command (tiny policy built, pi_SFT, RL, evaluations,
report) and copies what it wrote into ``benchmarks/results/``: ``demo_metrics.jsonl`` (every step's
metrics), ``demo_summary.md`` and ``demo_learning_curve.png`` (the report), and ``demo_machine.json``
(the command, wall time, machine, load average, and the held-out curve). Timings are only the demo's
on an otherwise idle machine; the load average says whether it was.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path


from benchmarks.machine import machine_info
from creditflow.trainer.metrics import read_metrics

RESULTS = Path(__file__).parent / "results"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--work", default="runs/demo_record", help="the demo's run directory (replaced)")
    ap.add_argument("extra", nargs="*", help="key=value overrides (none: the demo's defaults)")
    args = ap.parse_args()
    work = Path(args.work)
    if work.exists():
        shutil.rmtree(work)
    cmd = [sys.executable, "-m", "creditflow", "demo", "--out", str(work), *args.extra]
    load = os.getloadavg()
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True)
    minutes = (time.perf_counter() - t0) / 60
    rows = read_metrics(work / "metrics.jsonl")
    evals = [r for r in rows if "eval/success_rate" in r]
    record = {
        "command": "creditflow demo " + " ".join(args.extra) + " (defaults in creditflow/recipes/demo.py)",
        "wall_minutes": round(minutes, 1),
        "machine": machine_info(),
        "load_average_before_after": [list(load), list(os.getloadavg())],
        "held_out_greedy_success": {str(r["step"]): r["eval/success_rate"] for r in evals},
        "held_out_noop_frac": {str(r["step"]): r["eval/noop_frac"] for r in evals},
        "eval_episodes": int(evals[0]["eval/episodes"]),
    }
    shutil.copyfile(work / "metrics.jsonl", RESULTS / "demo_metrics.jsonl")
    shutil.copyfile(work / "report" / "summary.md", RESULTS / "demo_summary.md")
    shutil.copyfile(work / "report" / "learning_curve.png", RESULTS / "demo_learning_curve.png")
    (RESULTS / "demo_machine.json").write_text(json.dumps(record, indent=2) + "\n")
    print(f"demo: {minutes:.1f} min; held-out success {record['held_out_greedy_success']}")


if __name__ == "__main__":
    main()
