"""How fast is credit assignment? ms per batch for every registered estimator, side by side with a
straightforward implementation of the official RewardFlow propagation (networkx graph, 1000 synchronous
Bellman-max sweeps, no early stop) kept here as the reference.

Two tables. *Estimators*: ``creditflow.credit.compute`` (in place on Trajectory objects, the trainer's
path) for each estimator. *Public paths* (RewardFlow, as a new user calls it, measured in the same run as
the reference): ``score`` on JSONL-schema dicts, ``score`` on Trajectory objects, ``score_arrays`` on
one-row-per-step columns, and ``creditflow credit`` minus reading its input: from the parsed lines to the
scored file written (``score_lines``, what the command runs after reading), to a new ``--out`` file (over
an existing one, ext4 adds a forced write-back of the new data at the rename, which is I/O wait).

Batch: 16 tasks x 8 rollouts x at most 25 steps of text Sokoban (7x7, one box, optimal plan >= 8
moves), about 2900 transitions (solved episodes stop early), played by a noisy scripted policy
(BFS-solver moves, random moves, some unparseable answers) so that groups mix successes and failures and the graphs have cycles, dead ends and pruned steps. The x10, x100, x1000
batches hold 10/100/1000 times as many task groups (copies of the 16 base groups with fresh step objects
and group ids: the trainer's batch grows by tasks, each group's graph keeps its size).

The reference's 1000 sweeps take the same time each (no early stop), so where running all of them would
take too long (``--ref-full-max``), it runs ``--ref-sweeps`` sweeps and scales the sweep time to 1000;
the table marks those numbers as extrapolated. Its values are checked against RewardFlow's on every size.

    python -m benchmarks.credit_speed            # writes benchmarks/results/credit_speed.{json,md}
    python -m benchmarks.credit_speed --quick    # x1 and x10 only, fewer repeats
"""

from __future__ import annotations

import argparse
import copy
import datetime as _dt
import json
import os
import platform
import random
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np


from creditflow.credit import compute, estimator_names, score, score_arrays, score_lines, validate_knobs
from creditflow.credit.rewardflow import build_flow
from creditflow.envs.sokoban import ACTION_NAMES, SokobanEnv
from creditflow.jsonl import json_line
from creditflow.rollout.trajectory import Step, Trajectory

ROOT = Path(__file__).resolve().parents[1]

ESTIMATORS = tuple(estimator_names())  # every registered estimator (grpo, rloo, gigpo, rewardflow, graphgpo, g2po, ...)
PATHS = ("score(dicts)", "score(trajectories)", "score_arrays", "credit command")
INVALID_PENALTY = 0.1  # Tab. 8
TARGET = 100  # every public path >= 100x the reference (issue 14)


# --------------------------------------------------------------------------------------------------
# data
# --------------------------------------------------------------------------------------------------


def play(env: SokobanEnv, seed: int, rng: random.Random, steps: int, skill: float, p_invalid: float = 0.05):
    obs, info = env.reset(seed=seed)
    traj = Trajectory(task_id=f"sokoban/{seed}", traj_id="")
    for _ in range(steps):
        state = info["state_key"]
        roll = rng.random()
        if roll < p_invalid:
            action, valid = "<action>dance</action>", False
        elif roll < p_invalid + skill:
            plan = env.expert_actions()
            action, valid = (plan[0] if plan else rng.choice(ACTION_NAMES)), True
        else:
            action, valid = rng.choice(ACTION_NAMES), True
        nobs, reward, term, trunc, ninfo = env.step(action if valid else "invalid: dance")
        valid = valid and bool(ninfo.get("action_valid", True))
        if not valid:
            reward -= INVALID_PENALTY
        traj.steps.append(Step(state=state, observation=obs, action=action, response=action, valid=valid,
                               reward=float(reward), done=term or trunc, next_state=ninfo["state_key"]))
        obs, info = nobs, ninfo
        if term or trunc:
            break
    traj.final_state = info["state_key"]
    traj.success = bool(info["won"])
    traj.score = float(info["score"])
    return traj


