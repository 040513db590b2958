"""Crash consistency: kill the same small run at many moments, resume it each time, and compare where it ends
with an uninterrupted run.

    python -m benchmarks.crash_consistency [--kills 60] [--seed 0] [--minutes 12] [--work runs/crash_consistency]

The run is ``creditflow train`` from the tiny default policy, exactly as a user starts it (the real command
line, a new process each time, imports included): the tiny policy is built, fine-tuned on a few expert demos
(π_SFT), evaluated, and trained with GRPO for a few steps, saving a checkpoint every other step. It is run
once without interruption (the reference), then again in a fresh directory, stopped by a seeded random plan of
events and continued after each one:

* ``kill -9`` at a random moment of the whole run (imports, the tiny policy, SFT, evaluation, RL steps,
  checkpoint writes);
* ``kill -9`` at a chosen point of a write (``CREDITFLOW_CRASH_AT``, :func:`creditflow.atomic.crash_point`):
  between the files of a checkpoint, between its rename and ``latest``, while old checkpoints are removed,
  halfway through a metrics row, between the tiny policy's weights and its tokenizer;
* Ctrl-C (SIGINT) and SIGTERM at a random moment: the process must end with exactly one ``interrupted ...``
  line (the last one), exit code 130 / 143 and no traceback.

After each event the run continues with ``creditflow train --resume DIR`` (the original command when the run
had not yet written its ``config.yaml``) until it completes. Checked: every event ended the process as
stated, no traceback anywhere, no damaged checkpoint ever (a kill never leaves one), and at the end the final
weights are bitwise those of the reference and the metric rows (all but ``time/*``) are equal. Writes
``benchmarks/results/crash_consistency.{json,md}`` with machine info.

The short version of the same harness runs in the test suite (tests/test_crash_consistency.py): a forked
copy of the test process instead of a new one (no imports to wait for), a handful of events.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
import traceback
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable


from creditflow.atomic import CRASH_AT

ROOT = Path(__file__).resolve().parents[1]

# each crash point and how many times a run passes it (the n of name@n is drawn up to that)
CRASH_POINTS = {"checkpoint.model": 2, "checkpoint.tokenizer": 2, "checkpoint.optimizer": 2, "checkpoint.state": 2,
                "checkpoint.manifest": 2, "checkpoint.published": 2, "checkpoint.latest": 2,
                "checkpoint.pruned": 1, "metrics.row": 4, "tiny.model": 1}
SIGNAL_NAMES = {signal.SIGKILL: "kill -9", signal.SIGINT: "SIGINT", signal.SIGTERM: "SIGTERM"}


@dataclass
class Event:
    """What stops one segment of the run: a signal ``after`` seconds, or a crash ``point`` (``name@n``)."""

    signum: int = signal.SIGKILL
    after: float | None = None
    point: str | None = None

    def __str__(self) -> str:
        return f"kill -9 at {self.point}" if self.point else f"{SIGNAL_NAMES[self.signum]} after {self.after:.2f} s"


@dataclass
class Segment:
    event: str
    argv: list[str]
    status: int  # the exit code, or minus the signal that ended the process
    seconds: float
    output: str = field(repr=False)


class Inconsistent(AssertionError):
    """The run did not behave as the crash-consistency guarantee says."""


# -- launching ----------------------------------------------------------------------------------------

Start = Callable[[list[str], dict, Path], "Child"]


class Child:
    """A started segment: its pid and ``poll()`` (its exit status once it has ended, else None)."""

    def __init__(self, pid: int, poll: Callable[[], int | None]):
        self.pid, self.poll = pid, poll

    def wait(self, limit: float) -> int:
        """The exit status (minus the signal that ended it); a child still running after ``limit`` seconds
        is killed and reported as hung."""
        deadline = time.perf_counter() + limit
        while (status := self.poll()) is None:
            if time.perf_counter() > deadline:
                os.kill(self.pid, signal.SIGKILL)
                while self.poll() is None:
                    time.sleep(0.05)
                raise Inconsistent(f"pid {self.pid} still running after {limit:.0f} s: hung")
            time.sleep(0.02)
        return status


def process_start(python: str = sys.executable) -> Start:
    """A new ``python -m creditflow`` process per segment (the real command line, imports included)."""
    def start(argv: list[str], env: dict, log: Path) -> Child:
        fh = log.open("wb")
        proc = subprocess.Popen([python, "-m", "creditflow", *argv], stdout=fh, stderr=subprocess.STDOUT, cwd=ROOT,
                                env={**os.environ, "PYTHONPATH": str(ROOT), **env})
        fh.close()
        return Child(proc.pid, proc.poll)
    return start


def fork_start(argv: list[str], env: dict, log: Path) -> Child:
    """A forked copy of this process runs ``creditflow.cli.main(argv)`` (creditflow already imported)."""
    from creditflow.cli import main

    # the log is opened before the fork: a child killed before its first instruction still leaves one (empty)
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    pid = os.fork()
    if pid != 0:
        os.close(fd)
    if pid == 0:  # the child: never returns
        code = 99
        try:
            os.dup2(fd, 1)
            os.dup2(fd, 2)
            sys.stdout = io.TextIOWrapper(io.FileIO(1, "w", closefd=False), line_buffering=True)
            sys.stderr = io.TextIOWrapper(io.FileIO(2, "w", closefd=False), line_buffering=True)
            os.environ.update(env)
            try:
                main(argv)
                code = 0
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        except BaseException:  # the harness itself failed: say so in the log
            traceback.print_exc()
        finally:
            try:
                sys.stdout.flush()
                sys.stderr.flush()
            finally:
                os._exit(code)

    def poll() -> int | None:
        done, status = os.waitpid(pid, os.WNOHANG)
        return os.waitstatus_to_exitcode(status) if done else None

    return Child(pid, poll)


def run_segment(start: Start, argv: list[str], event: Event | None, log: Path, limit: float = 900.0) -> Segment:
    """One process run of ``argv``, stopped by ``event`` (None: to its end); at most ``limit`` seconds."""
    env = {CRASH_AT: event.point} if event is not None and event.point else {}
    t0 = time.perf_counter()
    child = start(argv, env, log)
    if event is not None and event.after is not None:
        deadline = t0 + event.after
        while time.perf_counter() < deadline:  # unless it ends first
            if _ended(child.pid):
                break
            time.sleep(min(0.01, max(0.0, deadline - time.perf_counter())))
        else:
            try:
                os.kill(child.pid, event.signum)
            except ProcessLookupError:
                pass
    status = child.wait(limit)
    return Segment(str(event) if event else "none", argv, status, round(time.perf_counter() - t0, 2),
                   log.read_text(errors="replace"))


def _ended(pid: int) -> bool:
    """Whether the child has ended (it stays a zombie, still waitable, until ``wait``)."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


