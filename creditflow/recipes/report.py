"""Run report: learning-curve PNG and a markdown summary from ``metrics.jsonl``."""

from __future__ import annotations

import io
import json
from pathlib import Path

from matplotlib.figure import Figure

from creditflow.atomic import write_atomic
from creditflow.trainer.metrics import read_metrics


def _series(rows: list[dict], key: str) -> tuple[list[int], list[float]]:
    pts = [(int(r["step"]), float(r[key])) for r in rows if key in r and "step" in r]
    return [p[0] for p in pts], [p[1] for p in pts]


def learning_curve(rows: list[dict], path: Path, title: str) -> Path:
    fig = Figure(figsize=(10, 3.6))
    axes = fig.subplots(1, 2)
    for key, label in (("eval/success_rate", "held-out success (greedy)"),
                       ("train/success_rate", "training rollouts success")):
        x, y = _series(rows, key)
        if x:
            axes[0].plot(x, y, marker="o" if key.startswith("eval") else None, label=label)
    axes[0].set_xlabel("training step")
    axes[0].set_ylabel("success rate")
    axes[0].set_ylim(-0.02, 1.02)
    axes[0].legend(loc="lower right", fontsize=8)
    axes[0].grid(alpha=0.3)
    for key, label in (("train/reward", "train return"), ("eval/reward", "held-out return")):
        x, y = _series(rows, key)
        if x:
            axes[1].plot(x, y, label=label)
    axes[1].set_xlabel("training step")
    axes[1].set_ylabel("episode return")
    axes[1].legend(loc="lower right", fontsize=8)
    axes[1].grid(alpha=0.3)
    fig.suptitle(title)
    fig.tight_layout()
    png = io.BytesIO()
    fig.savefig(png, format="png", dpi=110)
    write_atomic(path, png.getvalue())
    return path


def write_report(run_dir: str | Path, title: str = "creditflow run", extra: dict | None = None) -> Path:
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
    lines += ["", "![learning curve](learning_curve.png)", ""]
    write_atomic(report / "summary.md", "\n".join(lines))
    summary = {"before": before, "after": after, **(extra or {})}
    if test_before:
        summary.update({"test_before": test_before, "test_after": test_after})
    write_atomic(report / "summary.json", json.dumps(summary, indent=2))
    return report
