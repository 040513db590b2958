"""GiGPO (Feng et al. 2025) on a hand-computed group."""

import numpy as np
import pytest
from tests.credit.credit_testlib import field, traj

from creditflow.credit import compute
from creditflow.credit.gigpo import discounted_returns


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
