"""Step cost of two checkouts, interleaved: is a change (B) slower than its parent (A)?

    git worktree add /tmp/parent <parent-commit>
    python -m benchmarks.step_cost_ab --a /tmp/parent --b . [--reps 2] [--steps 3] [--note "what else ran"]

Runs ``python -m benchmarks.step_cost --setting demo`` of each checkout, started in it with it on ``PYTHONPATH``,
in the order A B A B ... (``--reps`` each), so that load from other jobs falls on both alike; every run starts from
the same cached pi_SFT (``--models``) and takes the same seeded steps. The medians of each checkout's steps
(all runs pooled) are compared per layout, next to the spread of each checkout's per-run medians (run-to-run
noise). Writes ``benchmarks/results/step_cost_ab.{json,md}`` with machine info and the load before and after.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import tempfile
import time
from pathlib import Path


from benchmarks.machine import cpu_label, machine_info
from benchmarks.runner import child_env, module_command
from benchmarks.step_cost import load_snapshot

PHASES = ("step_s", "rollout_s", "update_s")


def git_commit(tree: Path) -> str:
    out = subprocess.run(["git", "-C", str(tree), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    dirty = subprocess.run(["git", "-C", str(tree), "status", "--porcelain", "--untracked-files=no"],
                           capture_output=True, text=True).stdout.strip()
    return out.stdout.strip() + (" (with uncommitted changes)" if dirty else "")


def run(tree: Path, steps: int, models: Path, out: Path) -> dict:
    """One ``step_cost.py --setting demo`` run of ``tree``'s code; its JSON result."""
    # started in ``tree``: ``-m`` puts the working directory first on sys.path, so ``benchmarks`` is that tree's
    env = child_env(tree, OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "1"))
    subprocess.run(module_command("benchmarks.step_cost", "--setting", "demo", "--steps", str(steps), "--models",
                                  str(models.resolve()), "--out", str(out.resolve())), env=env, check=True,
                   cwd=tree, stdout=subprocess.DEVNULL)
    return json.loads(out.with_suffix(".json").read_text())


def summary(runs: list[dict]) -> dict:
    """Per layout and phase: the median over every step of the runs, and each run's own median."""
    layouts = runs[0]["steps"]
    return {layout: {phase: {"median": statistics.median(s[phase] for r in runs for s in r["steps"][layout]),
                             "per_run": [statistics.median(s[phase] for s in r["steps"][layout]) for r in runs]}
                     for phase in PHASES} for layout in layouts}


def markdown(result: dict) -> str:
    m, s = result["machine"], result["settings"]
    lines = [
        f"# Step cost, interleaved: {result['b']['commit']} (B) against {result['a']['commit']} (A)", "",
        f"Machine: {cpu_label(m)} ({m['cores']} cores), torch {m['torch']}, {m['date']}; matmul "
        f"{m.get('matmul_gflops')} GFLOP/s. Load average at start {result['load']['start']['loadavg']}, at end "
        f"{result['load']['end']['loadavg']}.", "",
        f"`python -m benchmarks.step_cost --setting demo` (creditflow demo's RL step), {s['steps']} seeded steps "
        f"per run, runs in the order {' '.join(result['order'])}, every run from the same cached pi_SFT. Medians over "
        f"every step of a checkout's runs; in brackets each run's own median (the run-to-run noise).", "",
        "| layout | phase | A s | B s | B / A |", "|---|---|---|---|---|",
    ]
    for layout, phases in result["b"]["summary"].items():
        for phase in PHASES:
            a, b = result["a"]["summary"][layout][phase], phases[phase]
            runs = lambda x: ", ".join(f"{v:.2f}" for v in x["per_run"])  # noqa: E731
            lines.append(f"| {layout} | {phase} | {a['median']:.2f} [{runs(a)}] | {b['median']:.2f} [{runs(b)}] | "
                         f"{b['median'] / a['median']:.3f} |")
    lines += ["", result["note"], ""]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--a", required=True, help="the reference checkout (e.g. the parent commit's worktree)")
    ap.add_argument("--b", default=str(Path(__file__).resolve().parents[1]), help="the changed checkout")
    ap.add_argument("--reps", type=int, default=2, help="runs of each checkout, interleaved")
    ap.add_argument("--steps", type=int, default=3, help="RL steps per run")
    ap.add_argument("--models", default="runs/step_cost_models", help="the cached pi_SFT (built on first use)")
    ap.add_argument("--note", default="", help="what else ran on the machine meanwhile")
    ap.add_argument("--out", default=str(Path(__file__).parent / "results" / "step_cost_ab"))
    args = ap.parse_args()
    trees = {"A": Path(args.a).resolve(), "B": Path(args.b).resolve()}
    models = Path(args.models).resolve()
    t0 = time.perf_counter()
    load_start = load_snapshot()
    runs: dict[str, list[dict]] = {"A": [], "B": []}
    order = []
    with tempfile.TemporaryDirectory() as tmp:
        for rep in range(args.reps):
            for name, tree in trees.items():
                runs[name].append(run(tree, args.steps, models, Path(tmp) / f"{name}{rep}"))
                order.append(name)
                print(name, rep, {layout: round(statistics.median(s["step_s"] for s in steps), 2)
                                  for layout, steps in runs[name][-1]["steps"].items()}, flush=True)
    result = {
        "benchmark": "step_cost_ab",
        "settings": {"setting": "demo", "steps": args.steps, "reps": args.reps},
        "order": order,
        **{name.lower(): {"tree": str(tree), "commit": git_commit(tree), "summary": summary(runs[name]),
                          "steps": [r["steps"] for r in runs[name]]} for name, tree in trees.items()},
        "load": {"start": load_start, "end": load_snapshot()},
        "benchmark_minutes": round((time.perf_counter() - t0) / 60, 1),
        "machine": machine_info(),
        "note": args.note,
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(result, indent=2))
    out.with_suffix(".md").write_text(markdown(result))
    print(markdown(result))


if __name__ == "__main__":
    main()
