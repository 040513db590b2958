"""The columns every estimator reads: one row per step (:class:`StepBatch`), and the three ways in.

Estimators are kernels over a :class:`StepBatch` (``registry.py``), so every public path runs the same
code once its input is in columns:

- :func:`batch_from_trajectories` - ``Trajectory`` objects (the trainer, ``compute``, ``score``);
- :func:`batch_from_dicts` - JSONL-schema dicts (``creditflow credit``, ``score`` on dicts), checked
  column by column against the rules of ``Trajectory.from_dict``; where a column fails, the offending
  trajectory goes through ``Trajectory.from_dict`` for its one-line ``file:line: steps[i]: field`` error;
- :func:`batch_from_arrays` - :class:`~creditflow.credit.rows.Rows`, flat per-row columns in any row order
  (``credit_arrays``: the audit, the trainer bridges, ``score_arrays``); it also returns the permutation that
  puts the rows back.

Rows are laid trajectory after trajectory, steps in order. Rewards and scores must be finite: a NaN or an
infinity is a one-line error naming where it is (JSON's ``NaN``/``Infinity`` would otherwise make every
advantage of its group NaN, which is not valid JSON). Every way in checks its input's types and shapes
first: a value of the wrong kind (``success="False"``, a 2-D array, an unhashable state key) is a
:class:`BatchTypeError` (a ``TypeError``) or :class:`BatchError` (a ``ValueError``) naming the argument, the
row or trajectory, what it expects and what it got; nothing truthy is taken for ``True``.
"""

from __future__ import annotations

import itertools
import numbers
import operator
from collections import deque
from functools import cached_property
from typing import Any, Callable, Hashable, Sequence

import numpy as np

from creditflow.credit.rows import Rows
from creditflow.errors import UserError
from creditflow.rollout.trajectory import Step, Trajectory, TrajectoryFormatError

_REWARD, _VALID = operator.attrgetter("reward"), operator.attrgetter("valid")
_NONE = type(None)
_NUMBER = {int, float}  # bool is no number, as in Trajectory.from_dict


class BatchError(UserError, ValueError):
    """Input that does not describe trajectories (mismatched lengths, a trajectory in two groups, no rows)."""


class BatchTypeError(BatchError, TypeError):
    """An argument of the wrong type or shape (a string for a bool, a 2-D array, an unhashable key)."""


CREDIT_NAMES = ("process_reward", "step_reward", "advantage")  # what estimators write onto each step


def _lazy_column(name: str, doc: str) -> property:
    """A column of :class:`StepBatch`, loaded from the batch's source on first use where it was not given."""

    def get(self):
        if name not in self._columns:
            self._columns[name] = self._load(name)
        return self._columns[name]

    return property(get, doc=doc)


