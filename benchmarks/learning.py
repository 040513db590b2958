"""Shared pieces of the learning-check benchmarks (``credit_learning.py``, ``crps_learning.py``).

Every method starts from the same pi_SFT and trains through the real pipeline (``run_train``, the code
behind ``creditflow train``) with the same budget; these helpers run one (method, seed), pull curves out
of its ``metrics.jsonl``, aggregate seeds (mean, std, per-seed values) and plot mean ± std curves.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

from creditflow.config import build_config
from creditflow.train.metrics import read_metrics


def parse_args(doc: str, name: str, methods, default_steps: int, add=None) -> tuple[argparse.Namespace, Path, Path]:
    """The options every learning check shares; ``add(parser)`` adds the script's own. Sets torch's
    thread count and returns ``(args, results path without suffix, work directory)``; smoke runs get
    ``*_smoke`` paths of both."""
    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    ap.add_argument("--model", default=None, help="pi_SFT directory shared by all runs (default: build one)")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--steps", type=int, default=default_steps)
    ap.add_argument("--methods", nargs="+", default=list(methods), choices=list(methods),
                    help="which arms, in this order (put -- before key=value overrides after this list)")
    ap.add_argument("--work", default=f"runs/{name}", help="run directories go here; finished runs are reused")
    ap.add_argument("--out", default=None, help="results path without suffix")
    ap.add_argument("--smoke", action="store_true", help="seconds-long budget to check the pipeline")
    ap.add_argument("--threads", type=int, default=None,
                    help="torch intra-op threads (1 is much faster for the tiny model on a busy machine)")
    if add is not None:
        add(ap)
    ap.add_argument("extra", nargs="*", help="extra key=value overrides for every RL run")
    args = ap.parse_args()
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    suffix = "_smoke" if args.smoke else ""
    out = Path(args.out or Path(__file__).parent / "results" / f"{name}{suffix}")
    work = Path(args.work + suffix)
    work.mkdir(parents=True, exist_ok=True)
    return args, out, work


def train_one(out: Path, overrides: list[str], seed: int, curves: tuple[str, ...]) -> dict:
    """One RL run (``overrides`` must name the policy, env, budget and method); returns its record."""
    from creditflow.recipes.train import run_train

    cfg = build_config(None, [f"out_dir={out}", f"seed={seed}", *overrides])
    t0 = time.perf_counter()
    reused = finished_run(out, cfg)
    if not reused:
        if out.is_symlink():  # a shared arm that is not finished there: train it here
            out.unlink()
        elif out.exists():  # an interrupted run: start it again
            import shutil

            shutil.rmtree(out)
        run_train(cfg, log=lambda *_: None)
    rows = read_metrics(out / "metrics.jsonl")
    train_rows = [r for r in rows if r.get("step", 0) > 0]

    def mean_of(key):
        vals = [r[key] for r in train_rows if key in r]
        return float(np.mean(vals)) if vals else None

    return {
        "seed": seed, "minutes": (time.perf_counter() - t0) / 60, "reused": reused,
        "curves": {k: [[r["step"], r[k]] for r in rows if k in r] for k in curves},
        "final_eval_success": rows[-1].get("eval/success_rate"),
        "initial_eval_success": rows[0].get("eval/success_rate"),
        "final_eval_score": rows[-1].get("eval/score"),
        "mean_train_success": mean_of("train/success_rate"),
        "mean_all_zero_frac": mean_of("groups/all_zero_frac"),
        "mean_entropy": mean_of("groups/entropy"),
        "env_steps": rows[-1].get("env_steps"),
        "rl_minutes": sum(r.get("time/step_s", 0.0) for r in train_rows) / 60,  # training steps, no evals
        "restore_mismatches": rows[-1].get("crps/restore_mismatches", 0),
    }


def finished_run(out: Path, cfg) -> bool:
    """True when ``out`` (a directory or a link to one, e.g. another benchmark's run) holds a finished
    run of exactly this configuration (all but ``out_dir``): rerunning a benchmark, or a second benchmark
    that shares an arm with the first, reuses it instead of training again."""
    import yaml

    try:
        saved = yaml.safe_load((out / "config.yaml").read_text(encoding="utf-8"))
        rows = read_metrics(out / "metrics.jsonl")
    except Exception:  # missing or unreadable: not finished
        return False
    want = cfg.model_dump()
    saved.pop("out_dir", None)
    want.pop("out_dir", None)
    return saved == want and bool(rows) and rows[-1].get("step") == cfg.rl.steps


SCALARS = ("final_eval_success", "initial_eval_success", "final_eval_score", "mean_train_success",
           "mean_all_zero_frac", "mean_entropy", "env_steps", "rl_minutes")


def summarize(runs: list[dict], curves: tuple[str, ...]) -> dict:
    """Mean, std and per-seed values of the scalars; per-step mean/std of every curve."""

    out = {k: ms_of([r[k] for r in runs if r.get(k) is not None]) for k in SCALARS}
    out["gain"] = ms_of([r["final_eval_success"] - r["initial_eval_success"] for r in runs
                         if r.get("final_eval_success") is not None and r.get("initial_eval_success") is not None])
    out["curves"] = {}
    for key in curves:
        by_step: dict[int, list[float]] = {}
        for r in runs:
            for step, v in r["curves"].get(key, []):
                by_step.setdefault(step, []).append(v)
        out["curves"][key] = [[s, float(np.mean(v)), float(np.std(v))] for s, v in sorted(by_step.items())]
    return out


def ms_of(vals: list[float]) -> dict:
    if not vals:
        return {"mean": None, "std": None, "values": []}
    return {"mean": float(np.mean(vals)), "std": float(np.std(vals)), "values": [float(v) for v in vals]}


def fmt(stat: dict, digits: int = 3) -> str:
    """``mean ± std (v1, v2, ...)`` for a table cell."""
    if stat.get("mean") is None:
        return "-"
    vals = ", ".join(f"{v:.2f}" for v in stat["values"])
    return f"{stat['mean']:.{digits}f} ± {stat['std']:.{digits}f} ({vals})"


def plot(summary: dict[str, dict], panels: list[tuple[str, str]], title: str, path: Path) -> None:
    """One panel per (curve key, title): mean over seeds with a ± std band, one line per method."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(panels), figsize=(5 * len(panels), 4), squeeze=False)
    for ax, (key, panel_title) in zip(axes[0], panels):
        for method, s in summary.items():
            pts = s["curves"].get(key)
            if not pts:
                continue
            st, m, sd = (np.array(x) for x in zip(*pts))
            ax.plot(st, m, marker="o" if len(st) < 15 else None, label=method)
            ax.fill_between(st, m - sd, m + sd, alpha=0.2)
        ax.set_title(panel_title)
        ax.set_xlabel("training step")
    axes[0][0].legend()
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
