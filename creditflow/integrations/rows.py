"""What every trainer bridge shares: one row per step. The bridges (:mod:`creditflow.integrations.verl`,
:mod:`creditflow.integrations.verl_v1`, :mod:`creditflow.integrations.skyrl`, :mod:`creditflow.integrations.trl`)
each build a trainer's batch into :class:`Columns`, get the per-row advantages and the estimator's metrics from
:func:`advantages`, and put them on the tokens. Framework-free (numpy).

:data:`ESTIMATORS`: the name a trainer knows each registered estimator by (from the registry: an estimator
registered with :func:`creditflow.credit.register_estimator` is in every bridge with no edit here).

How the columns reach :func:`advantages`: one route, bent only where a trainer leaves no other way.

- The bridge overrides the trainer's advantage hook, builds the columns there, calls :func:`advantages` and
  puts the result on the tokens (TRL, SkyRL).
- verl's v1 trainer runs its own code (KL penalty, rollout correction) between the hook and its registered
  estimator: the hook runs verl's method with the rows :func:`attached`, the registered estimator reads them
  (:func:`call_of`, :func:`estimate_call`) and leaves its metrics on the :class:`Call` for the hook.
- verl's legacy trainer has no method to override (its ``fit`` calls a module-level ``compute_advantage``), so
  there the rows travel in the group id itself, as :class:`RowUid`
  (:func:`creditflow.integrations.verl.attach_rows`), and so do the estimator's metrics.
"""

from __future__ import annotations

import contextlib
import contextvars
import warnings
from dataclasses import dataclass, field
from typing import Any, Iterator, Mapping, Sequence, TypedDict

import numpy as np

from creditflow.credit import credit_arrays, estimator_names
from creditflow.curriculum.diagnostics import group_diagnostics
from creditflow.errors import UserError

# the trainers' own estimator names (verl 0.9's and SkyRL 0.4's): a creditflow estimator of one of these names
# takes the prefix creditflow_ there (verl dispatches its grpo before its registry, and names are unique)
TRAINERS_OWN = frozenset({"gae", "grpo", "rloo", "reinforce++", "reinforce_plus_plus", "reinforce_plus_plus_baseline",
                          "remax", "opo", "gpg", "grpo_passk", "grpo_vectorized", "rloo_vectorized", "gdpo",
                          "optimal_token_baseline", "tir_optimal_token_baseline"})
PREFIX = "creditflow_"


def trainer_name(estimator: str) -> str:
    """The name a trainer knows creditflow's ``estimator`` by: its own, or ``creditflow_<name>`` where the trainers
    have an estimator of that name."""
    return PREFIX + estimator if estimator in TRAINERS_OWN else estimator


class _TrainerNames(Mapping):
    """trainer name -> creditflow estimator, read from the registry at each use (so an estimator registered after
    this module is imported is there too)."""

    def _names(self) -> dict[str, str]:
        return {trainer_name(name): name for name in estimator_names()}

    def __getitem__(self, name: str) -> str:
        return self._names()[name]

    def __iter__(self):
        return iter(self._names())

    def __len__(self) -> int:
        return len(self._names())

    def __repr__(self) -> str:
        return repr(self._names())


ESTIMATORS: Mapping[str, str] = _TrainerNames()
"""trainer name -> creditflow estimator (``rewardflow`` -> ``rewardflow``, ``creditflow_grpo`` -> ``grpo``, ...)."""

FIELDS = ("traj_ids", "step_index", "state_keys", "next_state_keys", "observations", "rewards", "success", "valid",
          "active", "scores")


class Columns(TypedDict, total=False):
    """The row columns every bridge builds (one row per step; the names :func:`creditflow.credit.credit_arrays`
    takes, plus ``active``). Required: ``group_ids`` (the rollouts compared with one another), ``traj_ids``,
    ``step_index``, ``rewards``, ``success``. Optional (None: absent): ``state_keys``, ``next_state_keys`` (None: the
    next row's state), ``observations``, ``valid``, ``active`` (inactive rows get advantage 0 and take no part),
    ``scores``. :func:`columns` fills the defaults."""

    group_ids: Sequence
    traj_ids: Sequence
    step_index: np.ndarray
    state_keys: Sequence | None
    next_state_keys: Sequence | None
    observations: Sequence | None
    rewards: np.ndarray
    success: np.ndarray
    valid: np.ndarray | None
    active: np.ndarray | None
    scores: np.ndarray | None