class StepBatch:
    """One row per step, trajectories contiguous and in order; ``(T,)`` columns are per trajectory.

    Per-step columns are given, or loaded from ``source`` on first use (``load(name)``): an estimator pays
    only for what it reads (GRPO on success touches no step).
    """

    state = _lazy_column("state", "(S,) state key s_t the action was taken in")
    next_state = _lazy_column("next_state", "(S,) s_{t+1} where recorded, else None")
    reward = _lazy_column("reward", "(S,) float64 env reward (with any invalid-action penalty)")
    valid = _lazy_column("valid", "(S,) bool: the action parsed and executed")
    observation = _lazy_column("observation", "(S,) text shown to the policy (\"\" when not recorded)")
    action = _lazy_column("action", "(S,) parsed action")
    final_state = _lazy_column("final_state", "(T,) state key after the last step (\"\" when not recorded)")
    final_observation = _lazy_column("final_observation", "(T,) observation after the last step (\"\" if none)")

    def __init__(self, *, group_ids: list[Hashable], success: np.ndarray, score: np.ndarray, lengths: np.ndarray,
                 source: list[Any] | None = None, load: Callable[[str], Any] | None = None,
                 where: Callable[[int], str] | None = None, **columns):
        self.group_ids = group_ids  # (T,) group of each trajectory (rollouts compared with one another)
        self.where = where or _trajectory_number  # names trajectory i in errors (e.g. "trajs.jsonl:12")
        self.success = success  # (T,) bool, the recorded outcome
        self.score = score  # (T,) float64, the final graded score
        self.lengths = lengths  # (T,) int64 steps per trajectory
        self.source = source  # (S,) the Step objects / step dicts the rows came from, if any
        self._load = load
        self._columns = columns

    @property
    def n_traj(self) -> int:
        return len(self.group_ids)

    @property
    def n_steps(self) -> int:
        return int(self.lengths.sum())

    @cached_property
    def step_traj(self) -> np.ndarray:
        """(S,) trajectory index of each row."""
        return np.repeat(np.arange(self.n_traj), self.lengths)

    @cached_property
    def traj_first(self) -> np.ndarray:
        """(T,) row of each trajectory's first step."""
        return np.cumsum(self.lengths) - self.lengths

    @cached_property
    def traj_group(self) -> np.ndarray:
        """(T,) group index of each trajectory; indices count groups in order of first appearance."""
        index: dict[Hashable, int] = {}
        return np.fromiter(map(lambda g: index.setdefault(g, len(index)), self.group_ids), dtype=np.int64,
                           count=self.n_traj)

    @cached_property
    def group_names(self) -> list[Hashable]:
        """Distinct group ids, in order of first appearance (``traj_group`` indexes this list)."""
        return list(dict.fromkeys(self.group_ids))

    def total_rewards(self) -> np.ndarray:
        """(T,) summed step rewards, added left to right like ``Trajectory.total_reward``."""
        rewards = self.reward.tolist()
        ends = (self.traj_first + self.lengths).tolist()
        return np.fromiter((float(sum(rewards[a:b])) for a, b in zip(self.traj_first.tolist(), ends)),
                           dtype=np.float64, count=self.n_traj)


def _trajectory_number(i: int) -> str:
    return f"trajectory {i}"


def write_step_fields(steps: Sequence[Any], **columns) -> None:
    """Set ``step.<name> = float`` for each column (arrays aligned with ``steps``), without a Python loop; a
    column given as None sets ``None`` (an estimator without that field clears an earlier one's value)."""
    for name, values in columns.items():
        new = itertools.repeat(None, len(steps)) if values is None else np.asarray(values, dtype=np.float64).tolist()
        deque(map(setattr, steps, itertools.repeat(name), new), maxlen=0)


def write_record_fields(records: Sequence[dict], **columns) -> None:
    """Set ``record[name] = float`` for each column on step dicts (new keys go last, existing ones stay put); a
    column given as None removes that key."""
    for name, values in columns.items():
        if values is None:
            deque(map(dict.pop, records, itertools.repeat(name), itertools.repeat(None)), maxlen=0)
        else:
            deque(map(dict.__setitem__, records, itertools.repeat(name),
                      np.asarray(values, dtype=np.float64).tolist()), maxlen=0)


# --------------------------------------------------------------------------------------------------
# Trajectory objects
# --------------------------------------------------------------------------------------------------


def batch_from_trajectories(trajectories: Sequence[Trajectory]) -> StepBatch:
    """Columns of ``trajectories`` (``source`` = their Step objects, for writing the results back); the
    per-step columns are read from the steps when an estimator first asks for them."""
    trajs = list(trajectories)
    where = _trajectory_number
    steps = check_trajectories(trajs, where)
    batch = StepBatch(
        group_ids=[t.group_id for t in trajs],
        success=np.fromiter(map(operator.attrgetter("success"), trajs), dtype=bool, count=len(trajs)),
        score=np.fromiter(map(operator.attrgetter("score"), trajs), dtype=np.float64, count=len(trajs)),
        lengths=np.fromiter((len(t.steps) for t in trajs), dtype=np.int64, count=len(trajs)),
        source=steps,
        load=lambda name: _trajectory_column(trajs, steps, name, batch, where),
        where=where,
    )
    _check_finite_scores(batch, where)
    return batch


_BOOLS = {bool, np.bool_}


