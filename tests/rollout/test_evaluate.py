"""Rollout metrics logged by training and evaluation."""

import pytest

from creditflow.rollout.evaluate import rollout_metrics
from creditflow.rollout.trajectory import Step, Trajectory


def test_rollout_metrics_count_invalid_and_no_op_steps():
    def step(state, next_state, valid=True):
        return Step(state=state, observation="", action="up", valid=valid, next_state=next_state)

    wall = Trajectory(task_id="t", steps=[step("a", "b"), step("b", "b"), step("b", "b"), step("b", "b", False)])
    won = Trajectory(task_id="t", steps=[step("a", "c"), step("c", "d")], success=True)
    m = rollout_metrics([wall, won], "eval")
    assert m["eval/noop_frac"] == pytest.approx(3 / 6)
    assert m["eval/invalid_frac"] == pytest.approx(1 / 6)
    assert m["eval/success_rate"] == 0.5 and m["eval/steps"] == 3.0
