"""Pure CRPS pieces on scripted numbers: k0 (Eq. 9), controller (Eq. 10-12), gate (Eq. 7), mastery,
eviction, mixture (Eq. 13). Every expected value below is computed by hand in the comments."""

import numpy as np
import pytest

from creditflow.curriculum import (BufferEntry, ExpReplay, SuccessBuffer, SuffixController, group_success_rate,
                                   insertion_gate, replay_mixture)


def entry(uid=0, T=10, k=4, ema=0.5, task=None):
    return BufferEntry(uid=uid, task_id=task or f"t/{uid}", env="e", seed=uid, instruction="", observations=["o"] * T,
                       actions=["a"] * T, acc=0.25, k=k, ema=ema)


@pytest.mark.parametrize("acc,T,kw,expected", [
    (0.0, 10, {}, 2),          # floor(0.2 * 10) = 2
    (0.125, 10, {}, 3),        # floor((0.2 + 0.8 * 0.125) * 10) = floor(3.0) = 3
    (0.5, 10, {}, 6),          # floor(0.6 * 10) = 6
    (1.0, 10, {}, 10),         # floor(1.0 * 10) = 10 = T
    (0.0, 2, {}, 1),           # floor(0.4) = 0 -> clipped up to k_min = 1
    (0.0, 10, {"k_min": 3}, 3),
    (1.0, 10, {"k_max": 5}, 5),
    (0.25, 7, {"beta_min": 0.5, "beta_max": 0.9}, 4),   # floor((0.5 + 0.4 * 0.25) * 7) = floor(4.2) = 4
])
def test_initial_k_eq9(acc, T, kw, expected):
    assert SuffixController(**kw).initial_k(acc, T) == expected


def test_initial_k_floor_is_robust_to_float_error():
    # 0.3 * 10 = 2.9999999999999996 in floating point; Eq. 9's floor must still give 3
    assert SuffixController(beta_min=0.3, beta_max=0.3).initial_k(0.0, 10) == 3


def test_start_index_eq8():
    assert [SuffixController.start_index(k, 10) for k in (1, 4, 10, 12)] == [9, 6, 0, 0]


def test_controller_follows_hand_computed_k_trajectory():
    # defaults: band [0.2, 0.8], lambda 0.9, Delta 2, T = 10, k0 = 4, rho_hat0 = 0.5 (band midpoint)
    ctl = SuffixController()
    e = entry(T=10, k=4, ema=ctl.ema_init())
    accs = [1.0, 1.0, 0.5, 0.0, 0.0, 0.25, 1.0]
    # Eq. 11: rho <- 0.1 rho + 0.9 acc
    emas = [0.95, 0.995, 0.5495, 0.05495, 0.005495, 0.2255495, 0.92255495]
    ks = [6, 8, 8, 6, 4, 4, 6]  # Eq. 12: >0.8 -> +2, <0.2 -> -2, else keep
    got_e, got_k = [], []
    for a in accs:
        assert ctl.record(e, a) is False
        got_e.append(e.ema)
        got_k.append(e.k)
    assert got_e == pytest.approx(emas)
    assert got_k == ks
    assert [ctl.start_of(e) for _ in (0,)] == [4]  # t0 = 10 - 6
    assert e.replays == 7 and e.replay_success_sum == pytest.approx(sum(accs))


def test_eq11_weights_the_newest_group_by_lambda():
    assert SuffixController(ema_lambda=0.9).update_ema(0.2, 1.0) == pytest.approx(0.1 * 0.2 + 0.9)
    assert SuffixController(ema_lambda=1.0).update_ema(0.2, 0.75) == pytest.approx(0.75)  # no smoothing
    assert SuffixController(ema_lambda=0.1).update_ema(0.2, 1.0) == pytest.approx(0.9 * 0.2 + 0.1)  # lags


def test_controller_clips_at_k_min_and_k_max():
    ctl = SuffixController(k_max=7)
    e = entry(T=10, k=2, ema=0.5)
    for _ in range(3):
        ctl.record(e, 0.0)
    assert e.k == 1  # 2 -> max(0, 1) = 1 -> stays 1
    for _ in range(6):
        ctl.record(e, 1.0)
    assert e.k == 7  # 1 -> 3 -> 5 -> 7 -> 7 (k_max; never T = 10)