def check_trajectories(trajs: list, where: Callable[[int], str] = _trajectory_number) -> list:
    """``Trajectory`` objects whose fields have the types ``Trajectory.from_dict`` gives them (a
    :class:`BatchTypeError` naming the first that does not, ``where(i)`` naming trajectory i); returns their
    steps, trajectory after trajectory."""
    _check_trajectories(trajs, where)
    steps = [s for t in trajs for s in t.steps]
    _check_step_types(trajs, steps, where)
    return steps


def _is_number_type(t: type) -> bool:
    return issubclass(t, numbers.Real) and not issubclass(t, (bool, np.bool_))


def _check_trajectories(trajs: list, where) -> None:
    """Trajectory objects whose outcome fields have the types ``Trajectory.from_dict`` gives them: a
    :class:`BatchTypeError` naming the first field that does not (``success="False"`` is no bool)."""
    bad = next((i for i, t in enumerate(trajs) if not isinstance(t, Trajectory)), None)
    if bad is not None:
        hint = " (score() takes JSONL-schema dicts)" if isinstance(trajs[bad], dict) else ""
        raise BatchTypeError(f"{where(bad)}: expected a creditflow Trajectory, got {_shown(trajs[bad])}{hint}")
    if not set(map(type, map(operator.attrgetter("steps"), trajs))) <= {list}:
        i = next(i for i, t in enumerate(trajs) if not isinstance(t.steps, list))
        raise BatchTypeError(f"{where(i)}: steps must be a list of creditflow Step objects, got {_shown(trajs[i].steps)}")
    if not set(map(type, map(operator.attrgetter("success"), trajs))) <= _BOOLS:
        i = next(i for i, t in enumerate(trajs) if type(t.success) not in _BOOLS)
        raise BatchTypeError(f"{where(i)}: success must be True or False, got {_shown(trajs[i].success)}")
    if not all(map(_is_number_type, set(map(type, map(operator.attrgetter("score"), trajs))))):
        i = next(i for i, t in enumerate(trajs) if not _is_number_type(type(t.score)))
        raise BatchTypeError(f"{where(i)}: score must be a number, got {_shown(trajs[i].score)}")


def _check_step_types(trajs: list, steps: list, where) -> None:
    """Every step a ``Step`` with a number for ``reward`` and a bool for ``valid`` (the checks run over type
    sets, in C)."""
    if not all(issubclass(t, Step) for t in set(map(type, steps))):
        i, j = next((i, j) for i, t in enumerate(trajs) for j, s in enumerate(t.steps) if not isinstance(s, Step))
        raise BatchTypeError(f"{where(i)}: steps[{j}] must be a creditflow Step, got {_shown(trajs[i].steps[j])}")
    for name, ok, expects in (("reward", _is_number_type, "a number"), ("valid", _BOOLS.__contains__, "True or False"),
                              ("next_state", lambda t: t.__hash__ is not None, "a state key (str) or None")):
        if all(map(ok, set(map(type, map(operator.attrgetter(name), steps))))):
            continue
        i, j = next((i, j) for i, t in enumerate(trajs) for j, s in enumerate(t.steps)
                    if not ok(type(getattr(s, name))))
        raise BatchTypeError(f"{where(i)}: steps[{j}]: {name} must be {expects}, got "
                             f"{_shown(getattr(trajs[i].steps[j], name))}")


def _shown(value: Any) -> str:
    """A value in an error message: its repr (cut to 60 characters) and its type."""
    text = repr(value)
    return f"{text[:57] + '...' if len(text) > 60 else text} ({type(value).__name__})"


def _trajectory_column(trajs: list[Trajectory], steps: list, name: str, batch: StepBatch, where) -> Any:
    if name == "final_state":
        return [t.final_state for t in trajs]
    if name == "final_observation":
        return [final_observation(t) for t in trajs]
    if name == "reward":
        reward = np.fromiter(map(_REWARD, steps), dtype=np.float64, count=len(steps))
        _check_finite_rewards(reward, batch, where)
        return reward
    if name == "valid":
        return np.fromiter(map(_VALID, steps), dtype=bool, count=len(steps))
    return list(map(operator.attrgetter(name), steps))