# -- one crash run ------------------------------------------------------------------------------------


def next_argv(out: Path, fresh: list[str]) -> list[str]:
    """``--resume`` once the run has its config.yaml, else the original command."""
    return ["train", "--resume", str(out)] if (out / "config.yaml").exists() else list(fresh)


def done(seg: Segment) -> bool:
    """The run is complete: the command said ``done:`` (a kill may have come while it exited), or a resume
    found nothing left to do."""
    return (seg.status == 0 or "\ndone: step" in "\n" + seg.output
            or (seg.status in (2, -signal.SIGKILL) and "nothing to do" in seg.output))


def check_segment(seg: Segment, event: Event | None) -> None:
    """What each kind of stop must look like: no traceback and no damaged checkpoint ever; a kill -9 ends
    the process by SIGKILL; Ctrl-C / SIGTERM end it with exit 130 / 143 and exactly one ``interrupted ...``
    line, its last; a segment that ran to the end exits 0 (2 for a resume with nothing left to do)."""
    where = f"{seg.event} ({' '.join(seg.argv[:3])} ...)"
    tail = seg.output[-3000:]
    if "Traceback" in seg.output:
        raise Inconsistent(f"{where}: a traceback\n{tail}")
    if "checkpoint damaged" in seg.output or "no intact checkpoint" in seg.output:
        raise Inconsistent(f"{where}: a kill left a damaged checkpoint\n{tail}")
    killed = event is not None and (event.point is not None or event.signum == signal.SIGKILL)
    if killed and seg.status == -signal.SIGKILL:
        return
    if event is not None and not killed and seg.status == 128 + event.signum:
        lines = [line for line in seg.output.splitlines() if line.strip()]
        said = [line for line in lines if line.startswith("interrupted")]
        if len(said) != 1 or lines[-1] != said[0]:
            raise Inconsistent(f"{where}: {len(said)} 'interrupted' line(s), expected one, the last\n{tail}")
        return
    if seg.status == 0 or (seg.status == 2 and "nothing to do" in seg.output):
        return
    raise Inconsistent(f"{where}: exit {seg.status}\n{tail}")


