"""benchmarks/stats.py on hand-computed cases."""

import pytest

from benchmarks import stats


def test_mean_sd_names_its_ddof():
    assert stats.mean_sd([1, 2, 3]) == (2.0, 1.0)  # sample sd: sqrt((1 + 0 + 1) / 2)
    mean, sd = stats.mean_sd([1, 2, 3], ddof=0)
    assert sd == pytest.approx((2 / 3) ** 0.5)
    assert stats.mean_sd([0.4]) == (0.4, None)  # one seed: no sample sd
    assert stats.mean_sd([]) == (None, None)


def test_t_interval_by_hand():
    # n = 3: mean 2, sd 1, t(0.975, 2) = 4.302653; half width 4.302653 / sqrt(3) = 2.484138
    lo, hi = stats.t_interval([1, 2, 3])
    assert (lo, hi) == (pytest.approx(-0.484138, abs=1e-6), pytest.approx(4.484138, abs=1e-6))
    # n = 5: mean 0.3, sd sqrt(0.1 / 4) = 0.158114, t(0.975, 4) = 2.776445; half 2.776445 * 0.158114 / sqrt(5)
    lo, hi = stats.t_interval([0.1, 0.2, 0.3, 0.4, 0.5])
    assert (lo, hi) == (pytest.approx(0.103676, abs=1e-6), pytest.approx(0.496324, abs=1e-6))
    assert stats.t_interval([0.3]) is None


def test_percentile_bootstrap_by_hand():
    # two seeds 0 and 1: resampled means are 0, 0.5 or 1 (p = 1/4, 1/2, 1/4), so the 2.5/97.5 percentiles are 0 and 1
    assert stats.bootstrap_interval([0.0, 1.0]) == [0.0, 1.0]
    assert stats.bootstrap_interval([0.4] * 5) == [0.4, 0.4]
    assert stats.bootstrap_interval([0.3]) is None
    est = stats.interval_estimates([0.1, 0.2, 0.3, 0.4, 0.9])
    assert est["iqm"] == pytest.approx(0.3)  # middle three of five: 0.2, 0.3, 0.4
    assert est["ci95"][0] < 0.38 < est["ci95"][1]


def test_paired_differences_keep_only_shared_seeds_and_need_the_t_interval_at_small_n():
    a = {0: 0.5, 1: 0.6, 2: 0.7}
    b = {0: 0.4, 1: 0.4, 2: 0.4, 3: 0.9}  # seed 3 has no partner
    p = stats.paired(a, b)
    assert p.seeds == [0, 1, 2] and p.diffs == pytest.approx([0.1, 0.2, 0.3]) and p.wins == 3 and p.losses == 0
    assert p.summary.mean == pytest.approx(0.2) and p.summary.sd == pytest.approx(0.1)
    assert p.summary.boot[0] > 0  # every resample's mean is at least 0.1
    # t: 0.2 ± 4.302653 * 0.1 / sqrt(3) = [-0.048414, 0.448414] holds zero, so 3 seeds do not separate them
    assert p.summary.t[0] == pytest.approx(-0.048414, abs=1e-6)
    assert p.separated == 0
    # five seeds: diffs 0.1, 0.2, 0.3, 0.2, 0.2: sd sqrt(0.02 / 4), t half width 2.776445 * 0.070711 / sqrt(5) = 0.087798
    five = stats.paired({s: d for s, d in enumerate([0.1, 0.2, 0.3, 0.2, 0.2])}, {s: 0.0 for s in range(5)})
    assert five.summary.t == [pytest.approx(0.112202, abs=1e-6), pytest.approx(0.287798, abs=1e-6)]
    assert five.separated == 1
    below = stats.paired({s: 0.0 for s in range(5)}, {s: d for s, d in enumerate([0.1, 0.2, 0.3, 0.2, 0.2])})
    assert below.separated == -1 and below.losses == 5


def test_ordering_verdict_rule():
    up = stats.paired({s: d for s, d in enumerate([0.1, 0.2, 0.3, 0.2, 0.2])}, {s: 0.0 for s in range(5)})
    down = stats.paired({s: 0.0 for s in range(5)}, {s: d for s, d in enumerate([0.1, 0.2, 0.3, 0.2, 0.2])})
    weak_up = stats.paired({0: 0.1, 1: 0.2, 2: 0.3}, {0: 0.0, 1: 0.0, 2: 0.0})  # right sign, not separated
    weak_down = stats.paired({0: 0.0, 1: 0.1}, {0: 0.1, 1: 0.0})  # mean 0
    one_seed = stats.paired({0: 0.5}, {0: 0.1})
    assert stats.ordering_verdict([up, up]) == "yes"
    assert stats.ordering_verdict([up, weak_up]) == "in means only"
    assert stats.ordering_verdict([up, weak_down]) == "no"
    assert stats.ordering_verdict([up, down]) == "reversed"
    assert stats.ordering_verdict([up, one_seed]) == "not tested"
    assert stats.ordering_verdict([]) == "not tested"
