"""Trajectory-level outcomes shared by the estimators: the scalar return R of a trajectory, the group
helpers of the trajectory-level estimators (GRPO, RLOO), and the check that a default ``reward_source``
does not contradict the outcome the data records.
"""

from __future__ import annotations

from typing import Callable, Literal, get_args

import numpy as np

from creditflow.credit.batch import StepBatch
from creditflow.credit.registry import Credit, CreditError
from creditflow.rollout.trajectory import Trajectory

ReturnSource = Literal["return", "score", "success"]
RETURN_SOURCES: tuple[str, ...] = get_args(ReturnSource)


def trajectory_return(traj: Trajectory, source: str = "return") -> float:
    """The scalar outcome R of a trajectory: summed step rewards, final score, or success (0/1)."""
    if source == "return":
        return traj.total_reward
    if source == "score":
        return float(traj.score)
    if source == "success":
        return 1.0 if traj.success else 0.0
    raise CreditError(f"reward_source must be one of {', '.join(RETURN_SOURCES)}, got {source!r}")


def batch_returns(batch: StepBatch, source: str = "return") -> np.ndarray:
    """(T,) R of every trajectory of ``batch`` (the values of :func:`trajectory_return`)."""
    if source == "return":
        return batch.total_rewards()
    if source == "score":
        return batch.score.astype(np.float64)
    if source == "success":
        return batch.success.astype(np.float64)
    raise CreditError(f"reward_source must be one of {', '.join(RETURN_SOURCES)}, got {source!r}")


def group_members(batch: StepBatch) -> list[np.ndarray]:
    """Trajectory indices of each group (groups in order of first appearance, members in batch order)."""
    order = np.argsort(batch.traj_group, kind="stable")
    counts = np.bincount(batch.traj_group, minlength=len(batch.group_names))
    return np.split(order, np.cumsum(counts)[:-1]) if batch.n_traj else []


def trajectory_credit(batch: StepBatch, source: str, per_group: Callable[[np.ndarray], np.ndarray]) -> Credit:
    """GRPO / RLOO: ``per_group(returns of one group) -> advantages``; every step gets its trajectory's
    advantage and ``step_reward`` = its env reward. Metrics: groups, the fraction of groups whose returns
    are all equal (no signal), the mean return."""
    returns = batch_returns(batch, source)
    members = group_members(batch)
    advantage = np.zeros(batch.n_traj)
    for idx in members:
        advantage[idx] = per_group(returns[idx])
    flat = returns[np.concatenate(members)] if members else returns
    degenerate = sum(1 for idx in members if idx.size > 1 and returns[idx].max() == returns[idx].min())
    metrics = {
        "credit/groups": len(members),
        "credit/degenerate_group_frac": degenerate / max(1, len(members)),
        "credit/return_mean": float(np.mean(flat)) if flat.size else 0.0,
    }
    return Credit(advantage=advantage[batch.step_traj], step_reward=batch.reward.copy(), process_reward=None,
                  metrics=metrics)


# --------------------------------------------------------------------------------------------------
# does the default reward source agree with the recorded outcome?
# --------------------------------------------------------------------------------------------------


def outcome_conflicts(groups, outcome, returns) -> np.ndarray:
    """Group ids in which a trajectory with a higher ``outcome`` has a ``returns`` no higher than one
    with a lower outcome (the return ranks them the other way round, or not at all)."""
    groups, outcome, returns = (np.asarray(a) for a in (groups, outcome, returns))
    if groups.size == 0:
        return groups[:0]
    order = np.lexsort((outcome, groups))
    g, o, r = groups[order], outcome[order], returns[order]
    new_level = np.r_[True, (g[1:] != g[:-1]) | (o[1:] != o[:-1])]
    starts = np.flatnonzero(new_level)
    level_min = np.minimum.reduceat(r, starts)
    level_max = np.maximum.reduceat(r, starts)
    level_group = g[starts]
    first_level = np.r_[True, level_group[1:] != level_group[:-1]]
    position = np.arange(starts.size) - np.maximum.accumulate(np.where(first_level, np.arange(starts.size), 0))
    lower_max = np.full(starts.size, -np.inf)  # highest return among the group's lower outcome levels
    for p in range(1, int(position.max()) + 1):
        at = np.flatnonzero(position == p)
        lower_max[at] = np.maximum(lower_max[at - 1], level_max[at - 1])
    return np.unique(level_group[level_min <= lower_max])


def check_outcome_source(batch: StepBatch, source: str) -> None:
    """Refuse a *default* ``reward_source`` that contradicts the recorded outcome (success, or the score
    where nothing succeeded): one line naming the knob. Only ``return`` can disagree with the outcome."""
    if source != "return" or batch.n_traj == 0:
        return
    by_success = bool(batch.success.any())
    outcome = batch.success.astype(np.float64) if by_success else batch.score
    bad = outcome_conflicts(batch.traj_group, outcome, batch.total_rewards())
    if bad.size:
        what = "a successful trajectory at or below a failed one" if by_success else \
            "a higher-scored trajectory at or below a lower-scored one"
        raise CreditError(
            f"the default reward_source=return (summed step rewards) ranks {what} in {bad.size} of "
            f"{len(batch.group_names)} groups (first: {batch.group_names[int(bad[0])]!r}); pass "
            f"reward_source={'success' if by_success else 'score'} to use the recorded outcome, or "
            "reward_source=return to keep the step rewards")


__all__ = ["RETURN_SOURCES", "ReturnSource", "batch_returns", "check_outcome_source", "group_members",
           "outcome_conflicts", "trajectory_credit", "trajectory_return"]
