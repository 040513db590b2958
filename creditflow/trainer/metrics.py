"""Metrics sink: one JSONL line per log call, and the trackers of ``logging.report_to`` (TensorBoard, Weights &
Biases, trackio) with the same names.

``metrics.jsonl`` is append-only: a row is written and flushed in one piece, and before each checkpoint the
rows so far are flushed to disk (:meth:`MetricsLogger.sync`), so the rows up to a checkpoint's step survive
whatever survives the checkpoint. A run killed mid-row leaves a torn last line: readers leave it out, and a
resumed run rewrites the file without it and without the rows after its checkpoint (TensorBoard hides its
events after that step too, ``purge_step``; wandb and trackio continue the same run, whose rows after the
checkpoint stay there: they take a step once).

Each tracker is its own package, imported where it is opened: ``torch.utils.tensorboard``, ``wandb`` and
``trackio`` (:func:`check_trackers` says which one is missing before any work). A wandb or trackio run of a run
directory is named in ``trackers.json`` there, so that ``--resume`` continues it.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import math
import secrets
import sys
from pathlib import Path
from typing import Any, Sequence

from creditflow.atomic import crash_point, write_atomic
from creditflow.errors import UserError
from creditflow.jsonl import AppendLog

TRACKER_PACKAGES = {"tensorboard": "tensorboard", "wandb": "wandb", "trackio": "trackio"}
TRACKERS_FILE = "trackers.json"


def check_trackers(names: Sequence[str]) -> None:
    """wandb and trackio, where ``logging.report_to`` names them, are installed, else a one-line UserError (before
    any work). TensorBoard, the default and a dependency of creditflow, is left out where it is missing."""
    for name in names:
        if name == "tensorboard":
            continue
        package = TRACKER_PACKAGES[name]
        if importlib.util.find_spec(package) is None:
            raise UserError(f"logging.report_to names {name}, but the {package} package is not installed: pip install "
                            f"{package} (or creditflow[{name}]), or drop it from logging.report_to")


def _numbers(row: dict) -> dict[str, float]:
    """The finite numbers of a row (no bool, no ``step``): what a tracker plots."""
    return {k: v for k, v in row.items() if isinstance(v, (int, float)) and not isinstance(v, bool)
            and math.isfinite(v) and k != "step"}


class _TensorBoard:
    def __init__(self, out_dir: Path, resume_step: int | None):
        from torch.utils.tensorboard import SummaryWriter  # optional: its own package, a slow import

        purge = {} if resume_step is None else {"purge_step": resume_step + 1}
        self._tb = SummaryWriter(str(out_dir / "tb"), **purge)

    def log(self, values: dict[str, float], step: int) -> None:
        for k, v in values.items():
            self._tb.add_scalar(k, v, step)
        self._tb.flush()

    def close(self) -> None:
        self._tb.close()


class _WandB:
    """A wandb run in ``out_dir/wandb`` (``WANDB_MODE=offline``: nothing leaves the machine); its id is kept in
    ``trackers.json``, and a resumed run continues it."""

    def __init__(self, out_dir: Path, ids: dict, project: str, name: str, config: dict | None):
        import wandb  # optional: its own package

        run_id = ids.get("wandb") or secrets.token_hex(4)  # wandb ids: 8 characters [a-z0-9]
        ids["wandb"] = run_id
        with contextlib.redirect_stdout(sys.stderr):  # stdout is the commands' results
            self._run = wandb.init(project=project, name=name, id=run_id, resume="allow", dir=str(out_dir),
                                   config=config)

    def log(self, values: dict[str, float], step: int) -> None:
        self._run.log(values, step=step)

    def close(self) -> None:
        with contextlib.redirect_stdout(sys.stderr):
            self._run.finish()


class _Trackio:
    """A trackio run (its local database in ``TRACKIO_DIR``); a resumed run continues the run of the name kept in
    ``trackers.json``."""

    def __init__(self, ids: dict, project: str, name: str, config: dict | None, resuming: bool):
        import trackio  # optional: its own package

        known = ids.get("trackio")
        with contextlib.redirect_stdout(sys.stderr):
            self._run = trackio.init(project=project, name=known or name, config=config,
                                     resume="allow" if resuming and known else "never", embed=False,
                                     auto_log_cpu=False, auto_log_gpu=False)
        ids["trackio"] = self._run.name

    def log(self, values: dict[str, float], step: int) -> None:
        self._run.log(values, step=step)

    def close(self) -> None:
        with contextlib.redirect_stdout(sys.stderr):
            self._run.finish()


class MetricsLogger:
    def __init__(self, out_dir: str | Path, report_to: Sequence[str] | bool = ("tensorboard",),
                 resume_step: int | None = None, project: str = "creditflow", run_name: str | None = None,
                 config: dict[str, Any] | None = None):
        """``report_to``: the trackers besides the JSONL (``logging.report_to``; True / False: TensorBoard or
        none, the old switch); ``resume_step``: a resumed run continues after this step (-1: from the start),
        the rows logged after it, and a torn last row, are dropped first. ``project``, ``run_name`` (default the
        run directory's name) and ``config`` (the run config as a dict) go to wandb and trackio."""
        out = Path(out_dir)
        self.path = out / "metrics.jsonl"
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if resume_step is not None:
            truncate_after(self.path, resume_step)
        self._log = metrics_log(self.path)
        self._out = self._log.open()
        names = (["tensorboard"] if report_to else []) if isinstance(report_to, bool) else list(report_to)
        self.trackers: dict[str, Any] = {}
        ids_file = out / TRACKERS_FILE
        ids = json.loads(ids_file.read_text(encoding="utf-8")) if ids_file.is_file() else {}
        before = dict(ids)
        name = run_name or out.resolve().name
        try:
            for tracker in names:
                if tracker == "tensorboard":
                    try:
                        self.trackers[tracker] = _TensorBoard(out, resume_step)
                    except ImportError:  # the tensorboard package missing at run time: JSONL only, as before
                        continue
                elif tracker == "wandb":
                    self.trackers[tracker] = _WandB(out, ids, project, name, config)
                elif tracker == "trackio":
                    self.trackers[tracker] = _Trackio(ids, project, name, config, resume_step is not None)
        except BaseException:
            self.close()
            raise
        if ids != before:
            write_atomic(ids_file, json.dumps(ids, indent=1, sort_keys=True) + "\n")

    def log(self, metrics: dict) -> None:
        row = {k: v for k, v in metrics.items() if isinstance(v, (int, float, str, bool)) or v is None}
        line = self._log.line(row)
        crash_point("metrics.row", before=lambda: self._out.write_text(line[: len(line) // 2]))  # tests: a torn row
        self._out.write_text(line)
        if self.trackers:
            step, values = int(metrics.get("step", 0)), _numbers(row)
            for tracker in self.trackers.values():
                tracker.log(values, step)

    def sync(self) -> None:
        """The rows logged so far are on disk (called before a checkpoint is written)."""
        self._out.sync()

    def close(self) -> None:
        self._out.close()
        trackers, self.trackers = self.trackers, {}
        for tracker in trackers.values():
            tracker.close()


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
