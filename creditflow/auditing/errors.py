"""The audit's one-line user error."""

from __future__ import annotations

from creditflow.errors import UserError


class AuditError(UserError, ValueError):
    """Bad audit input: an env that cannot restore a state or offers no actions, M = 0, a policy that never
    acts, an unknown estimator or part. The CLI prints it as one line and exits 2."""
