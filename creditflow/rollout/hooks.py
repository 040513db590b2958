"""Extension points of the RL loop, owned by the rollout layer so that curricula (one floor up) can
implement them without importing the trainer."""

from __future__ import annotations

from creditflow.rollout.engine import TaskSpec
from creditflow.rollout.trajectory import Trajectory


class Hooks:
    """Extension points (curriculum, extra logging). Default: fresh tasks only.

    ``after_rollout`` may remove trajectories from ``trajs`` in place (a curriculum drops replay groups
    whose start state could not be restored); the trainer trains on what is left.
    """

    def make_specs(self, step: int, fresh: list[TaskSpec]) -> list[TaskSpec]:
        return fresh

    def after_rollout(self, step: int, specs: list[TaskSpec], trajs: list[Trajectory]) -> dict:
        return {}

    def state_dict(self) -> dict:
        return {}

    def load_state_dict(self, state: dict) -> None:
        pass
