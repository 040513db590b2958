"""Credit assignment: estimators that turn a batch of trajectories into per-step advantages.

An *estimator* is a function ``fn(trajectories: list[Trajectory], **knobs) -> dict`` that sets
``step.advantage`` (and, where it has them, ``step.process_reward`` / ``step.step_reward``) on every step
of every trajectory, grouping by ``group_id``, and returns a dict of metrics to log. The math lives in
pure NumPy functions in the method modules (``grpo.py``, ``rloo.py``, ...); the adapters here wire
them to trajectories. The trainer uses :func:`compute`; tools use :func:`score`.
"""

from __future__ import annotations

import copy
import inspect
from typing import Any, Callable, Iterable

import numpy as np

from creditflow.credit.grpo import grpo_advantages
from creditflow.credit.rloo import rloo_advantages
from creditflow.errors import UserError
from creditflow.rollout.trajectory import Trajectory, group_by

Estimator = Callable[..., dict]
_ESTIMATORS: dict[str, Estimator] = {}

RETURN_SOURCES = ("return", "score", "success")


class CreditError(UserError):
    """Bad estimator name or knob."""


def register_estimator(name: str) -> Callable[[Estimator], Estimator]:
    def deco(fn: Estimator) -> Estimator:
        _ESTIMATORS[name] = fn
        return fn

    return deco


def estimator_names() -> list[str]:
    return sorted(_ESTIMATORS)


def get_estimator(name: str) -> Estimator:
    if name not in _ESTIMATORS:
        raise CreditError(f"unknown estimator {name!r}; available: {', '.join(estimator_names())}")
    return _ESTIMATORS[name]


def estimator_knobs(name: str) -> dict[str, Any]:
    """Keyword knobs an estimator takes and their defaults."""
    sig = inspect.signature(get_estimator(name))
    return {p.name: p.default for p in sig.parameters.values() if p.kind == p.KEYWORD_ONLY}


def check_knobs(name: str, knobs: dict) -> None:
    """Raise a one-line :class:`CreditError` for an unknown estimator or knob name."""
    allowed = estimator_knobs(name)
    unknown = sorted(set(knobs) - set(allowed))
    if unknown:
        raise CreditError(
            f"estimator {name!r} has no knob(s) {', '.join(unknown)}; knobs: {', '.join(allowed) or 'none'}"
        )


def compute(name: str, trajectories: list[Trajectory], **knobs) -> dict:
    """Run estimator ``name`` in place on ``trajectories``; returns its metrics."""
    check_knobs(name, knobs)
    return get_estimator(name)(trajectories, **knobs)


def score(trajectories: Iterable[Trajectory | dict], estimator: str = "grpo", **knobs) -> list[Trajectory]:
    """Score copies of ``trajectories`` (``Trajectory`` objects or dicts in the JSONL schema)."""
    trajs = [
        copy.deepcopy(t) if isinstance(t, Trajectory) else Trajectory.from_dict(t, f"trajectory {i}")
        for i, t in enumerate(trajectories)
    ]
    compute(estimator, trajs, **knobs)
    return trajs


def trajectory_return(traj: Trajectory, source: str = "return") -> float:
    """The scalar outcome R of a trajectory: summed step rewards, final score, or success (0/1)."""
    if source == "return":
        return traj.total_reward
    if source == "score":
        return float(traj.score)
    if source == "success":
        return 1.0 if traj.success else 0.0
    raise CreditError(f"reward_source must be one of {', '.join(RETURN_SOURCES)}, got {source!r}")


def _broadcast(group: list[Trajectory], advantages: np.ndarray) -> None:
    for traj, adv in zip(group, advantages):
        for step in traj.steps:
            step.advantage = float(adv)
            step.step_reward = step.reward


def _group_stats(groups: dict[str, list[Trajectory]], source: str) -> dict:
    returns = [[trajectory_return(t, source) for t in g] for g in groups.values()]
    flat = [r for g in returns for r in g]
    degenerate = sum(1 for g in returns if len(g) > 1 and max(g) == min(g))
    return {
        "credit/groups": len(returns),
        "credit/degenerate_group_frac": degenerate / max(1, len(returns)),
        "credit/return_mean": float(np.mean(flat)) if flat else 0.0,
    }


@register_estimator("grpo")
def grpo(trajectories: list[Trajectory], *, reward_source: str = "return", eps: float = 1e-6,
         normalize_std: bool = True) -> dict:
    """GRPO (002 Eq. 4): every step gets its trajectory's group-normalised return."""
    groups = group_by(trajectories)
    for group in groups.values():
        returns = [trajectory_return(t, reward_source) for t in group]
        _broadcast(group, grpo_advantages(returns, eps=eps, normalize_std=normalize_std))
    return _group_stats(groups, reward_source)


@register_estimator("rloo")
def rloo(trajectories: list[Trajectory], *, reward_source: str = "return") -> dict:
    """RLOO: every step gets its trajectory's leave-one-out advantage."""
    groups = group_by(trajectories)
    for group in groups.values():
        returns = [trajectory_return(t, reward_source) for t in group]
        _broadcast(group, rloo_advantages(returns))
    return _group_stats(groups, reward_source)


__all__ = [
    "CreditError",
    "check_knobs",
    "RETURN_SOURCES",
    "compute",
    "estimator_knobs",
    "estimator_names",
    "get_estimator",
    "grpo_advantages",
    "register_estimator",
    "rloo_advantages",
    "score",
    "trajectory_return",
]


# registered on import (they import the registry above, so they come last)
from creditflow.credit import gigpo as _gigpo  # noqa: E402,F401
from creditflow.credit import rewardflow as _rewardflow  # noqa: E402,F401
