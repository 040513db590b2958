import numpy as np
import pytest

from creditflow.credit import CreditError, compute, grpo_advantages, rloo_advantages, score
from creditflow.rollout.trajectory import Step, Trajectory


def test_grpo_hand_computed():
    # returns 1, 0, 0, 1: mean 0.5, sample std sqrt(4 * 0.25 / 3) = 1/sqrt(3) => +-sqrt(3)/2 (the default, ddof=1)
    np.testing.assert_allclose(grpo_advantages([1, 0, 0, 1], eps=0.0), np.array([1, -1, -1, 1]) * np.sqrt(3) / 2)
    # population std 0.5 => +-1 (ddof=0, CRPS Eq. 4)
    np.testing.assert_allclose(grpo_advantages([1, 0, 0, 1], eps=0.0, ddof=0), [1, -1, -1, 1])
    # 3, 0, 0: mean 1, sample std sqrt(6 / 2) = sqrt(3); population std sqrt(2)
    np.testing.assert_allclose(grpo_advantages([3, 0, 0], eps=0.0), np.array([2, -1, -1]) / np.sqrt(3))
    np.testing.assert_allclose(grpo_advantages([3, 0, 0], eps=0.0, ddof=0), np.array([2, -1, -1]) / np.sqrt(2))
    np.testing.assert_allclose(grpo_advantages([3, 0, 0], normalize_std=False), [2, -1, -1])


def test_grpo_zero_variance_group_gives_zero():
    np.testing.assert_allclose(grpo_advantages([1, 1, 1]), [0, 0, 0])
    np.testing.assert_allclose(grpo_advantages([0, 0]), [0, 0])


def test_rloo_hand_computed():
    # 4, 2, 0: baselines (2+0)/2=1, (4+0)/2=2, (4+2)/2=3
    np.testing.assert_allclose(rloo_advantages([4, 2, 0]), [3, 0, -3])
    np.testing.assert_allclose(rloo_advantages([5]), [0])


def traj(task, group, rewards, success):
    return Trajectory(task_id=task, group_id=group,
                      steps=[Step(state=f"s{i}", observation="", action="a", reward=r) for i, r in enumerate(rewards)],
                      success=success, score=float(success))


def test_estimator_groups_by_group_id_and_broadcasts_to_steps():
    trajs = [traj("t", "g1", [0, 1], True), traj("t", "g1", [0, 0, 0], False),
             traj("u", "g2", [5], True), traj("u", "g2", [5], True)]
    metrics = compute("grpo", trajs, reward_source="success", eps=0.0, ddof=0)  # population std 0.5: +-1
    assert [s.advantage for s in trajs[0].steps] == [1.0, 1.0]
    assert [s.advantage for s in trajs[1].steps] == [-1.0, -1.0, -1.0]
    assert trajs[2].steps[0].advantage == 0.0
    assert metrics["credit/groups"] == 2 and metrics["credit/degenerate_group_frac"] == 0.5
    compute("rloo", trajs, reward_source="return")
    assert trajs[0].steps[0].advantage == pytest.approx(1.0)  # 1 - 0


def test_score_on_dicts_returns_copies():
    data = [traj("t", "g", [1.0], True).to_dict(), traj("t", "g", [0.0], False).to_dict()]
    scored = score(data, estimator="rloo")
    assert scored[0].steps[0].advantage == 1.0 and scored[1].steps[0].advantage == -1.0
    assert "advantage" not in data[0]["steps"][0]


def test_unknown_estimator_and_knob():
    with pytest.raises(CreditError, match="unknown estimator"):
        compute("magic", [])
    with pytest.raises(CreditError, match="no knob"):
        compute("grpo", [], gamma=0.9)
    with pytest.raises(CreditError, match="reward_source"):
        compute("grpo", [traj("t", "g", [1], True)], reward_source="vibes")
