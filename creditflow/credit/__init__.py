"""Credit assignment: estimators that turn a batch of trajectories into per-step advantages.

The registry (``registry.py``) maps each estimator name to a kernel over the columns of a batch
(``batch.py``: one row per step) and a typed knob model; the method modules (``grpo``, ``rloo``,
``gigpo``, ``rewardflow``, ``graphgpo``, ``g2po``, ``gagpo``) register themselves when imported here. The
public paths (``api.py``) all build a batch and run the same kernel: the trainer uses :func:`compute`; tools
use :func:`score`; other frameworks :func:`score_arrays` (or :func:`credit_arrays` on :class:`Rows`, the one
row type of the audit and the trainer bridges); :func:`validate_knobs` checks a knob dict before any
work.
This module only re-exports.
"""

from __future__ import annotations

from creditflow.credit import g2po, gagpo, gigpo, graphgpo, grpo, rewardflow, rloo  # noqa: F401  (importing registers the estimators)
from creditflow.credit.api import (
    ArrayCredit,
    compute,
    credit_arrays,
    score,
    score_arrays,
    score_lines,
    score_records,
)
from creditflow.credit.batch import BatchError, StepBatch
from creditflow.credit.gigpo import GiGPOKnobs
from creditflow.credit.grpo import GRPOKnobs, grpo_advantages
from creditflow.credit.registry import (
    METRIC_RULES,
    Credit,
    CreditError,
    Estimator,
    Knobs,
    estimator_names,
    estimator_needs,
    get_estimator,
    get_kernel,
    knob_model,
    register_estimator,
    validate_knobs,
)
from creditflow.credit.returns import RETURN_SOURCES, trajectory_return
from creditflow.credit.rewardflow import GraphKnobs, RewardFlowKnobs
from creditflow.credit.rloo import RLOOKnobs, rloo_advantages
from creditflow.credit.rows import Rows

__all__ = [
    "ArrayCredit",
    "BatchError",
    "Credit",
    "CreditError",
    "Estimator",
    "GRPOKnobs",
    "GiGPOKnobs",
    "GraphKnobs",
    "Knobs",
    "METRIC_RULES",
    "RETURN_SOURCES",
    "RLOOKnobs",
    "RewardFlowKnobs",
    "Rows",
    "StepBatch",
    "compute",
    "credit_arrays",
    "estimator_names",
    "estimator_needs",
    "get_estimator",
    "get_kernel",
    "grpo_advantages",
    "knob_model",
    "register_estimator",
    "rloo_advantages",
    "score",
    "score_arrays",
    "score_lines",
    "score_records",
    "trajectory_return",
    "validate_knobs",
]
