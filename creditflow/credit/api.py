"""The public ways to run an estimator. Each builds a :class:`~creditflow.credit.batch.StepBatch` and calls
the registered kernel, so all of them compute the same numbers:

- :func:`compute` - in place on ``Trajectory`` objects (the trainer's path);
- :func:`score` - on copies of ``Trajectory`` objects or of JSONL-schema dicts;
- :func:`score_arrays` - on flat per-row arrays (any framework); :func:`credit_arrays` on the same as
  :class:`~creditflow.credit.rows.Rows` (the audit, the trainer bridges);
- :func:`score_records` - on parsed JSONL dicts, adding the three fields to each step dict and changing
  nothing else; :func:`score_lines` also writes the file (``creditflow credit`` after reading).

``score``, ``score_arrays``, ``score_records`` and ``score_lines`` read recorded data, so they also check
that a *default* ``reward_source`` agrees with the outcome the data records
(:func:`~creditflow.credit.returns.check_outcome_source`): ``reward_source=return`` that ranks a successful
trajectory at or below a failed one of its group is refused with one line naming the knob, unless
``reward_source`` was passed explicitly. ``compute`` (the trainer, whose env rewards carry the outcome) does
not check.
"""

from __future__ import annotations

import contextlib
import gc
import itertools
import os
from dataclasses import dataclass
from typing import Iterable, Iterator, Sequence

import numpy as np

from creditflow.credit.batch import (
    BatchTypeError,
    StepBatch,
    active_rows,
    batch_from_arrays,
    batch_from_dicts,
    batch_from_trajectories,
    check_trajectories,
    write_record_fields,
    write_step_fields,
)
from creditflow.credit.registry import (
    Credit,
    Knobs,
    run_in_place,
    run_kernel,
    validate_knobs,
)
from creditflow.credit.returns import check_outcome_source
from creditflow.credit.rows import Rows
from creditflow.jsonl import JsonLine
from creditflow.rollout.trajectory import Step, Trajectory, write_scored_jsonl

# Step fields that Trajectory.from_dict copies as they are, where a step dict has them
_OPTIONAL_STEP_FIELDS = {"done", "truncated", "next_state", "executed", "info", "prompt_ids", "response_ids",
                         "logprobs", "process_reward", "step_reward", "advantage"}
_NEW = object.__new__


def compute(name: str, trajectories: Sequence[Trajectory], **knobs) -> dict:
    """Run estimator ``name`` in place on ``trajectories`` (``Trajectory`` objects); returns its metrics."""
    values = validate_knobs(name, knobs)
    return run_in_place(name, _items(trajectories, "Trajectory objects"), values)


def _items(trajectories, kinds: str) -> list:
    """``trajectories`` as a list (empty: nothing to score, nothing changes), or a :class:`BatchTypeError`
    saying what was given instead (one trajectory, a string, a dict: not a collection of them)."""
    if isinstance(trajectories, (Trajectory, dict, str, bytes)) or not isinstance(trajectories, Iterable):
        one = " (for one trajectory, pass [trajectory])" if isinstance(trajectories, (Trajectory, dict)) else ""
        raise BatchTypeError(f"trajectories must be a list (or other iterable) of {kinds}, got "
                             f"{type(trajectories).__name__}{one}")
    return list(trajectories)


def run_checked(name: str, batch: StepBatch, knobs: Knobs) -> Credit:
    """Run estimator ``name`` on ``batch`` with validated ``knobs``, first refusing a *default*
    ``reward_source`` (not among the knobs the caller set, nor set by a preset) that contradicts the
    outcome the data records."""
    resolved = knobs.resolved()
    source = getattr(resolved, "reward_source", None)
    if source is not None and "reward_source" not in resolved.model_fields_set:
        check_outcome_source(batch, source)
    return run_kernel(name, batch, resolved)


