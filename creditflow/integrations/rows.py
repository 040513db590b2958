"""One row per step, as the trainers that run creditflow's estimators hand them over (verl, SkyRL): the row
columns, the :class:`RowUid` that carries a row through a trainer that passes estimators only a group id,
and the per-row advantages. Framework-free (numpy); the bridges (:mod:`creditflow.integrations.verl`,
:mod:`creditflow.integrations.skyrl`) put the advantages on tokens.

Columns (the names :func:`creditflow.credit.credit_arrays` takes, plus ``active``): ``group_ids`` (the
rollouts compared with one another), ``traj_ids``, ``step_index``, ``state_keys``, ``next_state_keys``
(None: the next row's state), ``observations``, ``rewards``, ``success``, ``valid``, ``active`` (inactive
rows get advantage 0 and take no part), ``scores``.
"""

from __future__ import annotations

import contextlib
import contextvars
import weakref
from typing import Any, Iterator, Mapping, Sequence

import numpy as np

from creditflow.credit import credit_arrays
from creditflow.curriculum.diagnostics import group_diagnostics
from creditflow.errors import UserError

# trainer name -> creditflow estimator. grpo/rloo are the trainers' own names (verl dispatches its grpo
# before its registry; SkyRL's registry has grpo and rloo), hence the prefix.
ESTIMATORS = {"rewardflow": "rewardflow", "gigpo": "gigpo", "graphgpo": "graphgpo", "g2po": "g2po",
              "creditflow_grpo": "grpo", "creditflow_rloo": "rloo"}
FIELDS = ("traj_ids", "step_index", "state_keys", "next_state_keys", "observations", "rewards", "success", "valid",
          "active", "scores")


class LayoutError(UserError):
    """A batch that lacks a field of the row layout, or rows that do not describe trajectories."""


class RowUid(str):
    """A group id (equal to and hashing as the plain string, so a trainer groups by it as before) that carries
    its row's fields for creditflow's estimators (``fields``: traj_ids, step_index, state_keys, ...)."""

    fields: dict

    def __new__(cls, uid: str, fields: Mapping[str, Any] | None = None):
        obj = super().__new__(cls, uid)
        obj.fields = dict(fields or {})
        return obj

    def __reduce__(self):
        return (RowUid, (str(self), self.fields))


def row_order(traj_ids) -> np.ndarray:
    """Position of each row among the rows of its trajectory, in row order."""
    count: dict = {}
    out = np.empty(len(traj_ids), dtype=np.int64)
    for row, traj in enumerate(traj_ids):
        out[row] = count.get(traj, 0)
        count[traj] = out[row] + 1
    return out


def _as_list(values) -> list:
    return values.tolist() if isinstance(values, np.ndarray) else list(values)


def uids_from_columns(cols: Mapping[str, Any]) -> np.ndarray:
    """The :class:`RowUid` of every row of ``cols``: its group id carrying the row's other columns (a column
    that is None is left out)."""
    values = {k: _as_list(v) for k, v in cols.items() if k != "group_ids" and v is not None}
    return np.array([RowUid(g, {k: column[i] for k, column in values.items()}) for i, g in enumerate(cols["group_ids"])],
                    dtype=object)


def columns_from_rows(rows: Sequence[RowUid]) -> dict:
    """The row columns carried by :class:`RowUid` values (the reverse of :func:`uids_from_columns`)."""
    fields = [u.fields for u in rows]
    column = (lambda k: [f[k] for f in fields] if fields and k in fields[0] else None)
    cols = {k: column(k) for k in FIELDS}
    cols["group_ids"] = [str(u) for u in rows]
    cols["step_index"] = np.asarray(cols["step_index"] or [], dtype=np.int64)
    cols["rewards"] = np.asarray(cols["rewards"] or [], dtype=np.float64)
    cols["success"] = np.asarray(cols["success"] or [], dtype=bool)
    cols["active"] = np.asarray(cols["active"] or [True] * len(fields), dtype=bool)
    cols["traj_ids"] = cols["traj_ids"] or []
    cols["state_keys"] = cols["state_keys"] or [""] * len(fields)
    return cols


# --------------------------------------------------------------------------------------------------
# rows attached to a call
# --------------------------------------------------------------------------------------------------

_ATTACHED: contextvars.ContextVar = contextvars.ContextVar("creditflow_rows", default=None)


@contextlib.contextmanager
def attached(rows: np.ndarray) -> Iterator[np.ndarray]:
    """Within this block, a creditflow estimator that a trainer calls with plain group ids equal to ``rows``
    (an array of :class:`RowUid`, in the batch's row order) reads the rows from ``rows``: the route for
    trainers whose estimator call carries no per-row field (verl's v1 trainer, SkyRL)."""
    token = _ATTACHED.set(rows)
    try:
        yield rows
    finally:
        _ATTACHED.reset(token)


