"""The one row type outside the kernels: :class:`Rows`, one row per step in any order, as a trainer's batch or a
rollout loop holds them.

:func:`~creditflow.credit.api.credit_arrays` takes it (``score_arrays`` builds it from its keywords); the audit
(``auditing/estimators.py``) and every trainer bridge (``integrations/``) build it. The kernels read a
:class:`~creditflow.credit.batch.StepBatch` (rows sorted, trajectories contiguous), which
:func:`~creditflow.credit.batch.batch_from_arrays` makes of a :class:`Rows` after checking every column.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np


@dataclass(frozen=True)
class Rows:
    """One row per step, rows in any order: ``group_ids`` (the rollouts compared with one another), ``traj_ids``
    and ``step_index`` place each row; ``state_keys`` the state s_t (any hashable), ``rewards`` the step's env
    reward, ``success`` its trajectory's outcome (the same on all its rows).

    Optional (None: absent): ``valid`` (False: an invalid action), ``observations`` (the text shown at the step),
    ``scores`` (per trajectory, on each of its rows), ``next_state_keys`` (s_{t+1}; None: the next row's state) and
    ``active`` (False: the row takes no part and gets 0; a trainer's padding).

    The columns are kept as given: :func:`~creditflow.credit.batch.batch_from_arrays` checks them, naming the
    column and the row. :meth:`filled` fills the defaults a trainer's batch leaves out.
    """

    group_ids: Sequence
    traj_ids: Sequence
    step_index: Any
    state_keys: Sequence
    rewards: Any
    success: Any
    valid: Any = None
    observations: Sequence | None = None
    scores: Any = None
    next_state_keys: Sequence | None = None
    active: Any = None

    @property
    def n(self) -> int:
        """Rows."""
        return len(self.group_ids)

    def columns(self) -> dict[str, Any]:
        """Every column by name, None for one that is absent."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}

    def select(self, index: Sequence[int]) -> Rows:
        """The rows at ``index``, in that order; every one of them active (``active`` is left out)."""
        picked = {name: _pick(column, list(index)) for name, column in self.columns().items() if name != "active"}
        return Rows(**picked)

    @classmethod
    def filled(cls, group_ids: Sequence, **given: Any) -> Rows:
        """Rows with the defaults a trainer's batch leaves out: ``step_index`` the row order within each
        trajectory, ``active`` every row, ``state_keys`` empty keys, the optional columns None; numbers and flags
        as arrays."""
        unknown = sorted(set(given) - set(FIELDS))
        if unknown:  # a bridge's typo would otherwise drop a column silently
            raise TypeError(f"Rows.filled() got unknown column(s) {', '.join(unknown)}; columns: {', '.join(FIELDS)}")
        n = len(group_ids)
        traj_ids = list(given.get("traj_ids") if given.get("traj_ids") is not None else [])
        steps = given.get("step_index")
        return cls(
            group_ids=list(group_ids),
            traj_ids=traj_ids,
            step_index=row_order(traj_ids) if steps is None else np.asarray(steps).astype(np.int64),
            state_keys=list(given["state_keys"]) if given.get("state_keys") is not None else [""] * n,
            rewards=np.asarray(given.get("rewards") if given.get("rewards") is not None else [], dtype=np.float64),
            success=np.asarray(given.get("success") if given.get("success") is not None else [], dtype=bool),
            valid=None if given.get("valid") is None else np.asarray(given["valid"]).astype(bool),
            observations=None if given.get("observations") is None else list(given["observations"]),
            scores=None if given.get("scores") is None else np.asarray(given["scores"], dtype=np.float64),
            next_state_keys=None if given.get("next_state_keys") is None else list(given["next_state_keys"]),
            active=np.ones(n, dtype=bool) if given.get("active") is None else np.asarray(given["active"]).astype(bool),
        )


FIELDS = tuple(f.name for f in dataclasses.fields(Rows) if f.name != "group_ids")
"""The columns :meth:`Rows.filled` takes besides ``group_ids``."""


def row_order(traj_ids) -> np.ndarray:
    """Position of each row among the rows of its trajectory, in row order."""
    count: dict = {}
    out = np.empty(len(traj_ids), dtype=np.int64)
    for row, traj in enumerate(traj_ids):
        out[row] = count.get(traj, 0)
        count[traj] = out[row] + 1
    return out


def _pick(column, rows: list[int]):
    """``column`` at ``rows`` (an array stays an array; None stays None)."""
    if column is None:
        return None
    if isinstance(column, np.ndarray):
        return column[rows]
    return [column[i] for i in rows]


__all__ = ["FIELDS", "Rows", "row_order"]