def final_observation(traj: Trajectory) -> str:
    """Observation after the last step, where the writer recorded one (else "")."""
    if traj.steps:
        text = traj.steps[-1].info.get("next_observation") if traj.steps[-1].info else None
        if isinstance(text, str) and text:
            return text
    text = traj.meta.get("final_observation") if traj.meta else None
    return text if isinstance(text, str) else ""


# --------------------------------------------------------------------------------------------------
# JSONL-schema dicts
# --------------------------------------------------------------------------------------------------


def batch_from_dicts(records: Sequence[Any], wheres: Sequence[str] | None = None) -> StepBatch:
    """Columns of JSONL-schema dicts, validated like ``Trajectory.from_dict`` (``wheres[i]`` names record
    i in errors, e.g. ``"trajs.jsonl:12"``). ``source`` = the step dicts, in row order."""
    records = list(records)
    where = (lambda i: wheres[i]) if wheres is not None else (lambda i: f"trajectory {i}")
    try:
        batch = _dict_columns(records)
    except (KeyError, TypeError, AttributeError, OverflowError, _Unchecked):
        batch = _checked_one_by_one(records, where)  # the one-line error, or the rare non-JSON type
    batch.where = where
    _check_finite(batch, where)
    return batch


class _Unchecked(Exception):
    """A value whose type the column checks do not cover: ``Trajectory.from_dict`` decides."""


def _dict_columns(records: list) -> StepBatch:
    if not _types_within(map(type, records), {dict}):
        raise _Unchecked
    task_ids = _column(records, "task_id", {str})
    steps_lists = _column(records, "steps", {list})
    group_raw = _column(records, "group_id", {str}, None)
    _column(records, "traj_id", {str}, "")
    meta = _column(records, "meta", {dict}, None)
    steps = [s for lst in steps_lists for s in lst]
    if not _types_within(map(type, steps), {dict}):
        raise _Unchecked
    _column(steps, "response", {str}, "")
    for key, allowed in (("info", {dict}), ("done", {bool}), ("truncated", {bool}),
                         ("executed", {str})):  # only checked, as from_dict does
        _column(steps, key, allowed, None)
    return StepBatch(
        group_ids=[g or t for g, t in zip(group_raw, task_ids)],
        success=np.array(_column(records, "success", {bool}, False), dtype=bool),
        score=np.array(_column(records, "score", _NUMBER, 0.0), dtype=np.float64),
        final_state=_column(records, "final_state", {str}, ""),
        final_observation=[_final_observation_of(lst, m) for lst, m in zip(steps_lists, meta)],
        lengths=np.fromiter(map(len, steps_lists), dtype=np.int64, count=len(records)),
        state=_column(steps, "state", {str}),
        next_state=_column(steps, "next_state", {str}, None),
        reward=np.array(_column(steps, "reward", _NUMBER, 0.0), dtype=np.float64),
        valid=np.array(_column(steps, "valid", {bool}, True), dtype=bool),
        observation=_column(steps, "observation", {str}, ""),
        action=_column(steps, "action", {str}),
        source=steps,
    )


_REQUIRED = object()


def _column(rows: list[dict], key: str, allowed: set, default: Any = _REQUIRED) -> list:
    """``row[key]`` of every row, its type within ``allowed``; optional keys (a ``default``) may be absent or
    None and take the default, as in ``Trajectory.from_dict``. Anything else raises :class:`_Unchecked`."""
    if default is _REQUIRED:
        values = list(map(operator.itemgetter(key), rows))  # KeyError: from_dict names the missing field
        types = set(map(type, values))
    else:
        values = list(map(dict.get, rows, itertools.repeat(key)))
        types = set(map(type, values))
        if _NONE in types:
            types.discard(_NONE)
            values = [default if v is None else v for v in values]
    if not types <= allowed:
        raise _Unchecked
    return values


def _types_within(types, allowed: set) -> bool:
    return set(types) <= allowed


def _final_observation_of(steps: list[dict], meta: dict | None) -> str:
    """``final_observation`` for a trajectory dict (see :func:`final_observation`)."""
    if steps:
        info = steps[-1].get("info")
        text = info.get("next_observation") if isinstance(info, dict) and info else None
        if isinstance(text, str) and text:
            return text
    text = meta.get("final_observation") if meta else None
    return text if isinstance(text, str) else ""


