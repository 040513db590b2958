import math

import pytest

from creditflow.curriculum import group_diagnostics, group_entropy


def test_group_entropy_eq14():
    assert group_entropy([0, 0, 0, 0]) == 0.0
    assert group_entropy([1, 1]) == 0.0
    assert group_entropy([1, 0]) == pytest.approx(1.0)
    h = -(0.25 * math.log2(0.25) + 0.75 * math.log2(0.75))  # 0.8112781...
    assert group_entropy([True, False, False, False]) == pytest.approx(h)
    assert group_entropy([]) == 0.0


def test_batch_diagnostics_on_hand_made_groups():
    groups = [[0, 0, 0, 0], [1, 1, 1, 1], [1, 0, 0, 0], [1, 1, 0, 0]]
    d = group_diagnostics(groups)
    assert d["groups/all_zero_frac"] == 0.25
    assert d["groups/all_one_frac"] == 0.25
    assert d["groups/entropy"] == pytest.approx((0.8112781244591328 + 1.0) / 4)  # H_batch
    assert group_diagnostics([]) == {"groups/all_zero_frac": 0.0, "groups/all_one_frac": 0.0, "groups/entropy": 0.0}
