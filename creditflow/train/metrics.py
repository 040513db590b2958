"""Metrics sink: one JSONL line per log call plus TensorBoard scalars."""

from __future__ import annotations

import json
import math
from pathlib import Path

from creditflow.atomic import atomic_open


class MetricsLogger:
    def __init__(self, out_dir: str | Path, tensorboard: bool = True, resume_step: int | None = None):
        self.path = Path(out_dir) / "metrics.jsonl"
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if resume_step is not None:
            truncate_after(self.path, resume_step)
        self._fh = self.path.open("a", encoding="utf-8")
        self._tb = None
        if tensorboard:
            try:  # optional at run time (tensorboard=false skips it); a slow import
                from torch.utils.tensorboard import SummaryWriter

                self._tb = SummaryWriter(str(Path(out_dir) / "tb"))
            except ImportError:  # tensorboard not installed: JSONL only
                self._tb = None

    def log(self, metrics: dict) -> None:
        row = {k: v for k, v in metrics.items() if isinstance(v, (int, float, str, bool)) or v is None}
        self._fh.write(json.dumps(row, sort_keys=True) + "\n")
        self._fh.flush()
        if self._tb is not None:
            step = int(metrics.get("step", 0))
            for k, v in row.items():
                if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and k != "step":
                    self._tb.add_scalar(k, v, step)
            self._tb.flush()

    def close(self) -> None:
        self._fh.close()
        if self._tb is not None:
            self._tb.close()


class NullLogger:
    """The metrics sink of every process but rank 0 under data parallelism: rank 0 alone writes the metrics,
    which are already reduced over the processes."""

    def log(self, metrics: dict) -> None:
        pass

    def close(self) -> None:
        pass


def read_metrics(path: str | Path) -> list[dict]:
    p = Path(path)
    if not p.exists():
        return []
    return [json.loads(line) for line in p.read_text(encoding="utf-8").splitlines() if line.strip()]


def truncate_after(path: Path, step: int) -> None:
    """Drop rows logged after ``step`` (a run that crashed after its last checkpoint)."""
    rows = read_metrics(path)
    keep = [r for r in rows if int(r.get("step", 0)) <= step]
    with atomic_open(path, "w") as fh:
        fh.write("".join(json.dumps(r, sort_keys=True) + "\n" for r in keep))