def columns(group_ids: Sequence, **given: Any) -> Columns:
    """:class:`Columns` with the defaults filled in: ``step_index`` the row order within each trajectory, ``active``
    every row, ``state_keys`` empty keys, the optional columns None; numbers and flags as arrays."""
    unknown = sorted(set(given) - set(FIELDS))
    if unknown:  # a bridge's typo would otherwise drop a column silently
        raise TypeError(f"columns() got unknown column(s) {', '.join(unknown)}; columns: {', '.join(FIELDS)}")
    n = len(group_ids)
    cols: dict = {name: given.get(name) for name in FIELDS}
    cols["group_ids"] = list(group_ids)
    cols["traj_ids"] = list(given.get("traj_ids") if given.get("traj_ids") is not None else [])
    steps = given.get("step_index")
    cols["step_index"] = row_order(cols["traj_ids"]) if steps is None else np.asarray(steps).astype(np.int64)
    cols["rewards"] = np.asarray(given.get("rewards") if given.get("rewards") is not None else [], dtype=np.float64)
    cols["success"] = np.asarray(given.get("success") if given.get("success") is not None else [], dtype=bool)
    cols["active"] = (np.ones(n, dtype=bool) if given.get("active") is None
                      else np.asarray(given["active"]).astype(bool))
    cols["state_keys"] = list(given["state_keys"]) if given.get("state_keys") is not None else [""] * n
    for name in ("next_state_keys", "observations"):
        cols[name] = None if given.get(name) is None else list(given[name])
    cols["valid"] = None if given.get("valid") is None else np.asarray(given["valid"]).astype(bool)
    cols["scores"] = None if given.get("scores") is None else np.asarray(given["scores"], dtype=np.float64)
    return cols  # type: ignore[return-value]


class LayoutError(UserError):
    """A batch that lacks a field of the row layout, or rows that do not describe trajectories."""


class RowUid(str):
    """A group id (equal to and hashing as the plain string, so a trainer groups by it as before) that carries
    its row's fields for creditflow's estimators (``fields``: traj_ids, step_index, state_keys, ...): the route of
    verl's legacy trainer, which has no hook to override (module docstring). ``metrics``: those of the last
    estimate on its batch."""

    fields: dict
    metrics: dict = {}

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


def columns_from_rows(rows: Sequence[RowUid]) -> Columns:
    """The row columns carried by :class:`RowUid` values (the reverse of :func:`uids_from_columns`)."""
    fields = [u.fields for u in rows]
    column = (lambda k: [f[k] for f in fields] if fields and k in fields[0] else None)
    given = {k: column(k) for k in FIELDS}
    given["step_index"] = np.asarray(given["step_index"] or [], dtype=np.int64)  # carried: never re-derived
    return columns([str(u) for u in rows], **given)


# --------------------------------------------------------------------------------------------------
# columns attached to a call
# --------------------------------------------------------------------------------------------------


@dataclass
class Call:
    """One advantage call of a trainer: the rows it is about (``rows``: :class:`RowUid` values, one per row of the
    batch in its order) and, once a creditflow estimator ran on them, its ``metrics``."""

    rows: np.ndarray
    metrics: dict = field(default_factory=dict)


_ATTACHED: contextvars.ContextVar = contextvars.ContextVar("creditflow_rows", default=None)


@contextlib.contextmanager
def attached(rows: np.ndarray) -> Iterator[Call]:
    """Within this block, a creditflow estimator that a trainer calls with plain group ids equal to ``rows``
    (an array of :class:`RowUid`, in the batch's row order) reads the rows from here, and leaves its metrics
    on the :class:`Call` this yields: for a bridge whose hook runs the trainer's own advantage code, which
    passes the estimator no per-row field (verl's v1 trainer). A context variable, so that it holds for this
    call only (and per thread or task)."""
    call = Call(rows)
    token = _ATTACHED.set(call)
    try:
        yield call
    finally:
        _ATTACHED.reset(token)


def call_of(index: Sequence, estimator: str, hint: str) -> Call:
    """The :class:`Call` behind the group ids ``index``: the :func:`attached` one whose rows they equal, or, where
    ``index`` carries its rows (:class:`RowUid`, verl's legacy trainer), a call on ``index`` itself; else one
    :class:`LayoutError` saying what to do (``hint``)."""
    call = _ATTACHED.get()
    if call is not None and len(call.rows) == len(index) and all(str(r) == str(u) for r, u in zip(call.rows, index)):
        return call
    if all(isinstance(u, RowUid) for u in index):
        return Call(np.asarray(index, dtype=object) if not isinstance(index, np.ndarray) else index)
    raise LayoutError(f"{estimator!r} got only the group id of each row, and these carry no rows: {hint}")