def _checked_one_by_one(records: list, where) -> StepBatch:
    """``Trajectory.from_dict`` on each record: raises the first record's one-line error; where every
    record is valid (types the column checks leave to it), the batch of the parsed trajectories."""
    trajs = [Trajectory.from_dict(r, where(i)) for i, r in enumerate(records)]
    batch = batch_from_trajectories(trajs)
    batch.source = [s for r in records for s in r["steps"]]
    return batch


def _check_finite(batch: StepBatch, where) -> None:
    """Rewards and scores must be finite numbers: one line naming the first offender."""
    _check_finite_rewards(batch.reward, batch, where)
    _check_finite_scores(batch, where)


def _check_finite_rewards(reward: np.ndarray, batch: StepBatch, where) -> None:
    bad = ~np.isfinite(reward)
    if bad.any():
        row = int(np.argmax(bad))
        traj = int(np.searchsorted(batch.traj_first, row, side="right") - 1)
        raise TrajectoryFormatError(
            f"{where(traj)}: steps[{row - int(batch.traj_first[traj])}]: field 'reward' must be a finite number, "
            f"got {reward[row]!r}")


def _check_finite_scores(batch: StepBatch, where) -> None:
    bad = ~np.isfinite(batch.score)
    if bad.any():
        traj = int(np.argmax(bad))
        raise TrajectoryFormatError(f"{where(traj)}: field 'score' must be a finite number, got {batch.score[traj]!r}")


# --------------------------------------------------------------------------------------------------
# flat per-row arrays
# --------------------------------------------------------------------------------------------------


def batch_from_arrays(rows: Rows) -> tuple[StepBatch, np.ndarray]:
    """Columns of :class:`~creditflow.credit.rows.Rows` (one row per step, in any order); returns ``(batch,
    order)`` where row ``k`` of the batch is input row ``order[k]``. ``rows.active`` is not read here
    (:func:`active_rows`).

    Trajectories are ordered by first appearance, their steps by ``step_index``. Every row of a
    trajectory must carry the same ``group_ids`` and ``success`` (and ``scores``, when given). The state
    after a step is ``next_state_keys`` where given and not None, else the next row's state; after a
    trajectory's last step, without one, a successful trajectory ends in the shared success node and a
    failed one in a private dead end (``states.py``).

    Every column is a list, tuple or 1-D array with one entry per row (at least one row): ``group_ids``,
    ``traj_ids``, ``state_keys`` and ``next_state_keys`` hashable values (``next_state_keys`` may hold None);
    ``step_index`` integers; ``rewards`` and ``scores`` finite numbers; ``success`` and ``valid`` booleans
    (True/False, or the numbers 0 and 1); ``observations`` strings or None. Anything else is one
    :class:`BatchTypeError` / :class:`BatchError` naming the column, the row and what it got.
    """
    columns = {name: column for name, column in rows.columns().items() if name != "active"}
    n = _common_length(columns)
    if n == 0:
        raise BatchError("no rows to score: every column is empty (give one entry per step)")
    traj_code, traj_names = _codes(rows.traj_ids, "traj_ids")
    steps_at = _integers(rows.step_index, "step_index")
    order = np.lexsort((steps_at, traj_code))
    sorted_traj = traj_code[order]
    sorted_steps = steps_at[order]
    if np.any((sorted_traj[1:] == sorted_traj[:-1]) & (sorted_steps[1:] == sorted_steps[:-1])):
        k = int(np.flatnonzero((sorted_traj[1:] == sorted_traj[:-1]) & (sorted_steps[1:] == sorted_steps[:-1]))[0])
        raise BatchError(f"trajectory {traj_names[sorted_traj[k]]!r} has two rows with step_index {sorted_steps[k]}")
    lengths = np.bincount(traj_code, minlength=len(traj_names)).astype(np.int64)
    first_rows = order[np.cumsum(lengths) - lengths]  # input row of each trajectory's first step

    group_code, group_names = _codes(rows.group_ids, "group_ids")
    won = _booleans(rows.success, "success")
    _same_within(group_code, order, sorted_traj, first_rows, traj_names, "group_ids")
    _same_within(won, order, sorted_traj, first_rows, traj_names, "success")
    score_col = np.zeros(len(traj_names)) if rows.scores is None else _numbers(rows.scores, "scores")
    if rows.scores is not None:
        _same_within(score_col, order, sorted_traj, first_rows, traj_names, "scores")
        score_col = score_col[first_rows]
    keys = _hashables(rows.state_keys, "state_keys")
    taken = order.tolist()
    # checked in this order, so that of several bad columns the same one is named first
    next_keys = None if rows.next_state_keys is None else _hashables(rows.next_state_keys, "next_state_keys", none=True)
    reward = _numbers(rows.rewards, "rewards")[order]
    valid = np.ones(n, dtype=bool) if rows.valid is None else _booleans(rows.valid, "valid")[order]
    texts = None if rows.observations is None else _texts(rows.observations, "observations")
    batch = StepBatch(
        group_ids=[group_names[g] for g in group_code[first_rows].tolist()],
        success=won[first_rows],
        score=score_col,
        final_state=[""] * len(traj_names),
        final_observation=[""] * len(traj_names),
        lengths=lengths,
        state=[keys[i] for i in taken],
        next_state=[None] * n if next_keys is None else [next_keys[i] for i in taken],
        reward=reward,
        valid=valid,
        observation=[""] * n if texts is None else [texts[i] or "" for i in taken],
        action=[""] * n,
        where=lambda i: f"trajectory {traj_names[i]!r}",
    )
    _check_finite(batch, batch.where)
    return batch, order


