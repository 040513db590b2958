"""Crash consistency (issue 63): a run killed at any moment, then resumed, ends exactly where an uninterrupted
run ends (final weights bitwise, metric rows), and Ctrl-C / SIGTERM at any moment is one line, never a
traceback.

The short version of benchmarks/crash_consistency.py: each segment of the run is a forked copy of this
process running ``creditflow.cli.main`` (creditflow is already imported, so a segment starts at once), killed
with SIGKILL at chosen write points (``CREDITFLOW_CRASH_AT``) or at seeded random moments. The import phase
is tested with the real command in a new process.
"""

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from benchmarks.crash_consistency import Event, compare, crash_run, crash_runs, fork_start, run_segment

ROOT = Path(__file__).resolve().parents[1]
STEPS = 6
RUN = [f"rl.steps={STEPS}", "rl.save_every=2", "rl.eval_every=3", "rollout.tasks_per_step=2", "rollout.group_size=2",
       "rl.eval_episodes=2", "generation.max_new_tokens=6", "rollout.max_steps=3", "rl.lr=1e-3",
       "tensorboard=false"]


def fresh(out, model):
    return ["train", "--model", str(model), "--out", str(out), *RUN]


@pytest.fixture(scope="module")
def reference(tmp_path_factory, tiny_model_dir):
    """The uninterrupted run, and how long it took."""
    out = tmp_path_factory.mktemp("crash") / "reference"
    seg = run_segment(fork_start, fresh(out, tiny_model_dir), None, out.with_suffix(".log"))
    assert seg.status == 0, seg.output[-3000:]
    return out, seg.seconds


@pytest.mark.slow
def test_kill_9_inside_every_write_then_resume_ends_where_an_uninterrupted_run_ends(reference, tiny_model_dir,
                                                                                   tmp_path):
    events = [Event(point=p) for p in (
        "checkpoint.optimizer",   # the first checkpoint half written: no checkpoint, the run starts again
        "metrics.row@2",          # half of step 1's row on disk: dropped on resume
        "checkpoint.published",   # step 2 complete, `latest` not yet updated
        "checkpoint.manifest@2",  # step 4's files all written, not yet renamed into place
        "checkpoint.pruned",      # step 6 written, step 2 half removed
    )]
    out = tmp_path / "run"
    segments, used = crash_run(fork_start, fresh(out, tiny_model_dir), out, events, tmp_path / "logs")
    assert used == len(events)
    assert [s.status for s in segments[:used]] == [-signal.SIGKILL] * used  # every point was reached
    compare(reference[0], out, STEPS)


@pytest.mark.slow
def test_random_kills_and_interrupts_then_resume_end_where_an_uninterrupted_run_ends(reference, tiny_model_dir,
                                                                                    tmp_path):
    """Seeded random moments within half a run's duration of a segment's start; a run that completes before
    the events are used up is compared and started again."""
    rng = random.Random(63)
    duration = reference[1]
    events = [Event(signum=s, after=round(rng.uniform(0.05, duration / 2), 2))
              for s in (signal.SIGKILL, signal.SIGINT, signal.SIGKILL, signal.SIGTERM, signal.SIGKILL)]
    out = tmp_path / "run"
    segments, completed = crash_runs(fork_start, fresh(out, tiny_model_dir), out, events, tmp_path / "logs",
                                     reference[0], STEPS)  # checks every stop's output, compares every end
    assert completed >= 1 and sum(s.event != "none" for s in segments) == len(events)


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_an_interrupt_while_the_imports_run_is_one_line(tmp_path, signum):
    """The real command, interrupted in its first second (its imports take several): one line, 130 / 143."""
    proc = subprocess.Popen([sys.executable, "-m", "creditflow", "train", "--out", str(tmp_path / "run")], cwd=ROOT,
                            env={**os.environ, "PYTHONPATH": str(ROOT)}, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    time.sleep(0.5)
    proc.send_signal(signum)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 128 + signum, err
    assert err.strip().splitlines() == ["interrupted while starting; nothing saved"], err
    assert not (tmp_path / "run").exists()