def sokoban_batch(tasks: int = 16, rollouts: int = 8, steps: int = 25, seed: int = 0) -> list[Trajectory]:
    rng = random.Random(seed)
    env = SokobanEnv(size=7, num_boxes=1, max_steps=steps, min_plan=8)
    out = []
    for task in range(tasks):
        for k in range(rollouts):
            traj = play(env, 1000 + task, rng, steps, skill=rng.uniform(0.1, 0.6))
            traj.traj_id = f"{traj.task_id}/{k}"
            out.append(traj)
    return out


def replicate(base: list[Trajectory], factor: int) -> list[Trajectory]:
    if factor == 1:
        return base
    out = []
    for rep in range(factor):
        for t in base:
            c = copy.copy(t)
            c.steps = [copy.copy(s) for s in t.steps]
            c.group_id = f"{t.group_id}#{rep}"
            c.traj_id = f"{t.traj_id}#{rep}"
            out.append(c)
    return out


# --------------------------------------------------------------------------------------------------
# the reference: official propagation, networkx + 1000 synchronous Bellman-max sweeps
# --------------------------------------------------------------------------------------------------


def reference_inputs(trajs: list[Trajectory]):
    """Per group: the kept transitions (canonical keys) and the success terminals, as RewardFlow's
    graph step produces them (not timed: the reference is the propagation)."""
    flow = build_flow(trajs)
    keys = flow.node_keys
    groups: dict[int, dict] = {}
    for u, v in zip(flow.anchor[flow.kept].tolist(), flow.post[flow.kept].tolist()):
        g = groups.setdefault(int(flow.node_group[u]), {"edges": [], "success": set()})
        g["edges"].append((keys[u], keys[v]))
    for s in flow.success_nodes.tolist():
        groups.setdefault(int(flow.node_group[s]), {"edges": [], "success": set()})["success"].add(keys[s])
    return flow, groups


def reference_propagation(groups: dict[int, dict], gamma: float = 0.9, sweeps: int = 1000):
    import networkx as nx

    values = {}
    for gid, g in groups.items():
        graph = nx.DiGraph()
        graph.add_edges_from(g["edges"])
        graph.add_nodes_from(g["success"])
        value = {n: (1.0 if n in g["success"] else 0.0) for n in graph.nodes}
        for _ in range(sweeps):
            new = value.copy()
            for node in graph.nodes:
                best = value[node]
                for _, succ in graph.out_edges(node):
                    cand = gamma * value[succ]
                    if cand > best:
                        best = cand
                new[node] = best
            value = new
        values[gid] = value
    return values


def check_reference(flow, values) -> float:
    """Largest |R_bfs - R_reference| over all graph nodes."""
    worst = 0.0
    for node in np.flatnonzero(flow.in_graph).tolist():
        ref = values.get(int(flow.node_group[node]), {}).get(flow.node_keys[node], 0.0)
        worst = max(worst, abs(ref - float(flow.node_reward[node])))
    return worst


# --------------------------------------------------------------------------------------------------
# timing
# --------------------------------------------------------------------------------------------------


def timed(fn, repeats: int) -> list[float]:
    out = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        out.append((time.perf_counter() - t0) * 1000.0)
    return out


def path_runners(trajs: list[Trajectory], out_dir: Path) -> dict:
    """For each public path: ``(prepare, run)``; ``run(prepare())`` is timed, ``prepare`` is not."""
    dicts = [t.to_dict() for t in trajs]
    rows = [(t, i, s) for t in trajs for i, s in enumerate(t.steps)]
    columns = dict(group_ids=[t.group_id for t, _, _ in rows], traj_ids=[t.traj_id for t, _, _ in rows],
                   step_index=[i for _, i, _ in rows], state_keys=[s.state for _, _, s in rows],
                   rewards=[s.reward for _, _, s in rows], success=[t.success for t, _, _ in rows],
                   valid=[s.valid for _, _, s in rows])
    raws = [(json.dumps(d, ensure_ascii=False) + "\n").encode("utf-8") for d in dicts]
    knobs = validate_knobs("rewardflow", {})
    out = out_dir / "scored.jsonl"

    def read():  # not timed: what the command reads (each line's value, bytes, step positions); --out is new
        out.unlink(missing_ok=True)
        return [json_line(raw, "steps", f"in.jsonl:{k + 1}", ValueError) for k, raw in enumerate(raws)]

    return {
        "score(dicts)": (lambda: dicts, lambda d: score(d, estimator="rewardflow")),
        "score(trajectories)": (lambda: trajs, lambda t: score(t, estimator="rewardflow")),
        "score_arrays": (lambda: columns, lambda c: score_arrays("rewardflow", **c)),
        "credit command": (read, lambda lines: score_lines(lines, "rewardflow", knobs, out)),
    }