def active_rows(rows: Rows) -> np.ndarray | None:
    """Index of the rows that take part (``rows.active`` True, booleans as for ``valid``); None where every row
    does (``active`` not given)."""
    if rows.active is None:
        return None
    _common_length({"group_ids": rows.group_ids, "active": rows.active})
    return np.flatnonzero(_booleans(rows.active, "active"))


def _column_array(values, name: str) -> np.ndarray:
    """``values`` as a 1-D array (a :class:`BatchTypeError` for a 2-D array or a ragged list)."""
    try:
        arr = np.asarray(values)
    except ValueError:  # ragged nested lists
        raise BatchTypeError(f"{name} must hold one scalar per row; got nested sequences of different lengths") \
            from None
    if arr.ndim != 1:
        raise BatchTypeError(f"{name} must be one-dimensional (one entry per row), got an array of shape "
                             f"{tuple(arr.shape)}")
    return arr


def _first_bad(items, ok) -> int:
    return next(i for i, v in enumerate(items) if not ok(v))


def _integers(values, name: str) -> np.ndarray:
    """An integer array (object arrays of ints, as in a verl ``non_tensor_batch``, are converted)."""
    arr = _column_array(values, name)
    if arr.dtype == object:
        items = arr.tolist()
        if all(isinstance(v, numbers.Integral) and not isinstance(v, (bool, np.bool_)) for v in items):
            return arr.astype(np.int64)
        i = _first_bad(items, lambda v: isinstance(v, numbers.Integral) and not isinstance(v, (bool, np.bool_)))
        raise BatchTypeError(f"{name} must be integers, one per row; row {i} is {_shown(items[i])}")
    if not np.issubdtype(arr.dtype, np.integer):
        raise BatchTypeError(f"{name} must be integers, one per row; got dtype {arr.dtype}")
    return arr


def _numbers(values, name: str) -> np.ndarray:
    """A float64 array of numbers (booleans, strings and None are refused, not converted)."""
    arr = _column_array(values, name)
    if arr.dtype.kind in "iuf":
        return arr.astype(np.float64, copy=False)
    items = arr.tolist()
    if arr.dtype == object and all(map(_is_number_type, set(map(type, items)))):
        try:
            return np.asarray(items, dtype=np.float64)
        except OverflowError:
            i = _first_bad(items, lambda v: abs(v) <= np.finfo(np.float64).max)
            raise BatchError(f"{name} must be finite numbers; row {i} is an integer too large for a float") \
                from None
    i = _first_bad(items, lambda v: _is_number_type(type(v)))
    raise BatchTypeError(f"{name} must be numbers, one per row; row {i} is {_shown(items[i])}")


