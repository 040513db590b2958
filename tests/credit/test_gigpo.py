"""GiGPO (Feng et al. 2025) on a hand-computed group."""

import numpy as np
import pytest
from tests.credit.credit_testlib import field, traj

from creditflow.credit import compute
from creditflow.credit.gigpo import discounted_returns, outcome_step_rewards


def group():
    return [
        traj(["A", "B", "C"], rewards=[0.0, 1.0], success=True),
        traj(["A", "D", "E"], rewards=[0.0, 0.0]),
        traj(["A", "B", "F"], rewards=[0.0, -1.0]),
    ]


def test_discounted_returns():
    r = discounted_returns([1.0, 2.0, 4.0, 1.0], [3, 1], gamma=0.5)
    assert r.tolist() == [1 + 0.5 * 2 + 0.25 * 4, 2 + 0.5 * 4, 4.0, 1.0]
    assert discounted_returns([], [0, 0]).size == 0


def test_gigpo_mean_norm():
    trajs = group()
    compute("gigpo", trajs, gamma=0.5, normalize="mean")
    # Eq. 5 returns: [0.5, 1], [0, 0], [-0.5, -1]
    assert field(trajs, "process_reward") == [[0.5, 1.0], [0.0, 0.0], [-0.5, -1.0]]
    assert field(trajs, "step_reward") == [[0.0, 1.0], [0.0, 0.0], [0.0, -1.0]]
    # Eq. 3 episode returns [1, 0, -1] (mean 0); anchor groups A: [0.5, 0, -0.5], B: [1, -1], D: singleton
    assert field(trajs, "advantage") == [[1 + 0.5, 1 + 1.0], [0 + 0.0, 0 + 0.0], [-1 - 0.5, -1 - 1.0]]


def test_gigpo_mean_std_and_weight():
    trajs = group()
    compute("gigpo", trajs, gamma=0.5, step_weight=0.5)
    eps = 1e-6
    a_e = np.array([1.0, 0.0, -1.0]) / (1.0 + eps)  # sample std of [1, 0, -1] is 1
    a_sa = np.array([0.5, 0.0, -0.5]) / (0.5 + eps)
    a_sb = np.array([1.0, -1.0]) / (np.sqrt(2.0) + eps)
    adv = field(trajs, "advantage")
    assert adv[0] == pytest.approx([a_e[0] + 0.5 * a_sa[0], a_e[0] + 0.5 * a_sb[0]])
    assert adv[1] == pytest.approx([a_e[1] + 0.5 * a_sa[1], a_e[1] + 0.0])
    assert adv[2] == pytest.approx([a_e[2] + 0.5 * a_sa[2], a_e[2] + 0.5 * a_sb[1]])


def test_gigpo_metrics_and_knobs():
    m = compute("gigpo", group())
    assert m["credit/anchor_groups"] == 3 and m["credit/singleton_state_frac"] == pytest.approx(1 / 6)
    assert m["credit/degenerate_group_frac"] == 0.0
    same = [traj(["A", "B"], rewards=[1.0], group="x"), traj(["A", "C"], rewards=[1.0], group="x"),
            traj(["A", "C"], rewards=[1.0], group="y"), traj(["A", "B"], rewards=[0.0], group="y")]
    assert compute("gigpo", same)["credit/degenerate_group_frac"] == 0.5
    with pytest.raises(Exception, match="normalize"):
        compute("gigpo", group(), normalize="std")


def test_outcome_step_rewards():
    assert outcome_step_rewards([1.0, 0.5], [2, 3]).tolist() == [0.0, 1.0, 0.0, 0.0, 0.5]
    assert outcome_step_rewards([1.0, 1.0], [0, 1]).tolist() == [1.0]  # an empty trajectory has no step


def test_gigpo_on_success_both_levels():
    """reward_source=success: Eq. 5's r_t are the outcome on the last step, so the env's shaped rewards
    (here +1 and -1 on the second step) reach neither level."""
    trajs = group()
    compute("gigpo", trajs, gamma=0.5, normalize="mean", reward_source="success")
    assert field(trajs, "step_reward") == [[0.0, 1.0], [0.0, 0.0], [0.0, 0.0]]
    assert field(trajs, "process_reward") == [[0.5, 1.0], [0.0, 0.0], [0.0, 0.0]]
    # Eq. 3: R = [1, 0, 0], mean 1/3; anchor A: [0.5, 0, 0] (mean 1/6); B: [1, 0] (mean 1/2); D: singleton
    assert field(trajs, "advantage") == [pytest.approx([2 / 3 + 1 / 3, 2 / 3 + 0.5]),
                                         pytest.approx([-1 / 3 - 1 / 6, -1 / 3]),
                                         pytest.approx([-1 / 3 - 1 / 6, -1 / 3 - 0.5])]
    failed = [traj(["A", "B", "C"], rewards=[1.0, -0.1]), traj(["A", "D", "E"], rewards=[-0.1, 1.0])]
    compute("gigpo", failed, reward_source="success")  # an all-fail group: no signal at either level
    assert field(failed, "advantage") == [[0.0, 0.0], [0.0, 0.0]]


def test_gigpo_step_reward_source_apart():
    """step_reward_source=return keeps the env rewards in Eq. 5 while Eq. 3 compares success."""
    trajs = group()
    compute("gigpo", trajs, gamma=0.5, normalize="mean", reward_source="success", step_reward_source="return")
    assert field(trajs, "process_reward") == [[0.5, 1.0], [0.0, 0.0], [-0.5, -1.0]]
    assert field(trajs, "advantage") == [pytest.approx([2 / 3 + 0.5, 2 / 3 + 1.0]), pytest.approx([-1 / 3, -1 / 3]),
                                         pytest.approx([-1 / 3 - 0.5, -1 / 3 - 1.0])]
