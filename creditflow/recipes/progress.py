"""Progress of long work, on stderr through rich: one bar per phase (SFT, RL steps, rollouts, evaluation,
RRO collection, DPO), each with elapsed time and an ETA.

On a terminal the bars are live; a phase's bar stays when it ends (``keep``) or disappears (per-step
rollout and evaluation bars). When stderr is not a terminal (a log file, CI) nothing is redrawn: each
kept phase prints one line when it ends, and the RL loop prints one line per step.
"""

from __future__ import annotations

import contextlib
import time
from typing import Iterator

from rich.console import Console
from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeElapsedColumn,
                           TimeRemainingColumn)

from creditflow.trainer.distributed import World


def _columns():
    return (TextColumn("[bold]{task.description}"), BarColumn(bar_width=30), MofNCompleteColumn(),
            TimeElapsedColumn(), TextColumn("eta"), TimeRemainingColumn(), TextColumn("{task.fields[info]}"))


def _clock(seconds: float) -> str:
    minutes, secs = divmod(int(round(seconds)), 60)
    return f"{minutes // 60}:{minutes % 60:02d}:{secs:02d}"


class Bar:
    """One phase's bar: ``bar(completed, info=None, total=None)`` moves it; ``eta()`` is the time left at
    the mean pace so far, for log lines."""

    def __init__(self, progress: Progress, task: TaskID, completed: int, total: int | None):
        self._progress, self._task = progress, task
        self.start, self.first, self.completed, self.total = time.perf_counter(), completed, completed, total

    def __call__(self, completed: int, info: str | None = None, total: int | None = None) -> None:
        self.completed = completed
        changes = {"info": info} if info is not None else {}
        if total is not None:
            self.total = changes["total"] = total
        self._progress.update(self._task, completed=completed, **changes)

    @property
    def elapsed(self) -> float:
        return time.perf_counter() - self.start

    def eta(self) -> str:
        done = self.completed - self.first
        if self.total is None or done <= 0:
            return "eta ?"
        return f"eta {_clock(self.elapsed / done * max(0, self.total - self.completed))}"


class RunProgress:
    """The bars of one command. ``bar()`` opens a phase; phases opened while another is live share its
    display (the RL step bar with the rollout and evaluation bars of each step)."""

    def __init__(self, console: Console | None = None):
        self.console = console or Console(stderr=True)
        self.live = self.console.is_terminal
        self._progress: Progress | None = None

    def log(self, message: str) -> None:
        """A line above the bars (or in the log)."""
        self.console.print(message, highlight=False, markup=False, soft_wrap=True)

    @contextlib.contextmanager
    def bar(self, description: str, total: int | None, *, completed: int = 0, keep: bool = True,
            unit: str = "") -> Iterator[Bar]:
        """A phase of ``total`` units (None: not known yet), starting at ``completed``."""
        own = self._progress is None
        if own:
            self._progress = Progress(*_columns(), console=self.console, disable=not self.live,
                                      redirect_stdout=False, redirect_stderr=False)
            self._progress.start()
        progress = self._progress
        bar = Bar(progress, progress.add_task(description, total=total, completed=completed, info=""),
                  completed, total)
        finished = False
        try:
            yield bar
            finished = True
        finally:
            if not keep:
                progress.remove_task(bar._task)
            if own:
                progress.stop()
                self._progress = None
            if finished and keep and not self.live:
                shown = str(bar.completed) + (f"/{bar.total}" if bar.total is not None else "")
                self.log(f"{description}: {shown}{' ' + unit if unit else ''} in {_clock(bar.elapsed)}")


def rank_progress(progress: RunProgress, world: World) -> RunProgress:
    """``progress`` on rank 0; silent bars elsewhere (rank 0 speaks for every process)."""
    return progress if world.main else RunProgress(Console(stderr=True, quiet=True))