def estimate_call(estimator: str, call: Call, config: Any = None) -> np.ndarray:
    """:func:`advantages` of the rows of ``call`` with the knobs of ``config``; its metrics are left on ``call``
    (and, for rows that carry themselves, on each :class:`RowUid`, where :func:`row_metrics` finds them)."""
    advantage, call.metrics = advantages(estimator, columns_from_rows(call.rows), estimator_knobs(estimator, config))
    if _ATTACHED.get() is not call:
        for row in call.rows:
            row.metrics = call.metrics
    return advantage


# --------------------------------------------------------------------------------------------------
# advantages
# --------------------------------------------------------------------------------------------------


def estimator_knobs(estimator: str, config: Any) -> dict:
    """creditflow knobs from ``config.creditflow`` (the trainer's algorithm section: a mapping, or a dataclass
    with a ``creditflow`` field); the estimators' own defaults otherwise (``ddof=1``, verl's, SkyRL's and TRL's
    sample std, is every estimator's default)."""
    section = (config.get("creditflow", None) if callable(getattr(config, "get", None))
               else getattr(config, "creditflow", None))  # a mapping (verl, Hydra) or a dataclass (SkyRL 0.4)
    return dict(section or {})


def advantages(estimator: str, cols: Columns, knobs: Mapping[str, Any] | None = None) -> tuple[np.ndarray, dict]:
    """Per-row advantages of creditflow's ``estimator`` (its registered name, or its trainer name in
    :data:`ESTIMATORS`) on the rows ``cols``, with ``knobs`` (the estimator's defaults for the others), and the
    estimator's metrics. Inactive rows get 0; rows repeated to pad a batch (same trajectory and step) share their
    original's advantage."""
    name = ESTIMATORS.get(estimator, estimator)
    n = len(cols["group_ids"])
    active = np.asarray(cols["active"], dtype=bool) if cols.get("active") is not None else np.ones(n, bool)
    traj = np.asarray(cols["traj_ids"], dtype=object)
    steps = np.asarray(cols["step_index"], dtype=np.int64)
    keep = np.flatnonzero(active)
    if keep.size == 0:  # nothing to score (credit_arrays refuses an empty batch)
        return np.zeros(n, dtype=np.float64), {}
    first_of, inverse = _first_occurrence(traj[keep], steps[keep])
    rows = keep[first_of].tolist()
    picked = {column: _pick(cols.get(column), rows) for column in _ARRAY_COLUMNS}
    picked["step_index"] = steps[rows]
    result = credit_arrays(name, check_outcome=False, **picked, **dict(knobs or {}))
    advantage = np.zeros(n, dtype=np.float64)
    advantage[keep] = result.advantage[inverse]
    return advantage, result.metrics


def row_advantages(estimator: str, cols: Columns, config: Any = None) -> tuple[np.ndarray, dict]:
    """Deprecated (one release): :func:`advantages` with the knobs of ``config`` (:func:`estimator_knobs`)."""
    warnings.warn("creditflow.integrations.rows.row_advantages is deprecated: use advantages(estimator, cols, "
                  "estimator_knobs(estimator, config))", DeprecationWarning, stacklevel=2)
    return advantages(estimator, cols, estimator_knobs(estimator, config))


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


def group_metrics(cols: Columns) -> dict:
    """The group diagnostics of CRPS Eq. 14 (``groups/all_zero_frac``, ``groups/all_one_frac``,
    ``groups/entropy``) over the active rows' trajectories, for a trainer's metrics dict."""
    outcome: dict = {}
    active = np.asarray(cols["active"], dtype=bool) if cols.get("active") is not None else None
    for row, (group, traj, won) in enumerate(zip(cols["group_ids"], cols["traj_ids"],
                                                 np.asarray(cols["success"]).tolist())):
        if active is None or active[row]:
            outcome.setdefault(group, {})[traj] = won
    return group_diagnostics([list(trajs.values()) for trajs in outcome.values()])


def call_metrics(call: Call) -> dict:
    """For a trainer's metrics dict: :func:`group_metrics` of the call's rows and the metrics of the creditflow
    estimator that ran on them (RewardFlow's graph statistics ``credit/graph_nodes``, ...)."""
    out = group_metrics(columns_from_rows(call.rows))
    out.update({k: float(v) for k, v in call.metrics.items()})
    return out


def row_metrics(rows: np.ndarray) -> dict:
    """:func:`call_metrics` of a batch given by its :class:`RowUid` array (with the metrics of the last estimate
    on these rows, where one ran)."""
    return call_metrics(Call(rows, dict(getattr(rows[0], "metrics", {})) if len(rows) else {}))
