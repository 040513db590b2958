"""The credit audit: measure every registered estimator's credit against the true advantage A^π, and race
them with a tabular policy where no LM adds noise (issue 71; docs/audit.md).

Pure Python/NumPy (no torch): restorable states and lockstep episodes (:mod:`.sim`), behaviour policies and
the tabular PPO-clip step (:mod:`.policy`), bias apart from noise (:mod:`.bias`), the per-policy verdicts
(:mod:`.summary`), the arms from the estimator registry (:mod:`.estimators`),
coverage (:mod:`.coverage`), Monte-Carlo ground truth and accuracy (:mod:`.accuracy`, :mod:`.metrics`), the
learning race (:mod:`.race`), RRO's pairs (:mod:`.pairs`) and the driver (:mod:`.run`).
"""

from creditflow.auditing.errors import AuditError
from creditflow.auditing.policy import DetourExpert, EpsilonExpert, TabularSnapshot, Uniform
from creditflow.auditing.run import PARTS, POLICIES, AuditResult, AuditSettings, audit, summary_lines

__all__ = ["PARTS", "POLICIES", "AuditError", "AuditResult", "AuditSettings", "DetourExpert", "EpsilonExpert",
           "TabularSnapshot", "Uniform", "audit", "summary_lines"]