def score(trajectories: Iterable[Trajectory | dict], estimator: str = "grpo", **knobs) -> list[Trajectory]:
    """Score copies of ``trajectories`` (``Trajectory`` objects or dicts in the JSONL schema, mixed freely).

    The copies have new ``Step`` objects; their ``info``, ``meta`` and token lists are shared with the
    input, which is left unchanged. Dicts are validated like ``Trajectory.from_dict``, ``Trajectory`` objects
    by type (``success="False"`` is an error, not True). A credit field the estimator does not compute
    (``process_reward`` for grpo) is None on the copies.
    """
    values = validate_knobs(estimator, knobs)
    items = _items(trajectories, "Trajectory objects or dicts")
    objects = [i for i, t in enumerate(items) if isinstance(t, Trajectory)]
    check_trajectories([items[i] for i in objects], lambda k: f"trajectory {objects[k]}")  # before copying
    dict_at = [i for i, t in enumerate(items) if not isinstance(t, Trajectory)]
    records = [items[i] for i in dict_at]
    dict_batch = batch_from_dicts(records, [f"trajectory {i}" for i in dict_at]) if records else None
    with _without_cyclic_gc():  # many new objects, no cycles among them
        parsed = iter(trajectories_from_batch(records, dict_batch) if records else [])
        trajs = [copy_trajectory(t) if isinstance(t, Trajectory) else next(parsed) for t in items]
    batch = dict_batch if len(records) == len(items) and dict_batch is not None else batch_from_trajectories(trajs)
    credit = run_checked(estimator, batch, values)
    write_step_fields([s for t in trajs for s in t.steps], **credit.all_columns())
    return trajs


def score_records(records: Sequence[dict], estimator: str, knobs: Knobs,
                  wheres: Sequence[str] | None = None) -> tuple[Credit, StepBatch]:
    """Score parsed JSONL dicts in place with validated ``knobs``: each step dict gets ``process_reward``
    (where the estimator has one, else that key is removed), ``step_reward`` and ``advantage``; nothing else
    changes. ``wheres[i]`` names record i in errors."""
    batch = batch_from_dicts(records, wheres)
    credit = run_checked(estimator, batch, knobs)
    write_record_fields(batch.source, **credit.all_columns())
    return credit, batch


def score_lines(lines: Sequence[JsonLine], estimator: str, knobs: Knobs,
                out: str | os.PathLike) -> tuple[Credit, StepBatch]:
    """``creditflow credit`` after reading: score the lines of :func:`read_jsonl_lines` and write them to
    ``out`` with the credit fields set in every step and every other byte as read (docs/formats.md, "The
    credit round trip")."""
    batch = batch_from_dicts([line.value for line in lines], [line.where for line in lines])
    credit = run_checked(estimator, batch, knobs)
    with _without_cyclic_gc():  # one small list per line, over a heap of parsed dicts
        write_scored_jsonl(out, lines, credit.columns())
    return credit, batch


@dataclass
class ArrayCredit:
    """:func:`credit_arrays` output, aligned with the input rows."""

    advantage: np.ndarray
    step_reward: np.ndarray
    process_reward: np.ndarray | None
    metrics: dict


def credit_arrays(estimator: str, rows: Rows, *, check_outcome: bool = True, **knobs) -> ArrayCredit:
    """Every per-row field of :func:`score_arrays` and the metrics, for :class:`~creditflow.credit.rows.Rows`
    (the audit and the trainer bridges build them). Rows whose ``active`` is False take no part and get 0 in
    every field (no active row at all: advantages and step rewards 0, no process reward, no metrics).
    ``check_outcome=False`` skips the default-``reward_source`` check (a trainer's own env rewards, as in
    :func:`compute`)."""
    values = validate_knobs(estimator, knobs)
    keep = active_rows(rows)
    if keep is not None and keep.size == 0:  # a batch of padding: nothing to score (an empty batch is an error)
        zeros = np.zeros(rows.n, dtype=np.float64)
        return ArrayCredit(zeros, zeros.copy(), None, {})
    batch, order = batch_from_arrays(rows if keep is None else rows.select(keep))
    credit = (run_checked(estimator, batch, values) if check_outcome
              else run_kernel(estimator, batch, values.resolved()))
    back = order if keep is None else keep[order]  # the input row of each batch row
    pick = (lambda col: None if col is None else _scattered(col, back, rows.n))
    return ArrayCredit(pick(credit.advantage), pick(credit.step_reward), pick(credit.process_reward),
                       credit.metrics)