def crash_run(start: Start, fresh: list[str], out: Path, events: list[Event], logs: Path,
              until: float | None = None, max_tail: int = 20) -> tuple[list[Segment], int]:
    """Run ``fresh`` into ``out``, stopped by each of ``events`` in turn and continued after each (no more
    events after ``time.perf_counter()`` passes ``until``), then to its end. Returns the segments and how many
    events were used (the run may end before the last). Raises :class:`Inconsistent` on a stop that
    misbehaves."""
    logs.mkdir(parents=True, exist_ok=True)
    segments: list[Segment] = []
    used = 0
    while len(segments) < len(events) + max_tail:
        event = None
        if used < len(events) and (until is None or time.perf_counter() < until):
            event, used = events[used], used + 1
        seg = run_segment(start, next_argv(out, fresh), event, logs / f"{len(segments):03d}.log")
        segments.append(seg)
        check_segment(seg, event)
        if done(seg):
            return segments, used
        if event is None:
            raise Inconsistent(f"{seg.event}: exit {seg.status}\n{seg.output[-3000:]}")
    raise Inconsistent(f"no end after {len(segments)} segments")


def crash_runs(start: Start, fresh: list[str], out: Path, events: list[Event], logs: Path, reference: Path,
               steps: int, until: float | None = None, report: Callable[[Segment], None] | None = None
               ) -> tuple[list[Segment], int]:
    """:func:`crash_run` until every event is used (or ``until`` passes): each time the run completes it is
    compared with ``reference`` (:func:`compare`) and started again from nothing. Returns the segments and
    the number of completed runs."""
    segments: list[Segment] = []
    used = completed = 0
    while used < len(events) and (until is None or time.perf_counter() < until):
        segs, n = crash_run(start, fresh, out, events[used:], logs / f"run{completed}", until=until)
        for seg in segs:
            if report is not None:
                report(seg)
        compare(reference, out, steps)
        shutil.rmtree(out)
        segments += segs
        used += n
        completed += 1
    return segments, completed


def final_state(out: Path, steps: int):
    """The final weights (the last checkpoint's tensors) and the metric rows without ``time/*``."""
    from safetensors.torch import load_file

    from creditflow.trainer.metrics import read_metrics

    weights = load_file(out / "checkpoints" / f"step_{steps:06d}" / "model.safetensors")
    rows = [{k: v for k, v in r.items() if not k.startswith("time/")} for r in read_metrics(out / "metrics.jsonl")]
    return weights, rows


def compare(reference: Path, run: Path, steps: int) -> None:
    """The run ends where the reference ends: bitwise equal weights, equal metric rows, every checkpoint
    intact. (A kill after the last checkpoint may leave a hidden temporary, which a resume would remove.)"""
    import torch

    from creditflow.trainer.checkpoint import checkpoint_problem

    ref_w, ref_rows = final_state(reference, steps)
    w, rows = final_state(run, steps)
    if sorted(w) != sorted(ref_w) or any(not torch.equal(w[k], ref_w[k]) for k in w):
        differ = [k for k in w if k in ref_w and not torch.equal(w[k], ref_w[k])]
        raise Inconsistent(f"{run}: final weights differ from the uninterrupted run's ({len(differ)} tensors, e.g. "
                           f"{differ[:3]})")
    if rows != ref_rows:
        bad = next(i for i, (a, b) in enumerate(zip(rows + [None] * len(ref_rows), ref_rows)) if a != b)
        raise Inconsistent(f"{run}: metric rows differ from the uninterrupted run's at row {bad}: "
                           f"{rows[bad] if bad < len(rows) else None} vs {ref_rows[bad]}")
    for ckpt in sorted((run / "checkpoints").glob("step_*")):
        problem = checkpoint_problem(ckpt)
        if problem:
            raise Inconsistent(f"{ckpt}: damaged ({problem})")


