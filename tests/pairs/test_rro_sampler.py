"""Reward-rising and fixed-size samplers against a scripted reward oracle (hand-computed expectations)."""

import pytest

from creditflow.pairs.preferences import aggregate
from creditflow.pairs.rro import NO_CONTRAST, NO_RISING, fixed_size_sampler, rising_sampler


class Oracle:
    """Candidates c0, c1, ... with scripted rewards; records every propose/estimate call."""

    def __init__(self, rewards):
        self.rewards = list(rewards)
        self.proposed = 0
        self.propose_calls: list[int] = []
        self.estimate_calls: list[int] = []

    def propose(self, n):
        self.propose_calls.append(n)
        out = [f"c{self.proposed + i}" for i in range(n)]
        self.proposed += n
        return out

    def estimate(self, cands):
        self.estimate_calls.append(len(cands))
        return [self.rewards[int(c[1:])] for c in cands]


def test_rising_stops_at_first_candidate_reaching_previous_reward():
    o = Oracle([0.2, 0.4, 0.6, 0.9, 1.0])
    s = rising_sampler(o.propose, o.estimate, previous_reward=0.5, max_candidates=5)
    # 0.2 < 0.5, 0.4 < 0.5, 0.6 >= 0.5 -> stop after 3; c3 and c4 are never sampled
    assert s.samples == 3 and o.proposed == 3
    assert o.propose_calls == [1, 1, 1] and o.estimate_calls == [1, 1, 1]  # one at a time
    assert s.rising is True and s.keep
    assert (s.chosen_candidate, s.rejected_candidate) == ("c2", "c0")
    assert s.rewards == [0.2, 0.4, 0.6]


def test_rising_accepts_equal_reward_and_single_candidate_gives_no_pair():
    o = Oracle([0.5, 0.9])
    s = rising_sampler(o.propose, o.estimate, previous_reward=0.5)
    assert s.samples == 1 and s.rising is True  # 0.5 >= 0.5 (Alg. 1 line 20: >=)
    assert s.chosen == s.rejected == 0
    assert not s.keep and s.omitted == NO_CONTRAST


def test_rising_without_rising_candidate_omits_step_after_n_max():
    o = Oracle([0.1, 0.3, 0.2, 0.0, 0.5, 0.99])
    s = rising_sampler(o.propose, o.estimate, previous_reward=0.8, max_candidates=5)
    assert s.samples == 5 and o.proposed == 5  # N_max = 5, the 6th is never sampled
    assert s.rising is False and s.omitted == NO_RISING and not s.keep
    # the trajectory still continues with the best candidate
    assert (s.chosen_candidate, s.rejected_candidate) == ("c4", "c3")


def test_rising_respects_a_smaller_cap():
    o = Oracle([0.1, 0.2, 1.0])
    s = rising_sampler(o.propose, o.estimate, previous_reward=0.9, max_candidates=2)
    assert s.samples == 2 and o.proposed == 2 and s.omitted == NO_RISING


def test_ties_go_to_the_earliest_candidate():
    o = Oracle([0.2, 0.2, 0.7])
    s = rising_sampler(o.propose, o.estimate, previous_reward=0.5)
    assert (s.chosen, s.rejected) == (2, 0)
    o = Oracle([0.4, 0.9, 0.1, 0.9, 0.1])
    s = fixed_size_sampler(o.propose, o.estimate, num_candidates=5)
    assert (s.chosen, s.rejected) == (1, 2)


def test_fixed_size_always_samples_n_and_pairs_best_with_worst():
    o = Oracle([0.9, 0.1, 0.6])  # the first candidate would already "rise" for any r_{t-1} <= 0.9
    s = fixed_size_sampler(o.propose, o.estimate, num_candidates=3)
    assert s.samples == 3 and o.propose_calls == [3] and o.estimate_calls == [3]
    assert s.rising is None and s.keep
    assert (s.chosen_candidate, s.rejected_candidate) == ("c0", "c1")


def test_fixed_size_with_equal_rewards_gives_no_pair():
    o = Oracle([0.3, 0.3])
    s = fixed_size_sampler(o.propose, o.estimate, num_candidates=2)
    assert s.samples == 2 and not s.keep and s.omitted == NO_CONTRAST


def test_float_noise_in_mean_rewards_neither_makes_a_pair_nor_blocks_rising():
    # WebShop scores averaged over m rollouts: the same mean summed in another order
    noisy = sum([0.3, 0.8, 0.8, 0.9, 0.8]) / 5  # 0.72 in exact arithmetic, 0.7200000000000001 here
    assert noisy != 0.72
    o = Oracle([0.72, noisy])
    s = fixed_size_sampler(o.propose, o.estimate, num_candidates=2)
    assert not s.keep and s.omitted == NO_CONTRAST and (s.chosen, s.rejected) == (0, 0)
    lower = 0.72 - 1e-15  # r_t equal to r_{t-1} up to rounding: it rises (Alg. 1 line 20, >=)
    o = Oracle([lower])
    s = rising_sampler(o.propose, o.estimate, previous_reward=0.72)
    assert s.rising is True and s.samples == 1


def test_samples_per_step_is_candidates_over_steps():
    # three steps of an episode: 3 candidates, 1 candidate, 5 candidates (no rising)
    previous = 0.5
    step_samples = []
    for rewards in ([0.1, 0.2, 0.5], [0.7], [0.0, 0.1, 0.2, 0.3, 0.4]):
        o = Oracle(rewards)
        s = rising_sampler(o.propose, o.estimate, previous)
        step_samples.append(s.samples)
        previous = s.rewards[s.chosen]
    assert step_samples == [3, 1, 5]
    totals = aggregate([{"steps": 3, "samples": 9, "pairs": 1}, {"steps": 1, "samples": 1, "pairs": 0}])
    assert totals["samples_per_step"] == pytest.approx(10 / 4)
    assert totals["steps"] == 4 and totals["pairs"] == 1


def test_bad_sizes_are_rejected():
    o = Oracle([0.1])
    with pytest.raises(ValueError):
        rising_sampler(o.propose, o.estimate, 0.0, max_candidates=0)
    with pytest.raises(ValueError):
        fixed_size_sampler(o.propose, o.estimate, num_candidates=0)
