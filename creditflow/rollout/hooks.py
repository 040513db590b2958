"""Extension points of the RL loop, owned by the rollout layer so that curricula (one floor up) can
implement them without importing the trainer."""

from __future__ import annotations

from dataclasses import dataclass, field

from creditflow.rollout.engine import RolloutResult, TaskSpec
from creditflow.rollout.trajectory import Trajectory


@dataclass(frozen=True)
class Review:
    """What :meth:`Hooks.after_rollout` decides about a step's rollout: metrics to log, and the groups
    (``group_id``) the trainer must not train on (a curriculum drops replay groups whose start state could
    not be restored)."""

    metrics: dict = field(default_factory=dict)
    drop: frozenset[str] = frozenset()

    def kept(self, trajectories: list[Trajectory]) -> list[Trajectory]:
        """``trajectories`` without those of the dropped groups (a new list; the given one is untouched)."""
        return [t for t in trajectories if t.group_id not in self.drop]


class Hooks:
    """Extension points (curriculum, extra logging). Default: fresh tasks only, nothing dropped.

    ``after_rollout`` sees every process's trajectories of the step (``rollout.trajectories``, without their
    token ids under several processes) and the groups whose start state could not be restored
    (``rollout.unrestored``); it returns its :class:`Review` and edits neither.
    """

    def make_specs(self, step: int, fresh: list[TaskSpec]) -> list[TaskSpec]:
        return fresh

    def after_rollout(self, step: int, specs: list[TaskSpec], rollout: RolloutResult) -> Review:
        return Review()

    def state_dict(self) -> dict:
        return {}

    def load_state_dict(self, state: dict) -> None:
        pass
