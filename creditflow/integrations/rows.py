"""What every trainer bridge shares: one row per step. The bridges (:mod:`creditflow.integrations.verl`,
:mod:`creditflow.integrations.verl_v1`, :mod:`creditflow.integrations.skyrl`, :mod:`creditflow.integrations.trl`)
each build a trainer's batch into :class:`~creditflow.credit.Rows` (``Rows.filled``: credit's one row type, which
the audit builds too), get the per-row advantages and the estimator's metrics from :func:`advantages`, and put them
on the tokens. Framework-free (numpy).

:data:`ESTIMATORS`: the name a trainer knows each registered estimator by (from the registry: an estimator
registered with :func:`creditflow.credit.register_estimator` is in every bridge with no edit here).

How the rows reach :func:`advantages`: one route, bent only where a trainer leaves no other way.

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
from dataclasses import dataclass, field, replace
from typing import Any, Iterator, Mapping, Sequence

import numpy as np

from creditflow.credit import Rows, credit_arrays, estimator_names
from creditflow.credit.rows import FIELDS as _FIELDS
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


def columns(group_ids: Sequence, **given: Any) -> Rows:
    """Deprecated (one release): ``creditflow.credit.Rows.filled``, the one row type."""
    warnings.warn("creditflow.integrations.rows.columns is deprecated: use creditflow.credit.Rows.filled",
                  DeprecationWarning, stacklevel=2)
    return Rows.filled(group_ids, **given)


_RENAMED = {"Columns": ("creditflow.credit.Rows", Rows), "FIELDS": ("creditflow.credit.rows.FIELDS", _FIELDS)}


def __getattr__(name: str):
    if name in _RENAMED:  # one release: the bridges' own row type, now credit's
        new, value = _RENAMED[name]
        warnings.warn(f"creditflow.integrations.rows.{name} is deprecated: use {new}", DeprecationWarning,
                      stacklevel=2)
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


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


def _as_list(values) -> list:
    return values.tolist() if isinstance(values, np.ndarray) else list(values)


def uids_from_rows(rows: Rows) -> np.ndarray:
    """The :class:`RowUid` of every row of ``rows``: its group id carrying the row's other columns (a column
    that is None is left out)."""
    values = {k: _as_list(v) for k, v in rows.columns().items() if k != "group_ids" and v is not None}
    return np.array([RowUid(g, {k: column[i] for k, column in values.items()}) for i, g in enumerate(rows.group_ids)],
                    dtype=object)


def rows_from_uids(uids: Sequence[RowUid]) -> Rows:
    """The rows carried by :class:`RowUid` values (the reverse of :func:`uids_from_rows`)."""
    fields = [u.fields for u in uids]
    column = (lambda k: [f[k] for f in fields] if fields and k in fields[0] else None)
    given = {k: column(k) for k in _FIELDS}
    given["step_index"] = np.asarray(given["step_index"] or [], dtype=np.int64)  # carried: never re-derived
    return Rows.filled([str(u) for u in uids], **given)


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
    advantage, call.metrics = advantages(estimator, rows_from_uids(call.rows), estimator_knobs(estimator, config))
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


def advantages(estimator: str, rows: Rows, knobs: Mapping[str, Any] | None = None) -> tuple[np.ndarray, dict]:
    """Per-row advantages of creditflow's ``estimator`` (its registered name, or its trainer name in
    :data:`ESTIMATORS`) on ``rows``, with ``knobs`` (the estimator's defaults for the others), and the
    estimator's metrics. Inactive rows get 0; rows repeated to pad a batch (same trajectory and step) share their
    original's advantage."""
    name = ESTIMATORS.get(estimator, estimator)
    active = np.ones(rows.n, dtype=bool) if rows.active is None else np.asarray(rows.active, dtype=bool)
    keep = np.flatnonzero(active)
    traj = np.asarray(rows.traj_ids, dtype=object)[keep]
    steps = np.asarray(rows.step_index, dtype=np.int64)[keep]
    first_of, inverse = _first_occurrence(traj, steps)
    originals = np.zeros(rows.n, dtype=bool)
    originals[keep[first_of]] = True  # a padding copy takes no part: it gets its original's advantage below
    result = credit_arrays(name, replace(rows, active=originals), check_outcome=False, **dict(knobs or {}))
    advantage = np.zeros(rows.n, dtype=np.float64)
    advantage[keep] = result.advantage[keep[first_of]][inverse]
    return advantage, result.metrics


def row_advantages(estimator: str, rows: Rows, config: Any = None) -> tuple[np.ndarray, dict]:
    """Deprecated (one release): :func:`advantages` with the knobs of ``config`` (:func:`estimator_knobs`)."""
    warnings.warn("creditflow.integrations.rows.row_advantages is deprecated: use advantages(estimator, cols, "
                  "estimator_knobs(estimator, config))", DeprecationWarning, stacklevel=2)
    return advantages(estimator, rows, estimator_knobs(estimator, config))


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


def group_metrics(rows: Rows) -> dict:
    """The group diagnostics of CRPS Eq. 14 (``groups/all_zero_frac``, ``groups/all_one_frac``,
    ``groups/entropy``) over the active rows' trajectories, for a trainer's metrics dict."""
    outcome: dict = {}
    active = np.asarray(rows.active, dtype=bool) if rows.active is not None else None
    for row, (group, traj, won) in enumerate(zip(rows.group_ids, rows.traj_ids, np.asarray(rows.success).tolist())):
        if active is None or active[row]:
            outcome.setdefault(group, {})[traj] = won
    return group_diagnostics([list(trajs.values()) for trajs in outcome.values()])


def call_metrics(call: Call) -> dict:
    """For a trainer's metrics dict: :func:`group_metrics` of the call's rows and the metrics of the creditflow
    estimator that ran on them (RewardFlow's graph statistics ``credit/graph_nodes``, ...)."""
    out = group_metrics(rows_from_uids(call.rows))
    out.update({k: float(v) for k, v in call.metrics.items()})
    return out


def row_metrics(rows: np.ndarray) -> dict:
    """:func:`call_metrics` of a batch given by its :class:`RowUid` array (with the metrics of the last estimate
    on these rows, where one ran)."""
    return call_metrics(Call(rows, dict(getattr(rows[0], "metrics", {})) if len(rows) else {}))
