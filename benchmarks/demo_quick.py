"""How long ``creditflow demo --quick`` takes (its ``--help`` and the docs quote it; issue 90).

    python -m benchmarks.demo_quick [--repeats 2] [--threads N]

Runs ``creditflow demo --quick --out DIR`` (a fresh directory each time, seed 0) and records each wall time and CPU
time (user + system of the command's processes: about the wall time of a run on an idle machine with one core
free per thread, whatever else shares this one) with the machine and the load average before and after. Writes ``benchmarks/results/demo_quick.json``.
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.cache import write_json
from benchmarks.machine import machine_info

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "benchmarks" / "results" / "demo_quick.json"


def _children_cpu() -> float:
    """CPU seconds (user + system) of this process's finished children: what a run costs whatever else runs."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--threads", type=int, default=None, help="OMP_NUM_THREADS (default: torch's own)")
    args = ap.parse_args()
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TOKENIZERS_PARALLELISM": "false", "HF_HUB_OFFLINE": "1"}
    if args.threads:
        env["OMP_NUM_THREADS"] = str(args.threads)
    runs = []
    for _ in range(args.repeats):
        with tempfile.TemporaryDirectory() as tmp:
            before, t0, cpu0 = [round(x, 2) for x in os.getloadavg()], time.perf_counter(), _children_cpu()
            proc = subprocess.run([sys.executable, "-m", "creditflow", "demo", "--quick", "--out", f"{tmp}/demo",
                                   "seed=0"], capture_output=True, text=True, env=env, cwd=ROOT)
            seconds = time.perf_counter() - t0
            if proc.returncode != 0:
                raise SystemExit(f"demo --quick failed:\n{proc.stderr[-3000:]}")
            runs.append({"seconds": round(seconds, 1), "cpu_seconds": round(_children_cpu() - cpu0, 1),
                         "loadavg_before": before,
                         "loadavg_after": [round(x, 2) for x in os.getloadavg()]})
            print(f"demo --quick: {seconds:.1f} s", flush=True)
    write_json(OUT, {"command": "creditflow demo --quick --out DIR seed=0", "threads": args.threads or "torch default",
                     "machine": machine_info(), "runs": runs}, newline=True)
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
