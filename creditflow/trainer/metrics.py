"""Metrics sink: one JSONL line per log call plus TensorBoard scalars.

``metrics.jsonl`` is append-only: a row is written and flushed in one piece, and before each checkpoint the
rows so far are flushed to disk (:meth:`MetricsLogger.sync`), so the rows up to a checkpoint's step survive
whatever survives the checkpoint. A run killed mid-row leaves a torn last line: readers leave it out, and a
resumed run rewrites the file without it and without the rows after its checkpoint (TensorBoard hides its
events after that step too, ``purge_step``).
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

from creditflow.atomic import atomic_open, crash_point
from creditflow.errors import UserError


class MetricsLogger:
    def __init__(self, out_dir: str | Path, tensorboard: bool = True, resume_step: int | None = None):
        """``resume_step``: a resumed run continues after this step (-1: from the start); the rows logged
        after it, and a torn last row, are dropped first."""
        self.path = Path(out_dir) / "metrics.jsonl"
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if resume_step is not None:
            truncate_after(self.path, resume_step)
        self._fh = self.path.open("a", encoding="utf-8")
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
        line = json.dumps(row, sort_keys=True) + "\n"
        crash_point("metrics.row", before=lambda: self._write(line[: len(line) // 2]))  # tests: a torn row
        self._write(line)
        if self._tb is not None:
            step = int(metrics.get("step", 0))
            for k, v in row.items():
                if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and k != "step":
                    self._tb.add_scalar(k, v, step)
            self._tb.flush()

    def _write(self, text: str) -> None:
        self._fh.write(text)
        self._fh.flush()

    def sync(self) -> None:
        """The rows logged so far are on disk (called before a checkpoint is written)."""
        self._fh.flush()
        os.fsync(self._fh.fileno())

    def close(self) -> None:
        self._fh.close()
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


def read_metrics(path: str | Path) -> list[dict]:
    """The rows of a ``metrics.jsonl`` (none when it does not exist). A last line that is not a JSON row is a
    row torn by a crash and left out; any other bad line is a one-line UserError naming ``file:line``."""
    return _read_rows(Path(path))[0]


def _read_rows(path: Path) -> tuple[list[dict], bool]:
    """``(rows, torn)``: the rows, and whether a torn last line was left out (or the last row lacks its
    newline, which the next append would glue onto)."""
    if not path.exists():
        return [], False
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise UserError(f"{path}: cannot read ({exc.strerror or exc})") from None
    lines = data.split(b"\n")
    torn = lines[-1] != b""  # no newline at the end: the last write was cut (or never finished)
    numbered = [(n, raw) for n, raw in enumerate(lines, start=1) if raw.strip(b" \t\r")]
    rows = []
    for k, (n, raw) in enumerate(numbered):
        try:
            row = json.loads(raw)
            if not isinstance(row, dict):
                raise ValueError(f"a JSON {type(row).__name__}, not an object")
        except ValueError as exc:
            if k == len(numbered) - 1:  # the last line: a row torn by a crash (or zeros after a power loss)
                return rows, True
            raise UserError(f"{path}:{n}: not a metrics row ({str(exc).splitlines()[0]})") from None
        rows.append(row)
    return rows, torn


def truncate_after(path: Path, step: int) -> None:
    """Drop the rows logged after ``step`` (a run that crashed after its last checkpoint) and a torn last
    row; the file is rewritten atomically, only when something changes."""
    rows, torn = _read_rows(path)
    keep = [r for r in rows if int(r.get("step", 0)) <= step]
    if not torn and len(keep) == len(rows):
        return
    with atomic_open(path, "w") as fh:
        fh.write("".join(json.dumps(r, sort_keys=True) + "\n" for r in keep))
