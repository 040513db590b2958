"""Run report: learning-curve PNG and a markdown summary from ``metrics.jsonl``."""

from __future__ import annotations

import io
import json
import math
from pathlib import Path

from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from creditflow.atomic import write_atomic
from creditflow.trainer.metrics import read_metrics


TRAIN_COLOUR, EVAL_COLOUR = "tab:orange", "tab:blue"  # one colour per split, in both panels


def _series(rows: list[dict], key: str) -> tuple[list[int], list[float]]:
    pts = [(int(r["step"]), float(r[key])) for r in rows if key in r and "step" in r]
    return [p[0] for p in pts], [p[1] for p in pts]


def rolling_mean(values: list[float], window: int) -> list[float]:
    """The mean of each value and the ``window - 1`` before it (fewer at the start)."""
    out, total = [], 0.0
    for i, v in enumerate(values):
        total += v
        if i >= window:
            total -= values[i - window]
        out.append(total / min(i + 1, window))
    return out


def smoothing_window(steps: int) -> int:
    """The rolling-mean window of the per-step training curves: a tenth of the run, at least 1, at most 10 steps."""
    return max(1, min(10, steps // 10))


def learning_curve(rows: list[dict], path: Path, title: str) -> Path:
    """:func:`learning_curve_figure` as a PNG at ``path``."""
    png = io.BytesIO()
    learning_curve_figure(rows, title).savefig(png, format="png", dpi=110)
    write_atomic(path, png.getvalue())
    return path


def learning_curve_figure(rows: list[dict], title: str) -> Figure:
    """Success (left) and return (right) against the training step: held-out evaluations as points, the training
    rollouts' per-step values faint and their rolling mean (a tenth of the run) solid; the same colour per split
    in both panels, whole steps on the axis."""
    fig = Figure(figsize=(10, 3.6))
    axes = fig.subplots(1, 2)
    steps = max((int(r.get("step", 0)) for r in rows), default=0)
    window = smoothing_window(steps)
    for ax, metric, ylabel in ((axes[0], "success_rate", "success rate"), (axes[1], "reward", "episode return")):
        x, y = _series(rows, f"eval/{metric}")
        if x:
            ax.plot(x, y, marker="o", color=EVAL_COLOUR, label="held-out (greedy)")
        x, y = _series(rows, f"train/{metric}")
        if x:
            if window > 1:
                ax.plot(x, y, color=TRAIN_COLOUR, alpha=0.25, linewidth=1)
            ax.plot(x, rolling_mean(y, window), color=TRAIN_COLOUR,
                    label="training rollouts" + (f" ({window}-step mean)" if window > 1 else ""))
        ax.set_xlabel("training step")
        ax.set_ylabel(ylabel)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.legend(loc="lower right", fontsize=8)
        ax.grid(alpha=0.3)
    axes[0].set_ylim(-0.02, 1.02)
    fig.suptitle(title)
    fig.tight_layout()
    return fig


def noise_note(episodes: int, rate: float) -> str:
    """What a held-out success rate on ``episodes`` tasks can tell apart: its 95% Wilson interval at ``rate``."""
    z = 1.96
    centre = (rate + z * z / (2 * episodes)) / (1 + z * z / episodes)
    half = z * math.sqrt(rate * (1 - rate) / episodes + z * z / (4 * episodes * episodes)) / (1 + z * z / episodes)
    return (f"Held-out success is measured on {episodes} tasks, in steps of {1 / episodes:.3g}: at {rate:.2f} its 95% "
            f"interval is [{max(0.0, centre - half):.2f}, {min(1.0, centre + half):.2f}], and smaller differences "
            "are noise.")


def write_report(run_dir: str | Path, title: str = "creditflow run", extra: dict | None = None,
                 note: str | None = None) -> Path:
    """``report/summary.md`` (before and after RL on the held-out splits, how much of a difference is noise),
    ``summary.json`` and ``learning_curve.png`` of the run in ``run_dir``; ``note`` goes first (the demo's
    ``--quick``: a smoke run)."""
    run = Path(run_dir)
    rows = read_metrics(run / "metrics.jsonl")
    report = run / "report"
    report.mkdir(parents=True, exist_ok=True)
    learning_curve(rows, report / "learning_curve.png", title)
    evals = [r for r in rows if "eval/success_rate" in r]
    before, after = (evals[0], evals[-1]) if evals else ({}, {})
    tests = [r for r in rows if "test/success_rate" in r]  # the test split: before RL and after it
    test_before, test_after = (tests[0], tests[-1]) if len(tests) > 1 else ({}, {})
    lines = [f"# {title}", ""]
    if note:
        lines += [f"**{note}**", ""]
    if extra:
        for k, v in extra.items():
            lines.append(f"- **{k}**: {v}")
        lines.append("")
    keys = ("success_rate", "score", "reward", "steps", "invalid_frac", "noop_frac")
    if test_before:
        lines += [f"Test split ({test_before.get('test/episodes', '?')} tasks; reported numbers only, no choice was made "
                  "on it):", "",
                  "| test metric | before RL (step 0) | after RL (step %s) |" % test_after.get("step", "?"),
                  "|---|---|---|"]
        lines += [f"| test/{k} | {test_before[f'test/{k}']:.3f} | {test_after.get(f'test/{k}', float('nan')):.3f} |"
                  for k in keys if f"test/{k}" in test_before]
        lines += ["", "Validation split (the learning curve; choices such as the demo's settings were made on it):", ""]
    lines += ["| held-out metric | before RL (step 0) | after RL (step %s) |" % after.get("step", "?"),
              "|---|---|---|"]
    for key in (f"eval/{k}" for k in keys):
        if key in before:
            lines.append(f"| {key} | {before[key]:.3f} | {after.get(key, float('nan')):.3f} |")
    if "eval/episodes" in before:
        lines += ["", noise_note(int(before["eval/episodes"]), float(before["eval/success_rate"]))]
    lines += ["", "![learning curve](learning_curve.png)", ""]
    write_atomic(report / "summary.md", "\n".join(lines))
    summary = {"before": before, "after": after, **(extra or {})}
    if test_before:
        summary.update({"test_before": test_before, "test_after": test_after})
    write_atomic(report / "summary.json", json.dumps(summary, indent=2))
    return report