def timed_path(prepare, run, repeats: int) -> tuple[list[float], list[float]]:
    """Wall and CPU (process) milliseconds of ``run(prepare())``, ``repeats`` times after a warm-up."""
    run(prepare())
    wall, cpu = [], []
    for _ in range(repeats):
        arg = prepare()
        t0, c0 = time.perf_counter(), time.process_time()
        run(arg)
        wall.append((time.perf_counter() - t0) * 1000.0)
        cpu.append((time.process_time() - c0) * 1000.0)
    return wall, cpu


def machine_info() -> dict:
    cpu = platform.processor() or ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    import networkx

    try:
        load = os.getloadavg()
    except OSError:
        load = None
    return {
        "cpu": cpu, "cores": os.cpu_count(), "python": platform.python_version(), "numpy": np.__version__,
        "networkx": networkx.__version__, "platform": platform.platform(),
        "date": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "load_avg_at_start": load,
    }


def run(factors, repeats, ref_full_max: int, ref_sweeps: int, path_max: int) -> dict:
    load_at_start = os.getloadavg()
    base = sokoban_batch()
    rows = []
    scratch = Path(tempfile.mkdtemp(prefix="credit_speed_"))
    for factor in factors:
        trajs = replicate(base, factor)
        n = sum(len(t.steps) for t in trajs)
        reps = max(3 if factor <= 100 else 1, repeats // factor)
        row = {"factor": factor, "tasks": 16 * factor, "trajectories": len(trajs), "transitions": n, "ms": {},
               "paths_ms": {}}
        for name in ESTIMATORS:
            compute(name, trajs)  # warm-up (and first-touch of the step objects)
            times = timed(lambda: compute(name, trajs), reps)
            row["ms"][name] = {"median": statistics.median(times), "min": min(times), "runs": len(times)}
        if factor <= path_max:
            for name, (prepare, fn) in path_runners(trajs, scratch).items():
                times, cpu = timed_path(prepare, fn, reps)
                row["paths_ms"][name] = {"median": statistics.median(times), "min": min(times), "runs": len(times),
                                         "cpu_median": statistics.median(cpu)}
        metrics = compute("rewardflow", trajs)
        row["graph"] = {k.split("/", 1)[1]: round(v, 4) for k, v in metrics.items()
                        if k.split("/", 1)[1] in ("graph_nodes", "graph_edges", "unique_state_ratio",
                                                  "reach_success_frac", "pruned_frac", "success_group_frac")}
        flow, groups = reference_inputs(trajs)
        full = factor <= ref_full_max
        sweeps = 1000 if full else ref_sweeps
        ref_runs, ref_cpu = [], []
        for _ in range(3 if factor == 1 else 1):  # x1: the median of three runs, for the one-run ratios
            t0, c0 = time.perf_counter(), time.process_time()
            values = reference_propagation(groups, sweeps=sweeps)
            ref_runs.append((time.perf_counter() - t0) * 1000.0)
            ref_cpu.append((time.process_time() - c0) * 1000.0)
        ref_ms = statistics.median(ref_runs)
        if not full:  # same work every sweep: build cost + 1000/sweeps x sweep cost
            t1 = time.perf_counter()
            reference_propagation(groups, sweeps=0)
            build_ms = (time.perf_counter() - t1) * 1000.0
            ref_ms = build_ms + (ref_ms - build_ms) * 1000.0 / sweeps
        row["reference_ms"] = ref_ms
        row["reference_runs_ms"] = ref_runs
        row["reference_sweeps_run"] = sweeps
        row["reference_extrapolated"] = not full
        row["reference_max_abs_diff"] = check_reference(flow, values) if full else None
        row["speedup_rewardflow_vs_reference"] = ref_ms / row["ms"]["rewardflow"]["median"]
        row["speedup_paths_vs_reference"] = {k: ref_ms / v["median"] for k, v in row["paths_ms"].items()}
        if full:  # CPU time: what the process itself spent, whatever else ran on the machine
            row["reference_cpu_ms"] = statistics.median(ref_cpu)
            row["cpu_speedup_paths_vs_reference"] = {k: row["reference_cpu_ms"] / v["cpu_median"]
                                                     for k, v in row["paths_ms"].items()}
        rows.append(row)
        print(json.dumps(row), flush=True)
        del trajs, flow, groups, values
    shutil.rmtree(scratch, ignore_errors=True)
    machine = machine_info()
    machine["load_avg_at_start"], machine["load_avg_at_end"] = load_at_start, os.getloadavg()
    return {"machine": machine, "batch": "16 tasks x 8 rollouts x <=25 steps (text Sokoban 7x7, 1 box, scripted noisy policy)",
            "rows": rows}


def write(result: dict, out_dir: Path, note: str = "") -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "credit_speed.json").write_text(json.dumps({**result, "note": note}, indent=2) + "\n")
    m = result["machine"]
    lines = [
        "# Credit assignment speed (`benchmarks/credit_speed.py`)",
        "",
        f"Machine: {m['cpu']}, {m['cores']} cores (shared), Python {m['python']}, NumPy {m['numpy']}, "
        f"networkx {m['networkx']}; {m['date']}; load average at start {_load(m['load_avg_at_start'])}, "
        f"at end {_load(m.get('load_avg_at_end'))}.",
    ]
    if note:
        lines += ["", note]
    lines += [
        "",
        f"Batch x1: {result['batch']}; x10/x100/x1000 = that many times more task groups.",
        "Reference = official propagation (networkx DiGraph, 1000 synchronous Bellman-max sweeps, no early",
        "stop) on the same pruned graphs (x1: median of 3 runs); * = sweep time measured on fewer sweeps and",
        "scaled to 1000. Times are medians of repeated calls, ms per batch.",
        "",
        "## Public paths (RewardFlow), in the same run as the reference",
        "",
        "`score(dicts)`: `credit.score` on JSONL-schema dicts; `score(trajectories)`: on Trajectory objects",
        "(returns copies); `score_arrays`: one row per step; `credit command`: `creditflow credit` after",
        "reading its input (`score_lines`: score the parsed lines, write the scored JSONL atomically to a",
        "new file; replacing an existing one adds ext4's forced write-back at the rename, I/O wait).",
        "",
        "| batch | transitions | reference | " + " | ".join(PATHS) + " | ms per 1k transitions |",
        "|---|---:|---:|" + "---:|" * len(PATHS) + "---|",
    ]
    for r in result["rows"]:
        if not r["paths_ms"]:
            continue
        star = "*" if r["reference_extrapolated"] else ""
        cells = [f"{r['paths_ms'][p]['median']:.2f} ({r['speedup_paths_vs_reference'][p]:,.0f}x)" for p in PATHS]
        per_k = ", ".join(f"{r['paths_ms'][p]['median'] / r['transitions'] * 1000:.2f}" for p in PATHS)
        lines.append(f"| x{r['factor']} | {r['transitions']:,} | {r['reference_ms']:,.0f}{star} | "
                     + " | ".join(cells) + f" | {per_k} |")
    cpu_rows = [r for r in result["rows"] if r.get("cpu_speedup_paths_vs_reference")]
    if cpu_rows:
        lines += ["", "The same paths in CPU time of the process (`time.process_time`, medians), which other jobs on",
                  "the machine disturb less than wall time:", "",
                  "| batch | reference | " + " | ".join(PATHS) + " |", "|---|---:|" + "---:|" * len(PATHS)]
        for r in cpu_rows:
            cells = [f"{r['paths_ms'][p]['cpu_median']:.2f} ({r['cpu_speedup_paths_vs_reference'][p]:,.0f}x)"
                     for p in PATHS]
            lines.append(f"| x{r['factor']} | {r['reference_cpu_ms']:,.0f} | " + " | ".join(cells) + " |")
    lines += [
        "",
        "## Estimators (`creditflow.credit.compute`, in place)",
        "",
    ]
    names = [n for n in ESTIMATORS if all(n in r["ms"] for r in result["rows"])]
    lines += [
        "| batch | transitions | " + " | ".join(names) + " | reference | speed-up | ms per 1k transitions (rewardflow) |",
        "|---|---:|" + "---:|" * len(names) + "---:|---:|---:|",
    ]
    for r in result["rows"]:
        ms = r["ms"]
        star = "*" if r["reference_extrapolated"] else ""
        lines.append(
            f"| x{r['factor']} | {r['transitions']:,} | " + " | ".join(f"{ms[n]['median']:.2f}" for n in names)
            + f" | {r['reference_ms']:,.0f}{star} | {r['speedup_rewardflow_vs_reference']:,.0f}x | "
            f"{ms['rewardflow']['median'] / r['transitions'] * 1000:.3f} |"
        )
    ratios = [n for n in names if n != "rewardflow"]
    lines += ["", "Each estimator's time over RewardFlow's (median ms / median ms):", "",
              "| batch | " + " | ".join(ratios) + " |", "|---|" + "---:|" * len(ratios)]
    for r in result["rows"]:
        rf = r["ms"]["rewardflow"]["median"]
        lines.append(f"| x{r['factor']} | " + " | ".join(f"{r['ms'][n]['median'] / rf:.2f}" for n in ratios) + " |")
    lines += ["", "Graph statistics (means over groups) and reference check:", ""]
    for r in result["rows"]:
        diff = r["reference_max_abs_diff"]
        check = "not run (extrapolated)" if diff is None else f"max |R_bfs - R_ref| = {diff:.1e}"
        lines.append(f"- x{r['factor']}: {r['graph']}; {check}")
    (out_dir / "credit_speed.md").write_text("\n".join(lines) + "\n")


