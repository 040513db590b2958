"""InterCode-SQL reward on hand-computed cases (see creditflow/envs/sql/reward.py for the formula)."""

import math
import random

import pytest

from creditflow.envs.sql import intercode_reward, kendall_tau_b

A, B, C, D = (1, "a"), (2, "b"), (3, "c"), (4, "d")


@pytest.mark.parametrize(
    "agent, gold, expected",
    [
        ([A, B, C], [A, B, C], 1.0),  # identical: IoU 1, tau 1
        ([B, A, C], [A, B, C], 0.33),  # reordered: IoU 1, tau (2 concordant - 1 discordant)/3
        ([C, B, A], [A, B, C], -1.0),  # reversed: negative tau
        ([A, B], [A, B, C], 0.67),  # partial overlap: IoU 2/3, tau 1 -> round(0.667, 2)
        ([C, B, D], [A, B, C], -0.5),  # worked example of the docs: IoU 2/4, tau -1
        ([(1,), (1,), (2,)], [(1,), (2,)], 0.67),  # duplicates: inter 2, union 3, tau 1
        ([(1,), (1,)], [(1,)], 0.5),  # duplicates, one common row: tau undefined -> unscaled
        ([(1,), (2,), (3,)], [(1,)], 1 / 3),  # tau undefined -> IoU left unrounded (as InterCode)
        ([(7,), (7,)], [(7,), (7,)], 1.0),  # only ties: tau undefined, IoU 1
        ([], [], 1.0),  # both empty
        ([], [A], 0.0),  # agent empty
        ([A], [], 0.0),  # gold empty
        ([(1,)], [("1",)], 0.0),  # rows compared as strings: 1 != '1'
        ([[1, "a"], [2, "b"]], [A, B], 1.0),  # JSON lists count as tuples
        ("Error executing query: no such table: x", [A], 0.0),  # error observation
        (None, [A], 0.0),  # no result set
        (None, [], 0.0),  # no result set, even against an empty gold
    ],
)
def test_reward_hand_computed(agent, gold, expected):
    assert intercode_reward(agent, gold) == pytest.approx(expected, abs=1e-12)


def test_success_only_when_exact():
    assert intercode_reward([A, B], [A, B]) == 1.0
    assert intercode_reward([A, B, B], [A, B]) < 1.0


def test_kendall_tau_matches_definition():
    assert kendall_tau_b(["a", "b", "c"], ["a", "b", "c"]) == 1.0
    assert kendall_tau_b(["a", "b", "c"], ["c", "b", "a"]) == -1.0
    assert math.isnan(kendall_tau_b(["a"], ["a"]))
    assert math.isnan(kendall_tau_b(["a", "a"], ["a", "b"]))
    # ties: x = [1,1,2], y = [1,2,3]: n0=3, n1=1, n2=0, S = 2 -> 2/sqrt(2*3)
    assert kendall_tau_b([1, 1, 2], [1, 2, 3]) == pytest.approx(2 / math.sqrt(6))


def test_kendall_tau_agrees_with_scipy():
    stats = pytest.importorskip("scipy.stats")
    rng = random.Random(0)
    for _ in range(100):
        n = rng.randint(2, 25)
        x = [str(rng.randint(0, 4)) for _ in range(n)]
        y = [str(rng.randint(0, 4)) for _ in range(n)]
        ours, theirs = kendall_tau_b(x, y), stats.kendalltau(x, y).statistic
        assert (math.isnan(ours) and math.isnan(theirs)) or ours == pytest.approx(theirs, abs=1e-12)