def _booleans(values, name: str) -> np.ndarray:
    """A bool array from booleans, or from numbers that are exactly 0 or 1; NaN, strings and other values are
    refused (nothing truthy counts as True)."""
    arr = _column_array(values, name)
    if arr.dtype == bool:
        return arr
    items = arr.tolist()

    def ok(v) -> bool:
        return isinstance(v, (bool, np.bool_)) or (_is_number_type(type(v)) and v in (0, 1))

    if arr.dtype.kind in "iuf" and np.isin(arr, (0, 1)).all():
        return arr.astype(bool)
    if arr.dtype == object and all(map(ok, items)):
        return np.asarray([bool(v) for v in items], dtype=bool)
    i = _first_bad(items, ok)
    raise BatchTypeError(f"{name} must be booleans (True/False, or 0/1), one per row; row {i} is {_shown(items[i])}")


def _hashables(values, name: str, none: bool = False) -> list:
    """The column as a list of hashable values (``none``: None allowed)."""
    items = _as_list(values)
    try:
        deque(map(hash, items), maxlen=0)
    except TypeError:
        i = _first_bad(items, _hashable)
        raise BatchTypeError(f"{name} must be hashable values (str, int, tuple, ...), one per row; row {i} is "
                             f"{_shown(items[i])}") from None
    if not none and None in items:
        raise BatchTypeError(f"{name} must not hold None; row {items.index(None)} is None")
    return items


def _hashable(value) -> bool:
    try:
        hash(value)
    except TypeError:
        return False
    return True


def _texts(values, name: str) -> list:
    """The column as a list of strings or None."""
    items = _as_list(values)
    if not set(map(type, items)) <= {str, _NONE}:
        i = _first_bad(items, lambda v: v is None or isinstance(v, str))
        raise BatchTypeError(f"{name} must be strings (or None), one per row; row {i} is {_shown(items[i])}")
    return items


_SEQUENCE_HINT = "a list, tuple or 1-D array with one entry per row"


def _common_length(columns: dict) -> int:
    lengths = {}
    for name, col in columns.items():
        if col is None:
            continue
        if isinstance(col, (str, bytes, dict, set, frozenset)) or not hasattr(col, "__len__"):
            raise BatchTypeError(f"{name} must be {_SEQUENCE_HINT}, got {_shown(col)}")
        if getattr(col, "ndim", 1) != 1:
            raise BatchTypeError(f"{name} must be one-dimensional (one entry per row), got an array of shape "
                                 f"{tuple(col.shape)}")
        lengths[name] = len(col)
    n = lengths["group_ids"]
    bad = [f"{name} ({k})" for name, k in lengths.items() if k != n]
    if bad:
        raise BatchError(f"every column needs one entry per row: group_ids has {n}, but {', '.join(bad)}")
    return n


def _as_list(values) -> list:
    return values.tolist() if isinstance(values, np.ndarray) else list(values)


def _codes(values, name: str) -> tuple[np.ndarray, list]:
    """Integer codes of ``values`` in order of first appearance, and the distinct values."""
    index: dict = {}
    items = _hashables(values, name)
    codes = np.fromiter(map(lambda v: index.setdefault(v, len(index)), items), dtype=np.int64, count=len(items))
    return codes, list(index)


def _same_within(values: np.ndarray, order, sorted_traj, first_rows, traj_names, name: str) -> None:
    """Every row of a trajectory carries the value of its first row."""
    per_row = np.asarray(values)[order]
    expected = np.asarray(values)[first_rows][sorted_traj]
    bad = per_row != expected
    if bad.any():
        t = traj_names[int(sorted_traj[int(np.argmax(bad))])]
        raise BatchError(f"trajectory {t!r} has rows with different {name}; a trajectory has one value")


__all__ = ["BatchError", "BatchTypeError", "CREDIT_NAMES", "StepBatch", "active_rows", "batch_from_arrays",
           "batch_from_dicts", "batch_from_trajectories", "check_trajectories", "final_observation",
           "write_record_fields", "write_step_fields"]
