"""Credit assignment: estimators that turn a batch of trajectories into per-step advantages.

The registry (``registry.py``) maps each estimator name to a function ``fn(trajectories, knobs)`` and a
typed knob model; the method modules (``grpo``, ``rloo``, ``gigpo``, ``rewardflow``) register themselves
when imported here. The trainer uses :func:`compute`; tools use :func:`score`; :func:`validate_knobs`
checks a knob dict before any work. This module only re-exports.
"""

from __future__ import annotations

from creditflow.credit import gigpo, grpo, rewardflow, rloo  # noqa: F401  (importing registers the estimators)
from creditflow.credit.gigpo import GiGPOKnobs
from creditflow.credit.grpo import GRPOKnobs, grpo_advantages
from creditflow.credit.registry import (
    CreditError,
    Estimator,
    Knobs,
    compute,
    estimator_names,
    get_estimator,
    knob_model,
    register_estimator,
    score,
    validate_knobs,
)
from creditflow.credit.returns import RETURN_SOURCES, trajectory_return
from creditflow.credit.rewardflow import GraphKnobs, RewardFlowKnobs
from creditflow.credit.rloo import RLOOKnobs, rloo_advantages

__all__ = [
    "CreditError",
    "Estimator",
    "GRPOKnobs",
    "GiGPOKnobs",
    "GraphKnobs",
    "Knobs",
    "RETURN_SOURCES",
    "RLOOKnobs",
    "RewardFlowKnobs",
    "compute",
    "estimator_names",
    "get_estimator",
    "grpo_advantages",
    "knob_model",
    "register_estimator",
    "rloo_advantages",
    "score",
    "trajectory_return",
    "validate_knobs",
]