def _load(load) -> str:
    return "n/a" if not load else ", ".join(f"{x:.2f}" for x in load)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="x1 and x10 only, fewer repeats")
    ap.add_argument("--factors", type=int, nargs="*", default=None)
    ap.add_argument("--repeats", type=int, default=None)
    ap.add_argument("--ref-full-max", type=int, default=10, help="largest factor running all 1000 sweeps")
    ap.add_argument("--ref-sweeps", type=int, default=5, help="sweeps run (then scaled) above that")
    ap.add_argument("--path-max", type=int, default=350, help="largest factor timing the public paths")
    ap.add_argument("--note", default="", help="a line for the results (e.g. what else ran on the machine)")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    args = ap.parse_args(argv)
    factors = args.factors or ([1, 10] if args.quick else [1, 10, 100, 350, 1000])
    repeats = args.repeats or (5 if args.quick else 21)
    result = run(factors, repeats, args.ref_full_max, args.ref_sweeps, args.path_max)
    x1 = next((r for r in result["rows"] if r["factor"] == 1), None)
    if x1 is not None and x1["paths_ms"]:
        worst = min(x1["speedup_paths_vs_reference"].values())
        worst_cpu = min(x1["cpu_speedup_paths_vs_reference"].values())
        print(f"x1: slowest public path {worst:,.0f}x the reference in wall time, {worst_cpu:,.0f}x in CPU time "
              f"(target {TARGET}x)", flush=True)
    if not args.quick or args.factors:
        write(result, args.out, args.note)


if __name__ == "__main__":
    main()
