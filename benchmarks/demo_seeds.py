"""The main job's bar: ``creditflow demo`` with its defaults, held-out greedy success before and after RL.

    python -m benchmarks.demo_seeds [--seeds 0 1 2] [--eval-levels 512] [--test-levels 512] [--name demo_seeds]
                                    [key=value ...]

(after ``--seeds``, put ``--`` before the overrides: ``--seeds 0 1 2 -- rl.eval_every=0``)

Each seed is one full ``creditflow demo`` run in its own process, exactly as a user starts it (tiny policy
built, pi_SFT fine-tuned, RL, report), with ``seed=<seed>`` and the held-out evaluation widened to
``--eval-levels`` validation levels at step 0 (pi_SFT) and at the end; ``--test-levels N`` also evaluates N
levels of the test split there (``rl.test_episodes``; docs/environments.md "Evaluation splits": validation is
what the demo's settings were chosen on, test was never used for a choice). ``key=value`` overrides go to every
run (a sweep arm gets its own ``--name``). Wall time is the whole command, SFT and evaluations included.
``--from NAME ...`` takes seeds already recorded under other names with the same overrides and levels
(seeds added later under their own names) instead of rerunning them.

Writes ``benchmarks/results/<name>.json`` in the issue's format::

    {"eval_levels": 512, "runs": [{"seed": 0, "sft_success": ..., "final_success": ..., "minutes": ...}, ...]}

(with ``--test-levels``: ``test_levels`` and per run ``sft_test_success`` / ``final_test_success``, and the test
gain's ``test_mean_gain`` / ``test_gain_ci95`` / ``test_gain_t95`` beside the validation ones)

plus the mean gain with its 95% stratified-bootstrap interval over seeds, machine info and the load average
of each run (timings are only comparable on an idle machine). Resumable: each finished seed is kept in
``<name>_runs/s<seed>.json`` (commit it as it lands); a rerun with the same overrides skips it.
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

import numpy as np


from benchmarks.stats import interval_estimates, t_interval
from benchmarks.machine import machine_info
from creditflow.trainer.metrics import read_metrics

RESULTS = Path(__file__).parent / "results"


def run_seed(seed: int, levels: int, overrides: list[str], work: Path, test_levels: int = 0) -> dict:
    """One ``creditflow demo`` run; its held-out success at step 0 and at the end, and its wall time."""
    out = work / f"s{seed}"
    cmd = [sys.executable, "-m", "creditflow", "demo", f"out_dir={out}", f"seed={seed}",
           f"rl.eval_episodes={levels}", f"rl.test_episodes={test_levels}", *overrides]
    resumed = (out / "checkpoints" / "latest").exists()
    if resumed:  # an interrupted run: its RL continues exactly from its last checkpoint (SFT is done)
        cmd = [sys.executable, "-m", "creditflow", "train", "--resume", str(out)]
    elif out.exists():  # interrupted before RL's first checkpoint: nothing to keep
        shutil.rmtree(out)
    load = os.getloadavg()[0]
    t0 = time.perf_counter()
    with open(work / f"s{seed}.log", "a" if resumed else "w") as log:
        subprocess.run(cmd, check=True, stdout=log, stderr=subprocess.STDOUT)
    minutes = (time.perf_counter() - t0) / 60
    rows = read_metrics(out / "metrics.jsonl")
    evals = [(r["step"], r["eval/success_rate"]) for r in rows if "eval/success_rate" in r]
    run = {"seed": seed, "sft_success": evals[0][1], "final_success": evals[-1][1], "minutes": round(minutes, 2),
           "curve": evals, "train_success": [r["train/success_rate"] for r in rows if "train/success_rate" in r],
           "load_average_before_after": [round(load, 2), round(os.getloadavg()[0], 2)]}
    if resumed:
        run["resumed"] = "minutes count only the part after the resume"
    tests = [r["test/success_rate"] for r in rows if "test/success_rate" in r]
    if test_levels:
        run.update({"sft_test_success": tests[0], "final_test_success": tests[-1]})
    return run


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--eval-levels", type=int, default=512)
    ap.add_argument("--test-levels", type=int, default=0, help="also evaluate this many test-split levels")
    ap.add_argument("--name", default="demo_seeds", help="results file name (a sweep arm gets its own)")
    ap.add_argument("--work", default="runs/demo_seeds")
    ap.add_argument("--from", dest="sources", nargs="+", default=[], metavar="NAME",
                    help="also take seeds recorded under these names (same overrides and levels) instead of rerunning")
    ap.add_argument("extra", nargs="*", help="key=value overrides for every run (none: the demo's defaults)")
    args = ap.parse_args()
    records = RESULTS / f"{args.name}_runs"
    work = Path(args.work) / args.name
    work.mkdir(parents=True, exist_ok=True)
    runs = []
    key = {"overrides": args.extra, "eval_levels": args.eval_levels}
    if args.test_levels:  # (absent from the keys of runs made without a test split)
        key["test_levels"] = args.test_levels
    for seed in args.seeds:
        path = records / f"s{seed}.json"
        found = [p for p in [path, *(RESULTS / f"{n}_runs" / f"s{seed}.json" for n in args.sources)]
                 if p.exists() and json.loads(p.read_text())["key"] == key]
        if found:
            runs.append(json.loads(found[0].read_text())["run"])
            print(f"seed {seed}: recorded in {found[0].parent.name}", flush=True)
            continue
        run = run_seed(seed, args.eval_levels, args.extra, work, args.test_levels)
        records.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"key": key, "run": run, "machine": machine_info()}, indent=1))
        runs.append(run)
        print(f"seed {seed}: {run['sft_success']:.3f} -> {run['final_success']:.3f} ({run['minutes']:.1f} min)",
              flush=True)
    gains = [r["final_success"] - r["sft_success"] for r in runs]
    interval = interval_estimates(gains)
    fields = ("seed", "sft_success", "final_success", "minutes")
    if args.test_levels:
        fields += ("sft_test_success", "final_test_success")
    result = {"eval_levels": args.eval_levels, "overrides": args.extra,
              "runs": [{k: r[k] for k in fields} for r in runs],
              "mean_gain": float(np.mean(gains)), "gains": gains,
              # 95% stratified-bootstrap interval of the mean gain over seeds, and the IQM (benchmarks/learning.py)
              "gain_ci95": interval["ci95"], "gain_iqm": interval["iqm"], "gain_t95": t_interval(gains),
              "sources": [f"{n}_runs" for n in [args.name, *args.sources]],
              "max_minutes": max(r["minutes"] for r in runs),
              "details": runs, "machine": machine_info()}
    if args.test_levels:
        test_gains = [r["final_test_success"] - r["sft_test_success"] for r in runs]
        result.update({"test_levels": args.test_levels, "test_mean_gain": float(np.mean(test_gains)),
                       "test_gains": test_gains, "test_gain_ci95": interval_estimates(test_gains)["ci95"],
                       "test_gain_t95": t_interval(test_gains)})
    (RESULTS / f"{args.name}.json").write_text(json.dumps(result, indent=2))
    ci = f" [{result['gain_ci95'][0]:+.3f}, {result['gain_ci95'][1]:+.3f}]" if result["gain_ci95"] else ""
    print(f"mean gain {result['mean_gain']:+.3f}{ci} over {len(runs)} seeds -> {RESULTS / (args.name + '.json')}")
    if args.test_levels:
        lo, hi = result["test_gain_ci95"] or (float("nan"), float("nan"))
        print(f"test split: mean gain {result['test_mean_gain']:+.3f} [{lo:+.3f}, {hi:+.3f}]")


if __name__ == "__main__":
    main()