def random_events(rng: random.Random, n: int, duration: float, startup: float = 0.0, point_share: float = 0.35,
                  signal_share: float = 0.2, startup_share: float = 0.25) -> list[Event]:
    """``n`` events: crash points (``point_share``), Ctrl-C / SIGTERM at random moments (``signal_share``),
    the rest kill -9 at random moments. A moment is drawn within the first ``startup`` seconds of a segment
    (its imports) with probability ``startup_share``, else between ``startup`` and ``duration``."""
    events = []
    for _ in range(n):
        r = rng.random()
        if r < point_share:
            name = rng.choice(sorted(CRASH_POINTS))
            events.append(Event(point=f"{name}@{rng.randint(1, CRASH_POINTS[name])}"))
        else:
            signum = rng.choice([signal.SIGINT, signal.SIGTERM]) if r < point_share + signal_share else signal.SIGKILL
            early = startup > 0.05 and rng.random() < startup_share
            after = rng.uniform(0.05, startup) if early else rng.uniform(startup, duration)
            events.append(Event(signum=signum, after=round(after, 2)))
    return events


PHASES = (("interrupted while starting", "imports"), ("done:", "finished"), ("error:", "finished"),
          ("step ", "RL steps"), ("resumed from", "RL steps (resumed)"), ("RL:", "step-0 evaluation or step 1"),
          ("SFT on", "SFT"), ("reusing", "SFT"), ("built tiny", "SFT"), ("no checkpoint", "tiny policy or SFT"))


def phase(output: str) -> str:
    """Where a segment was when it stopped, from its last log line (none: imports or the tiny policy)."""
    if "interrupted while starting" in output:
        return "imports"
    lines = [line for line in output.splitlines() if line.strip() and not line.startswith("interrupted")]
    last = lines[-1] if lines else ""
    return next((name for prefix, name in PHASES if last.startswith(prefix)), "imports or the tiny policy")


def import_seconds(python: str = sys.executable) -> float:
    """How long ``import creditflow.cli`` takes in a new process here (what a command does first)."""
    t0 = time.perf_counter()
    subprocess.run([python, "-c", "import creditflow.cli"], cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
                   check=True)
    return time.perf_counter() - t0


# -- the benchmark ------------------------------------------------------------------------------------