def _scattered(column: np.ndarray, rows: np.ndarray, n: int) -> np.ndarray:
    """(n,) float64: ``column[k]`` at row ``rows[k]``, 0 at the rows that are not there."""
    out = np.zeros(n, dtype=np.float64)
    out[rows] = column
    return out


def score_arrays(estimator: str, *, group_ids, traj_ids, step_index, state_keys, rewards, success, valid=None,
                 observations=None, scores=None, next_state_keys=None, **knobs) -> np.ndarray:
    """Per-row advantages for one-row-per-step arrays, rows in any order (the same kernel as :func:`score`).

    ``group_ids`` (rollouts compared with each other), ``traj_ids`` and ``step_index`` place each row;
    ``state_keys`` is the state s_t of the row (any hashable: a state key, or the observation text for
    ``state_fn=observation``); ``rewards`` the env reward of the step; ``success`` the outcome of the row's
    trajectory (the same on all its rows); ``valid`` False for an invalid action (pruned by RewardFlow).
    Optional: ``observations`` (the text shown at the step: state_fn=observation, and "Nothing happens"
    no-op feedback in the next row), ``scores`` (per trajectory, for ``reward_source=score``) and
    ``next_state_keys`` (s_{t+1}; default the next row's state, and after a trajectory's last row a shared
    success node, or a private dead end for a failure). Returns float64 advantages aligned with the input rows,
    all finite (credit that would not be is a :class:`CreditError` naming the trajectory).

    Arguments are checked first (:func:`~creditflow.credit.batch.batch_from_arrays`): a column of the wrong
    kind or shape is a ``TypeError``, a wrong value or an empty batch a ``ValueError``, each naming the
    argument, the row and what it got; ``success`` and ``valid`` take booleans or the numbers 0 and 1 only.
    """
    rows = Rows(group_ids, traj_ids, step_index, state_keys, rewards, success, valid=valid,
                observations=observations, scores=scores, next_state_keys=next_state_keys)
    return credit_arrays(estimator, rows, **knobs).advantage


# --------------------------------------------------------------------------------------------------
# copies
# --------------------------------------------------------------------------------------------------


@contextlib.contextmanager
def _without_cyclic_gc() -> Iterator[None]:
    """Pause Python's cyclic garbage collector while building many objects that form no cycles: its
    collections would otherwise walk the whole heap again and again (a third of ``score``'s time)."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def copy_step(step: Step) -> Step:
    """A new ``Step`` with the same field values (containers shared)."""
    new = _NEW(Step)
    new.__dict__.update(step.__dict__)
    return new


def copy_trajectory(traj: Trajectory) -> Trajectory:
    """A new ``Trajectory`` with new ``Step`` objects (containers shared); in-memory fields kept."""
    new = _NEW(Trajectory)
    new.__dict__.update(traj.__dict__)
    new.steps = list(map(copy_step, traj.steps))
    return new


def trajectories_from_batch(records: Sequence[dict], batch: StepBatch) -> list[Trajectory]:
    """``Trajectory`` objects for JSONL dicts already validated into ``batch``, as ``Trajectory.from_dict``
    builds them, made column by column (the optional step fields only where a step has them)."""
    rows = batch.source
    responses = list(map(dict.get, rows, itertools.repeat("response")))
    steps = list(map(Step, batch.state, batch.observation, batch.action, [r or "" for r in responses],
                     batch.valid.tolist(), batch.reward.tolist()))
    present = set().union(*map(dict.keys, rows)) if rows else set()
    for name in _OPTIONAL_STEP_FIELDS & present:
        for step, row in zip(steps, rows):
            if name in row:
                setattr(step, name, row[name])
    out = []
    start = 0
    for record, n, group, final, won, score_ in zip(records, batch.lengths.tolist(), batch.group_ids,
                                                    batch.final_state, batch.success.tolist(), batch.score.tolist()):
        out.append(Trajectory(task_id=record["task_id"], steps=steps[start:start + n], group_id=group,
                              traj_id=record.get("traj_id") or "", final_state=final, success=won, score=score_,
                              meta=record.get("meta") or {}))
        start += n
    return out


__all__ = ["ArrayCredit", "compute", "copy_step", "copy_trajectory", "credit_arrays", "run_checked", "score",
           "score_arrays", "score_lines", "score_records", "trajectories_from_batch"]