def test_mastery_needs_full_horizon_and_patience():
    ctl = SuffixController()  # threshold 0.9, patience 2
    e = entry(T=6, k=4, ema=0.5)
    assert not ctl.record(e, 1.0)   # ema 0.95 > 0.9 but k = 4 < T: no streak; k -> 6
    assert e.k == 6 and e.mastery_streak == 0
    assert not ctl.record(e, 1.0)   # k = 6 = T, ema 0.995: streak 1
    assert e.mastery_streak == 1
    assert not ctl.record(e, 0.75)  # ema 0.0995 + 0.675 = 0.7745 <= 0.9: streak reset
    assert e.mastery_streak == 0
    assert not ctl.record(e, 1.0)   # ema 0.97745: streak 1
    assert ctl.record(e, 1.0)       # streak 2 -> mastered


def test_expreplay_pins_k_to_T_and_starts_at_zero():
    ctl = ExpReplay()
    e = entry(T=5, k=ctl.initial_k(0.1, 5))
    assert e.k == 5 and ctl.start_of(e) == 0
    assert not ctl.record(e, 0.0) and e.k == 5  # ema 0.05 + 0 = 0.05
    assert not ctl.record(e, 1.0)  # ema 0.005 + 0.9 = 0.905 > 0.9 at k = T: streak 1
    assert e.mastery_streak == 1
    assert ctl.record(e, 1.0)      # ema 0.9905: streak 2 -> mastered


@pytest.mark.parametrize("acc,succeeded,alpha,ok", [
    (0.25, True, 0.5, True), (0.5, True, 0.5, True), (0.75, True, 0.5, False),
    (0.25, False, 0.5, False), (1.0, True, 1.0, True),
])
def test_insertion_gate_eq7(acc, succeeded, alpha, ok):
    assert insertion_gate(acc, succeeded, alpha) is ok


def test_group_success_rate_eq6():
    assert group_success_rate([True, False, False, True]) == 0.5
    assert group_success_rate([]) == 0.0


def test_capacity_eviction_oldest_and_easiest():
    buf = SuccessBuffer(capacity=2, eviction="oldest")
    for uid in range(3):
        evicted = buf.add(entry(uid))
    assert evicted == 0 and list(buf.entries) == [1, 2] and buf.counts["evicted"] == 1

    buf = SuccessBuffer(capacity=3, eviction="easiest")
    a, b, c = entry(0, ema=0.95), entry(1, ema=0.3), entry(2, ema=0.99)
    a.replays = b.replays = 1  # c never replayed: its ema is only the initial value and does not count
    for e in (a, b, c):
        buf.add(e)
    assert buf.add(entry(3)) == 0  # highest EMA among replayed entries
    assert list(buf.entries) == [1, 2, 3]


def test_buffer_one_entry_per_task_bad_tasks_and_state_roundtrip():
    buf = SuccessBuffer(capacity=4)
    buf.add(entry(0, task="x"))
    assert not buf.accepts("x") and buf.accepts("y")
    buf.add(entry(1, task="y"))
    buf.mark_bad(1)
    assert len(buf) == 1 and not buf.accepts("y") and buf.counts["bad"] == 1
    buf.entries[0].snapshots = [{"p": (1, 2)}]
    clone = SuccessBuffer(capacity=4)
    clone.load_state_dict(buf.state_dict())
    assert clone.state_dict() == buf.state_dict()
    assert clone.entries[0] == buf.entries[0] and clone.entries[0] is not buf.entries[0]


def test_mixture_draws_eq13():
    rng = np.random.default_rng(0)
    picks = [p for _ in range(2000) for p in replay_mixture(rng, 8, 0.2, buffer_size=3)]
    share = np.mean(picks)
    assert abs(share - 0.2) < 4 * np.sqrt(0.2 * 0.8 / len(picks))
    assert not any(replay_mixture(rng, 8, 1.0, buffer_size=0))  # empty buffer: fresh groups only
