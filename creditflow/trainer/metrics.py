"""Metrics sink: one JSONL line per log call plus TensorBoard scalars.

``metrics.jsonl`` is append-only: a row is written and flushed in one piece, and before each checkpoint the
rows so far are flushed to disk (:meth:`MetricsLogger.sync`), so the rows up to a checkpoint's step survive
whatever survives the checkpoint. A run killed mid-row leaves a torn last line: readers leave it out, and a
resumed run rewrites the file without it and without the rows after its checkpoint (TensorBoard hides its
events after that step too, ``purge_step``).
"""

from __future__ import annotations

import math
from pathlib import Path

from creditflow.atomic import crash_point
from creditflow.errors import UserError
from creditflow.jsonl import AppendLog


class MetricsLogger:
    def __init__(self, out_dir: str | Path, tensorboard: bool = True, resume_step: int | None = None):
        """``resume_step``: a resumed run continues after this step (-1: from the start); the rows logged
        after it, and a torn last row, are dropped first."""
        self.path = Path(out_dir) / "metrics.jsonl"
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if resume_step is not None:
            truncate_after(self.path, resume_step)
        self._log = metrics_log(self.path)
        self._out = self._log.open()
        self._tb = None
        if tensorboard:
            try:  # optional at run time (tensorboard=false skips it); a slow import
                from torch.utils.tensorboard import SummaryWriter

                purge = {} if resume_step is None else {"purge_step": resume_step + 1}
                self._tb = SummaryWriter(str(Path(out_dir) / "tb"), **purge)
            except ImportError:  # tensorboard not installed: JSONL only
                self._tb = None

    def log(self, metrics: dict) -> None:
        row = {k: v for k, v in metrics.items() if isinstance(v, (int, float, str, bool)) or v is None}
        line = self._log.line(row)
        crash_point("metrics.row", before=lambda: self._out.write_text(line[: len(line) // 2]))  # tests: a torn row
        self._out.write_text(line)
        if self._tb is not None:
            step = int(metrics.get("step", 0))
            for k, v in row.items():
                if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and k != "step":
                    self._tb.add_scalar(k, v, step)
            self._tb.flush()

    def sync(self) -> None:
        """The rows logged so far are on disk (called before a checkpoint is written)."""
        self._out.sync()

    def close(self) -> None:
        self._out.close()
        if self._tb is not None:
            self._tb.close()


class NullLogger:
    """The metrics sink of every process but rank 0 under data parallelism: rank 0 alone writes the metrics,
    which are already reduced over the processes."""

    def log(self, metrics: dict) -> None:
        pass

    def sync(self) -> None:
        pass

    def close(self) -> None:
        pass


def metrics_log(path: str | Path) -> AppendLog:
    """``metrics.jsonl`` as an append-log: one row per line with its keys sorted, read strictly (any bad line
    but the last is a one-line UserError naming ``file:line``)."""
    return AppendLog(path, error=UserError, what="metrics row", sort_keys=True)


def read_metrics(path: str | Path) -> list[dict]:
    """The rows of a ``metrics.jsonl`` (none when it does not exist). A last line that is not a JSON row is a
    row torn by a crash and left out; any other bad line is a one-line UserError naming ``file:line``."""
    return metrics_log(path).read()[0]


def truncate_after(path: Path, step: int) -> None:
    """Drop the rows logged after ``step`` (a run that crashed after its last checkpoint) and a torn last
    row; the file is rewritten atomically, only when something changes."""
    metrics_log(path).keep(lambda row: int(row.get("step", 0)) <= step)