RUN = ["rl.steps=6", "rl.save_every=2", "rl.eval_every=3", "rl.eval_episodes=2", "rollout.tasks_per_step=2",
       "rollout.group_size=2", "rollout.max_steps=4", "generation.max_new_tokens=8", "sft.demos=8", "sft.epochs=1",
       "policy.tiny_hidden_size=32", "policy.tiny_layers=1", "policy.device=cpu", "tensorboard=false", "seed=3"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kills", type=int, default=60, help="events in the plan (it stops early at --minutes)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--minutes", type=float, default=12.0, help="stop adding events after this long")
    parser.add_argument("--work", type=Path, default=ROOT / "runs" / "crash_consistency")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "crash_consistency")
    args = parser.parse_args()

    from benchmarks.machine import machine_info

    shutil.rmtree(args.work, ignore_errors=True)
    args.work.mkdir(parents=True)
    start = process_start()
    load0 = os.getloadavg()
    t0 = time.perf_counter()
    reference = args.work / "reference"
    fresh = ["train", "--out", str(reference), *RUN]
    ref = run_segment(start, fresh, None, args.work / "reference.log")
    check_segment(ref, None)
    duration = ref.seconds
    startup = import_seconds()
    print(f"reference: {duration:.1f} s, imports {startup:.1f} s", file=sys.stderr)

    rng = random.Random(args.seed)
    events = random_events(rng, args.kills, duration, startup)
    run = args.work / "crashed"
    fresh = ["train", "--out", str(run), *RUN]
    budget = t0 + args.minutes * 60
    segments, completions = crash_runs(
        start, fresh, run, events, args.work / "logs", reference, 6, until=budget,
        report=lambda seg: print(f"{seg.event}: exit {seg.status} after {seg.seconds:.1f} s", file=sys.stderr))
    used = sum(1 for s in segments if s.event != "none")
    cut = events[:used]
    minutes = (time.perf_counter() - t0) / 60
    kinds: dict[str, int] = {}
    for event in cut:
        kind = event.point.split("@")[0] if event.point else SIGNAL_NAMES[event.signum]
        kinds[kind] = kinds.get(kind, 0) + 1
    phases: dict[str, int] = {}
    for seg in segments:
        if seg.event != "none" and not done(seg):
            phases[phase(seg.output)] = phases.get(phase(seg.output), 0) + 1
    record = {
        "what": "kill -9 / crash points / SIGINT / SIGTERM during `creditflow train` from the tiny default, resumed "
                "each time; final weights and metric rows compared with an uninterrupted run",
        "settings": RUN, "seed": args.seed, "reference_seconds": duration, "import_seconds": round(startup, 1),
        "events": len(cut), "kinds": kinds, "stopped_in": phases,
        "segments": len(segments), "completed_runs": completions, "minutes": round(minutes, 1),
        "result": "every completed run equal to the reference (weights bitwise, metric rows), no traceback, "
                  "no damaged checkpoint, one interrupted line per SIGINT/SIGTERM",
        "load_average": {"start": load0, "end": os.getloadavg()}, "machine": machine_info(),
        "log": [{**{k: v for k, v in asdict(s).items() if k != "output"}, "phase": phase(s.output),
                 "last_line": _last_line(s.output)} for s in segments],
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.with_suffix(".json").write_text(json.dumps(record, indent=1) + "\n")
    args.out.with_suffix(".md").write_text(_markdown(record))
    print(_markdown(record))


def _last_line(output: str) -> str:
    """Where a segment was when it ended (its last line of output, shortened)."""
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    return lines[-1][:160] if lines else ""


def _markdown(record: dict) -> str:
    m = record["machine"]
    kinds = "\n".join(f"| {k} | {n} |" for k, n in sorted(record["kinds"].items()))
    phases = "\n".join(f"| {k} | {n} |" for k, n in sorted(record["stopped_in"].items()))
    return f"""# Crash consistency of `creditflow train`

{record['what']}. Settings: `{' '.join(record['settings'])}` (π_SFT built from scratch each run).

- events: {record['events']} (seed {record['seed']}), in {record['segments']} process runs, {record['minutes']} min
  wall time; the uninterrupted run took {record['reference_seconds']:.0f} s, {record['import_seconds']:.0f} s of it
  the imports (a quarter of the random moments fall in them, the rest after);
- runs driven to their end and compared: {record['completed_runs']};
- result: {record['result']}.

| event | count |
|---|---|
{kinds}

Where the stopped segments were (from their last log line; events that came after the run had ended are not
counted):

| phase | stops |
|---|---|
{phases}

Machine: {m.get('cpu')}, {m.get('cores')} cores (shared with other jobs: load average {record['load_average']['start'][0]:.1f}
at the start, {record['load_average']['end'][0]:.1f} at the end), Python {m.get('python')}, torch {m.get('torch')},
{m.get('date')}. The benchmark is kept to ~{record['minutes']:.0f} minutes because the CPU is shared (`--minutes`). Random
moments are drawn within one uninterrupted run's duration of a segment's start; a resumed segment does less
work than a whole run, so later events often come after it ended (those are counted as events, not as stops).
"""


if __name__ == "__main__":
    main()