def rows_of(index: Sequence, estimator: str, hint: str) -> Sequence:
    """The :class:`RowUid` values behind the group ids ``index``: ``index`` itself, or the :func:`attached`
    rows it equals; else one :class:`LayoutError` saying what to do (``hint``)."""
    if all(isinstance(u, RowUid) for u in index):
        return index
    rows = _ATTACHED.get()
    if rows is not None and len(rows) == len(index) and all(str(r) == str(u) for r, u in zip(rows, index)):
        return rows
    raise LayoutError(f"{estimator!r} got only the group id of each row, and these carry no rows: {hint}")


# --------------------------------------------------------------------------------------------------
# advantages
# --------------------------------------------------------------------------------------------------

_LAST: dict = {"index": None, "metrics": {}}


def estimator_knobs(estimator: str, config: Any) -> dict:
    """creditflow knobs from ``config.creditflow`` (the trainer's algorithm section: a mapping, or a dataclass
    with a ``creditflow`` field); the estimators' own defaults otherwise (``ddof=1``, verl's and SkyRL's sample std,
    is every estimator's default)."""
    section = (config.get("creditflow", None) if callable(getattr(config, "get", None))
               else getattr(config, "creditflow", None))  # a mapping (verl, Hydra) or a dataclass (SkyRL 0.4)
    return dict(section or {})


def row_advantages(estimator: str, cols: dict, config: Any = None) -> tuple[np.ndarray, dict]:
    """Per-row advantages (0 for inactive rows; duplicated rows share their original's) and the metrics."""
    n = len(cols["group_ids"])
    active = np.asarray(cols["active"], dtype=bool) if cols.get("active") is not None else np.ones(n, bool)
    traj = np.asarray(cols["traj_ids"], dtype=object)
    steps = np.asarray(cols["step_index"], dtype=np.int64)
    keep = np.flatnonzero(active)
    if keep.size == 0:  # nothing to score (credit_arrays refuses an empty batch)
        return np.zeros(n, dtype=np.float64), {}
    # rows repeated to pad the batch (same trajectory and step): compute once, copy
    first_of, inverse = _first_occurrence(traj[keep], steps[keep])
    rows = keep[first_of].tolist()
    picked = {name: _pick(cols.get(name), rows) for name in _ARRAY_COLUMNS}
    picked["step_index"] = steps[rows]
    result = credit_arrays(ESTIMATORS[estimator], check_outcome=False, **picked, **estimator_knobs(estimator, config))
    advantage = np.zeros(n, dtype=np.float64)
    advantage[keep] = result.advantage[inverse]
    return advantage, result.metrics


def estimate(estimator: str, cols: dict, seen: Any, config: Any = None) -> np.ndarray:
    """:func:`row_advantages`, remembering its metrics for :func:`metrics` of the batch ``seen`` (the array
    the trainer passed: its metrics are reported only for that batch)."""
    advantage, found = row_advantages(estimator, cols, config)
    _LAST["index"] = weakref.ref(seen) if isinstance(seen, np.ndarray) else None
    _LAST["metrics"] = found
    return advantage


# the columns credit_arrays takes, by their names there
_ARRAY_COLUMNS = ("group_ids", "traj_ids", "state_keys", "rewards", "success", "valid", "observations", "scores",
                  "next_state_keys")


def _pick(column, rows: list[int]):
    """``column`` at ``rows`` (an array stays an array; None stays None)."""
    if column is None:
        return None
    if isinstance(column, np.ndarray):
        return column[rows]
    return [column[i] for i in rows]


def _first_occurrence(traj: np.ndarray, steps: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Indices of the first row of each distinct (trajectory, step), and each row's index into them."""
    seen: dict = {}
    inverse = np.fromiter((seen.setdefault((t, s), len(seen)) for t, s in zip(traj.tolist(), steps.tolist())),
                          dtype=np.int64, count=len(steps))
    first = np.zeros(len(seen), dtype=np.int64)
    first[inverse[::-1]] = np.arange(len(steps))[::-1]
    return first, inverse


# --------------------------------------------------------------------------------------------------
# metrics
# --------------------------------------------------------------------------------------------------


def row_metrics(rows: np.ndarray) -> dict:
    """:func:`metrics` of a batch given by its :class:`RowUid` array."""
    return metrics(columns_from_rows(rows), rows)


def metrics(cols: dict, seen: Any) -> dict:
    """For a trainer's metrics dict: the group diagnostics of CRPS Eq. 14 (``groups/all_zero_frac``,
    ``groups/all_one_frac``, ``groups/entropy``) over the active rows' trajectories, and the last creditflow
    estimator's metrics (RewardFlow's graph statistics ``credit/graph_nodes``, ...) when it ran on ``seen``."""
    outcome: dict = {}
    active = np.asarray(cols["active"], dtype=bool) if cols.get("active") is not None else None
    for row, (group, traj, won) in enumerate(zip(cols["group_ids"], cols["traj_ids"],
                                                 np.asarray(cols["success"]).tolist())):
        if active is None or active[row]:
            outcome.setdefault(group, {})[traj] = won
    out = group_diagnostics([list(trajs.values()) for trajs in outcome.values()])
    last = _LAST["index"]() if _LAST["index"] is not None else None
    if last is seen:
        out.update({k: float(v) for k, v in _LAST["metrics"].items()})
    return out
