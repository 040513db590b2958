"""The public ways to run an estimator. Each builds a :class:`~creditflow.credit.batch.StepBatch` and calls
the registered kernel, so all of them compute the same numbers:

- :func:`compute` - in place on ``Trajectory`` objects (the trainer's path);
- :func:`score` - on copies of ``Trajectory`` objects or of JSONL-schema dicts;
- :func:`score_arrays` / :func:`credit_arrays` - on flat per-row arrays (any framework; the verl
  integration);
- :func:`score_records` - on parsed JSONL dicts, adding the three fields to each step dict and changing
  nothing else (``creditflow credit``).

``score``, ``score_arrays`` and ``score_records`` read recorded data, so they also check that a *default*
``reward_source`` agrees with the outcome the data records (:func:`~creditflow.credit.returns.check_outcome_source`):
``reward_source=return`` that ranks a successful trajectory at or below a failed one of its group is refused
with one line naming the knob, unless ``reward_source`` was passed explicitly. ``compute`` (the trainer, whose
env rewards carry the outcome) does not check.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Iterable, Sequence

import numpy as np

from creditflow.credit.batch import (
    StepBatch,
    batch_from_arrays,
    batch_from_dicts,
    batch_from_trajectories,
    write_record_fields,
    write_step_fields,
)
from creditflow.credit.registry import (
    Credit,
    Knobs,
    get_kernel,
    run_in_place,
    validate_knobs,
)
from creditflow.credit.returns import check_outcome_source
from creditflow.rollout.trajectory import Step, Trajectory

_STEP_FIELDS = tuple(f.name for f in fields(Step))
_NEW = object.__new__


def compute(name: str, trajectories: Sequence[Trajectory], **knobs) -> dict:
    """Run estimator ``name`` in place on ``trajectories``; returns its metrics."""
    return run_in_place(get_kernel(name), trajectories, validate_knobs(name, knobs))


def run_checked(name: str, batch: StepBatch, knobs: Knobs) -> Credit:
    """Run estimator ``name`` on ``batch`` with validated ``knobs``, first refusing a *default*
    ``reward_source`` (not among the knobs the caller set, nor set by a preset) that contradicts the
    outcome the data records."""
    resolved = knobs.resolved()
    source = getattr(resolved, "reward_source", None)
    if source is not None and "reward_source" not in resolved.model_fields_set:
        check_outcome_source(batch, source)
    return get_kernel(name)(batch, resolved)


def score(trajectories: Iterable[Trajectory | dict], estimator: str = "grpo", **knobs) -> list[Trajectory]:
    """Score copies of ``trajectories`` (``Trajectory`` objects or dicts in the JSONL schema, mixed freely).

    The copies have new ``Step`` objects; their ``info``, ``meta`` and token lists are shared with the
    input, which is left unchanged. Dicts are validated like ``Trajectory.from_dict``.
    """
    values = validate_knobs(estimator, knobs)
    items = list(trajectories)
    trajs = [copy_trajectory(t) if isinstance(t, Trajectory) else None for t in items]
    dict_at = [i for i, t in enumerate(trajs) if t is None]
    if dict_at:
        records = [items[i] for i in dict_at]
        parsed = trajectories_from_batch(records, batch_from_dicts(records, [f"trajectory {i}" for i in dict_at]))
        for i, traj in zip(dict_at, parsed):
            trajs[i] = traj
    batch = batch_from_trajectories(trajs)
    credit = run_checked(estimator, batch, values)
    write_step_fields(batch.source, **credit.columns())
    return trajs


def score_records(records: Sequence[dict], estimator: str, knobs: Knobs,
                  wheres: Sequence[str] | None = None) -> tuple[Credit, StepBatch]:
    """Score parsed JSONL dicts in place with validated ``knobs``: each step dict gets ``process_reward``
    (where the estimator has one), ``step_reward`` and ``advantage``; nothing else changes. ``wheres[i]``
    names record i in errors."""
    batch = batch_from_dicts(records, wheres)
    credit = run_checked(estimator, batch, knobs)
    write_record_fields(batch.source, **credit.columns())
    return credit, batch


@dataclass
class ArrayCredit:
    """:func:`credit_arrays` output, aligned with the input rows."""

    advantage: np.ndarray
    step_reward: np.ndarray
    process_reward: np.ndarray | None
    metrics: dict


def credit_arrays(estimator: str, *, group_ids, traj_ids, step_index, state_keys, rewards, success, valid=None,
                  observations=None, scores=None, next_state_keys=None, check_outcome: bool = True,
                  **knobs) -> ArrayCredit:
    """Like :func:`score_arrays`, returning every per-row field and the metrics. ``check_outcome=False`` skips
    the default-``reward_source`` check (a trainer's own env rewards, as in :func:`compute`)."""
    values = validate_knobs(estimator, knobs)
    batch, order = batch_from_arrays(group_ids=group_ids, traj_ids=traj_ids, step_index=step_index,
                                     state_keys=state_keys, rewards=rewards, success=success, valid=valid,
                                     observations=observations, scores=scores, next_state_keys=next_state_keys)
    credit = (run_checked(estimator, batch, values) if check_outcome
              else get_kernel(estimator)(batch, values.resolved()))
    back = np.empty_like(order)
    back[order] = np.arange(order.size)
    pick = (lambda col: None if col is None else np.asarray(col, dtype=np.float64)[back])
    return ArrayCredit(pick(credit.advantage), pick(credit.step_reward), pick(credit.process_reward),
                       credit.metrics)


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
    success node, or a private dead end for a failure). Returns float64 advantages aligned with the input rows.
    """
    return credit_arrays(estimator, group_ids=group_ids, traj_ids=traj_ids, step_index=step_index,
                         state_keys=state_keys, rewards=rewards, success=success, valid=valid,
                         observations=observations, scores=scores, next_state_keys=next_state_keys,
                         **knobs).advantage


# --------------------------------------------------------------------------------------------------
# copies
# --------------------------------------------------------------------------------------------------


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
    """``Trajectory`` objects for JSONL dicts already validated into ``batch`` (as ``Trajectory.from_dict``
    builds them), made column by column."""
    rows = batch.source
    get = (lambda name, default=None: [r.get(name, default) for r in rows])
    columns = {
        "state": batch.state, "observation": batch.observation, "action": batch.action,
        "response": [r.get("response") or "" for r in rows], "valid": batch.valid.tolist(),
        "reward": batch.reward.tolist(), "done": get("done", False), "next_state": batch.next_state,
        "executed": get("executed"), "info": [r["info"] if "info" in r else {} for r in rows],
    }
    steps = list(map(Step, *(columns[name] if name in columns else get(name) for name in _STEP_FIELDS)))
    out = []
    start = 0
    for record, n, group, final in zip(records, batch.lengths.tolist(), batch.group_ids, batch.final_state):
        out.append(Trajectory(task_id=record["task_id"], steps=steps[start:start + n], group_id=group,
                              traj_id=record.get("traj_id") or "", final_state=final,
                              success=record.get("success") is True, score=float(record.get("score") or 0.0),
                              meta=record.get("meta") or {}))
        start += n
    return out


__all__ = ["ArrayCredit", "compute", "copy_step", "copy_trajectory", "credit_arrays", "run_checked", "score",
           "score_arrays", "score_records", "trajectories_from_batch"]
