"""GAGPO (arXiv 2605.13217): worked examples computed by hand from the method's definitions (docs/methods.md,
"GAGPO"). Only the paper's abstract and summaries could be read here and no official code exists to compare
with, so these hand-worked groups are the reference: a shared state, a cycle, an all-fail group, an invalid
self-loop, groups of one rollout and singleton state groups, and the worked graph of docs/methods.md.

Notation: G_t the return-to-go, V(s) the mean G_t over the group's visits of s, delta_t = r_t + gamma V(s_{t+1})
- V(s_t) (nothing bootstrapped after a rollout's last step), raw A_t = delta_t + gamma lam A_{t+1}, and the
advantage the raw A standardised over the task group's steps (sample std + 1e-6)."""

from __future__ import annotations

import numpy as np
import pytest

from tests.credit.credit_testlib import field, traj

from creditflow.cli import main
from creditflow.credit import CreditError, compute, estimator_names, estimator_needs, knob_model, score_arrays
from creditflow.rollout.trajectory import read_jsonl, write_jsonl


def near(x, rel=1e-6):
    return pytest.approx(x, rel=rel, abs=1e-9)


def z(raw, eps=1e-6):
    """The group-wise standardisation of stage 3 over one task group's steps."""
    raw = np.asarray(raw, dtype=np.float64)
    return (raw - raw.mean()) / (raw.std(ddof=1) + eps)


def flat(trajs, name):
    return [x for row in field(trajs, name) for x in row]


def shared_state():
    """tau1 = A -> B -> G (success), tau2 = A -> C -> B -> D (fail): the failed rollout passes through B, which
    tau1 continued to the goal."""
    return [traj(["A", "B", "G"], success=True), traj(["A", "C", "B", "D"])]


def test_registered_with_its_knobs_and_needs():
    assert "gagpo" in estimator_names()
    assert estimator_needs("gagpo") == {"state"}
    model = knob_model("gagpo")
    assert set(model.model_fields) >= {"gamma", "lam", "normalize", "norm_over", "alpha_traj", "reward_source",
                                       "eps", "ddof", "state_fn"}
    assert (model().gamma, model().lam, model().normalize, model().norm_over) == (0.95, 0.95, "std", "group")


def test_defaults_on_two_rollouts():
    """gamma = lam = 0.95. tau1 = A -> B -> G (success), tau2 = A -> C -> D; reward = success on the last step."""
    trajs = [traj(["A", "B", "G"], success=True), traj(["A", "C", "D"])]
    compute("gagpo", trajs, reward_source="success")
    # G: tau1 [0.95, 1], tau2 [0, 0]. V(A) = (0.95 + 0) / 2 = 0.475, V(B) = 1, V(C) = 0
    assert field(trajs, "process_reward") == [[near(0.475), 1.0], [near(0.475), 0.0]]
    # delta: A->B 0 + 0.95 * 1 - 0.475 = 0.475; B->G (last) 1 - 1 = 0; A->C 0 + 0 - 0.475; C->D (last) 0
    assert field(trajs, "step_reward") == [[near(0.475), 0.0], [near(-0.475), 0.0]]
    # raw A = [0.475, 0, -0.475, 0]: mean 0, sample std 0.475 sqrt(2/3), so A = +-sqrt(3/2) on the first steps
    s = 0.475 * np.sqrt(2 / 3)
    assert field(trajs, "advantage") == [[near(0.475 / (s + 1e-6)), 0.0], [near(-0.475 / (s + 1e-6)), 0.0]]


def test_shared_state_carries_credit_backward_with_lambda():
    """gamma = 1, lam = 0.5 (gamma lam = 0.5)."""
    trajs = shared_state()
    metrics = compute("gagpo", trajs, reward_source="success", gamma=1.0, lam=0.5, normalize="none")
    # G: tau1 [1, 1], tau2 [0, 0, 0]. V(A) = (1 + 0) / 2 = 0.5, V(B) = (1 + 0) / 2 = 0.5, V(C) = 0
    assert field(trajs, "process_reward") == [[0.5, 0.5], [0.5, 0.0, 0.5]]
    # delta: A->B 0 + 0.5 - 0.5 = 0; B->G 1 - 0.5 = 0.5; A->C 0 + 0 - 0.5; C->B 0 + 0.5 - 0 = 0.5; B->D 0 - 0.5
    assert field(trajs, "step_reward") == [[0.0, 0.5], [-0.5, 0.5, -0.5]]
    # GAE backward: tau1 A1 = 0.5, A0 = 0 + 0.5 * 0.5 = 0.25
    #               tau2 A2 = -0.5, A1 = 0.5 + 0.5 * -0.5 = 0.25, A0 = -0.5 + 0.5 * 0.25 = -0.375
    raw = [0.25, 0.5, -0.375, 0.25, -0.5]
    assert flat(trajs, "advantage") == [near(x) for x in raw]  # C->B, inside the failed rollout, is credited
    assert metrics["credit/shared_state_frac"] == pytest.approx(4 / 5)  # steps leaving A (2), B (2); not C
    assert metrics["credit/td_abs_mean"] == pytest.approx(2.0 / 5)
    assert metrics["credit/gae_abs_mean"] == pytest.approx(1.875 / 5)

    trajs = shared_state()
    compute("gagpo", trajs, reward_source="success", gamma=1.0, lam=0.5)  # stage 3: over the group's 5 steps
    assert flat(trajs, "advantage") == [near(x) for x in z(raw)]


@pytest.mark.parametrize("lam, raw", [
    (1.0, [0.5, 0.5, -0.5, 0.0, -0.5]),  # G_t - V(s_t): 1 - 0.5, 1 - 0.5 / 0 - 0.5, 0 - 0, 0 - 0.5
    (0.0, [0.0, 0.5, -0.5, 0.5, -0.5]),  # the TD errors themselves
])
def test_lambda_one_is_monte_carlo_and_lambda_zero_is_td(lam, raw):
    trajs = shared_state()
    compute("gagpo", trajs, reward_source="success", gamma=1.0, lam=lam, normalize="none")
    assert flat(trajs, "advantage") == [near(x) for x in raw]


def test_discount():
    """gamma = 0.5, lam = 1: A_t = G_t - V(s_t) with discounted returns."""
    trajs = shared_state()
    compute("gagpo", trajs, reward_source="success", gamma=0.5, lam=1.0, normalize="none")
    # G: tau1 [0.5, 1], tau2 [0, 0, 0]. V(A) = 0.25, V(B) = (1 + 0) / 2 = 0.5, V(C) = 0
    # delta: A->B 0.5 * 0.5 - 0.25 = 0; B->G 1 - 0.5; A->C -0.25; C->B 0.5 * 0.5 - 0 = 0.25; B->D -0.5
    assert field(trajs, "step_reward") == [[0.0, 0.5], [-0.25, 0.25, -0.5]]
    # GAE (gamma lam = 0.5): tau1 0.5, 0 + 0.25 = 0.25; tau2 -0.5, 0.25 - 0.25 = 0, -0.25 + 0 = -0.25
    assert field(trajs, "advantage") == [[0.25, 0.5], [-0.25, 0.0, -0.5]]


def test_cycle():
    """tau1 = A -> B -> A -> B -> G (success), tau2 = A -> C; gamma = 1, lam = 0.5."""
    trajs = [traj(["A", "B", "A", "B", "G"], success=True), traj(["A", "C"])]
    compute("gagpo", trajs, reward_source="success", gamma=1.0, lam=0.5, normalize="none")
    # G: tau1 [1, 1, 1, 1], tau2 [0]. V(A) = (1 + 1 + 0) / 3 = 2/3 (two visits in tau1), V(B) = 1
    assert field(trajs, "process_reward") == [[near(2 / 3), 1.0, near(2 / 3), 1.0], [near(2 / 3)]]
    # delta: A->B 1 - 2/3 = 1/3; B->A 2/3 - 1 = -1/3; A->B 1/3; B->G (last) 1 - 1 = 0; A->C (last) 0 - 2/3
    assert field(trajs, "step_reward") == [[near(1 / 3), near(-1 / 3), near(1 / 3), 0.0], [near(-2 / 3)]]
    # GAE backward: A3 = 0, A2 = 1/3, A1 = -1/3 + 0.5 * 1/3 = -1/6, A0 = 1/3 + 0.5 * -1/6 = 1/4; tau2 -2/3
    raw = [1 / 4, -1 / 6, 1 / 3, 0.0, -2 / 3]
    assert flat(trajs, "advantage") == [near(x) for x in raw]
    trajs = [traj(["A", "B", "A", "B", "G"], success=True), traj(["A", "C"])]
    compute("gagpo", trajs, reward_source="success", gamma=1.0, lam=0.5)
    assert flat(trajs, "advantage") == [near(x) for x in z(raw)]


def test_all_fail_group():
    """No reward anywhere: every V, delta and advantage is 0. With the env's shaped rewards the TD errors move."""
    trajs = [traj(["A", "B", "C"]), traj(["A", "D"]), traj(["A", "B", "E"])]
    compute("gagpo", trajs, reward_source="success")
    assert field(trajs, "advantage") == [[0.0, 0.0], [0.0], [0.0, 0.0]]
    assert field(trajs, "process_reward") == [[0.0, 0.0], [0.0], [0.0, 0.0]]

    trajs = [traj(["A", "B", "C"], rewards=[0, -1]), traj(["A", "B", "D"], rewards=[0, 0])]
    compute("gagpo", trajs, gamma=1.0, lam=1.0, normalize="none")  # reward_source=return: the env rewards
    # G: [-1, -1] / [0, 0]. V(A) = V(B) = -0.5. A_t = G_t - V(s_t): -0.5, -0.5 / 0.5, 0.5
    assert field(trajs, "advantage") == [[-0.5, -0.5], [0.5, 0.5]]


def test_invalid_self_loop_keeps_its_penalty():
    """tau1 = A -(invalid, -0.1)-> A -> B, tau2 = A -> C; env rewards, gamma = lam = 1, no normalisation."""
    trajs = [traj(["A", "A", "B"], valid=[False, True], rewards=[-0.1, 0]), traj(["A", "C"])]
    compute("gagpo", trajs, gamma=1.0, lam=1.0, normalize="none")
    # G: tau1 [-0.1, 0], tau2 [0]. V(A) = (-0.1 + 0 + 0) / 3 = -1/30 (three steps leave A)
    # delta: A->A -0.1 + V(A) - V(A) = -0.1; A->B (last) 0 - (-1/30) = 1/30; A->C (last) 1/30
    assert field(trajs, "step_reward") == [[near(-0.1), near(1 / 30)], [near(1 / 30)]]
    # GAE: tau1 A1 = 1/30, A0 = -0.1 + 1/30 = -1/15; tau2 1/30
    assert field(trajs, "advantage") == [[near(-1 / 15), near(1 / 30)], [near(1 / 30)]]


def test_a_rollouts_last_step_bootstraps_nothing():
    """tau1 = A -> B stops in B (failed or cut off), tau2 = A -> B -> G goes on from B to success. tau1's last
    step is terminal: delta = r - V(A), not r + gamma V(B) - V(A), although V(B) is known from tau2."""
    trajs = [traj(["A", "B"]), traj(["A", "B", "G"], success=True)]
    compute("gagpo", trajs, reward_source="success", gamma=1.0, lam=1.0, normalize="none")
    # G: tau1 [0], tau2 [1, 1]. V(A) = (0 + 1) / 2 = 0.5, V(B) = 1 (only tau2 leaves B)
    # tau1 A->B (last): 0 - 0.5 = -0.5 (bootstrapping V(B) would give +0.5); tau2: 1 - 0.5 = 0.5, 1 - 1 = 0
    assert field(trajs, "step_reward") == [[-0.5], [0.5, 0.0]]
    assert field(trajs, "advantage") == [[-0.5], [0.5, 0.0]]


def test_a_group_of_one_rollout():
    """V(s) is the rollout's own return-to-go where it visits s once: every TD error is 0. Revisiting a state
    with gamma < 1 is the exception: the two visits' returns differ, and the loop is charged its discount."""
    for gamma in (1.0, 0.95):
        trajs = [traj(["A", "B", "G"], success=True)]
        compute("gagpo", trajs, reward_source="success", gamma=gamma)
        assert field(trajs, "advantage") == [[0.0, 0.0]]

    trajs = [traj(["A", "B", "A", "G"], success=True)]
    compute("gagpo", trajs, reward_source="success", gamma=0.5, lam=1.0, normalize="none")
    # G: [0.25, 0.5, 1]. V(A) = (0.25 + 1) / 2 = 0.625, V(B) = 0.5. A_t = G_t - V(s_t): -0.375, 0, 0.375
    assert field(trajs, "advantage") == [[-0.375, 0.0, 0.375]]


def test_groups_do_not_share_values():
    """Two task groups with the same state keys: V is per group, and stage 3 standardises per group."""
    a = [traj(["A", "B", "G"], success=True, group="x"), traj(["A", "C"], group="x")]
    b = [traj(["A", "B", "G"], group="y"), traj(["A", "C"], group="y")]  # no success in y
    compute("gagpo", a + b, reward_source="success", gamma=1.0, lam=1.0)
    assert field(b, "advantage") == [[0.0, 0.0], [0.0]]
    assert field(a, "process_reward") == [[0.5, 1.0], [0.5]]  # V(A) = (1 + 0) / 2 in x alone
    # x: raw [1 - 0.5, 1 - 1, 0 - 0.5] = [0.5, 0, -0.5]
    assert flat(a, "advantage") == [near(x) for x in z([0.5, 0.0, -0.5])]


def test_norm_over_state_and_singleton_state_groups():
    """norm_over=state: each step is compared only with the steps leaving its state; a state left once gives 0."""
    trajs = shared_state()
    compute("gagpo", trajs, reward_source="success", gamma=1.0, lam=0.5, norm_over="state")
    # raw [0.25, 0.5 | -0.375, 0.25, -0.5]; states A: {0.25, -0.375}, B: {0.5, -0.5}, C: {0.25} alone
    sq, _ = z([0.25, -0.375])  # two values: +-(d / 2) / (d / sqrt 2 + eps) = +-0.7071
    sb, _ = z([0.5, -0.5])
    assert field(trajs, "advantage") == [[near(sq), near(sb)], [near(-sq), 0.0, near(-sb)]]


def test_normalize_mean_centres_only():
    trajs = shared_state()
    compute("gagpo", trajs, reward_source="success", gamma=1.0, lam=0.5, normalize="mean")
    raw = np.array([0.25, 0.5, -0.375, 0.25, -0.5])  # mean 0.025
    assert flat(trajs, "advantage") == [near(x) for x in raw - 0.025]


def test_alpha_traj_adds_grpo():
    trajs = shared_state()
    compute("gagpo", trajs, reward_source="success", gamma=1.0, lam=0.5, alpha_traj=1.0)
    sq, _ = z([1.0, 0.0])  # GRPO over success [1, 0]: +-0.7071
    want = z([0.25, 0.5, -0.375, 0.25, -0.5]) + np.array([sq, sq, -sq, -sq, -sq])
    assert flat(trajs, "advantage") == [near(x) for x in want]


def test_worked_graph_of_the_methods_page():
    """docs/methods.md, "One graph, four credits": the GAGPO column (defaults, reward_source=success)."""
    def example():
        return [traj(["A", "B", "G"], ["right", "push"], success=True, traj_id="1"),
                traj(["A", "C", "B", "D"], ["up", "down", "left"], traj_id="2"),
                traj(["A", "C", "C", "E"], ["up", "wait", "down"], valid=[True, False, True], traj_id="3")]

    trajs = example()
    compute("gagpo", trajs, reward_source="success", normalize="none")
    # G: tau1 [0.95, 1], tau2, tau3 all 0. V(A) = 0.95 / 3, V(B) = (1 + 0) / 2 = 0.5, V(C) = 0 (3 visits, all 0)
    va = 0.95 / 3
    assert field(trajs, "process_reward") == [[near(va), 0.5], [near(va), 0.0, 0.5], [near(va), 0.0, 0.0]]
    # delta: A->B 0.95 * 0.5 - V(A); B->G 1 - 0.5; A->C -V(A); C->B 0.95 * 0.5 = 0.475; B->D -0.5; C->C, C->E 0
    assert field(trajs, "step_reward") == [[near(0.475 - va), 0.5], [near(-va), near(0.475), -0.5],
                                           [near(-va), 0.0, 0.0]]
    c = 0.95 * 0.95  # GAE: raw A_t = delta_t + c A_{t+1}
    raw = [0.475 - va + c * 0.5, 0.5, -va + c * (0.475 - c * 0.5), 0.475 - c * 0.5, -0.5, -va, 0.0, 0.0]
    assert flat(trajs, "advantage") == [near(x) for x in raw]

    trajs = example()
    compute("gagpo", trajs, reward_source="success")
    adv = flat(trajs, "advantage")
    assert adv == [near(x) for x in z(raw)]
    # the table's column, to 3 decimals
    assert [round(x, 3) for x in adv] == [1.56, 1.278, -0.766, 0.054, -1.292, -0.821, -0.007, -0.007]


def test_lambda_one_within_states_is_gigpos_step_level():
    """lam = 1 makes the raw advantage G_t - V(s_t) = G_t - (mean G over s_t's visits); standardised among the
    steps leaving s_t that is GiGPO's step advantage A_S (Eq. 7). GiGPO's A = A_E + A_S and its A_E on success
    is GRPO, so gagpo(lam=1, norm_over=state) = gigpo - grpo, step by step."""
    def group():
        return [traj(["A", "B", "G"], success=True, traj_id="1"), traj(["A", "C", "B", "D"], traj_id="2"),
                traj(["A", "C", "C", "E"], valid=[True, False, True], traj_id="3"),
                traj(["A", "B", "A", "B", "G"], success=True, traj_id="4")]

    got = {}
    for name, knobs in [("gagpo", {"lam": 1.0, "norm_over": "state"}), ("gigpo", {}), ("grpo", {})]:
        trajs = group()
        compute(name, trajs, reward_source="success", **knobs)
        got[name] = np.array(flat(trajs, "advantage"))
    np.testing.assert_allclose(got["gagpo"], got["gigpo"] - got["grpo"], rtol=0, atol=1e-12)
    assert np.abs(got["gagpo"]).max() > 0.5  # not trivially zero


def test_lambda_zero_td_errors_are_g2pos_where_no_rollout_ends_in_a_state_left_elsewhere():
    """G2PO's TD error bootstraps V(s_{t+1}) on every step, GAGPO's nothing after a rollout's last step; where
    no rollout ends in a state another one leaves, V(s_{T+1}) = 0 and the two TD errors agree."""
    trajs = shared_state()
    compute("gagpo", trajs, reward_source="success", gamma=0.9)
    other = shared_state()
    compute("g2po", other, reward_source="success", gamma=0.9)
    assert flat(trajs, "step_reward") == [near(x) for x in flat(other, "step_reward")]
    assert flat(trajs, "process_reward") == [near(x) for x in flat(other, "process_reward")]


def test_score_arrays_and_compute_agree():
    trajs = shared_state()
    compute("gagpo", trajs, reward_source="success", gamma=0.9, lam=0.7)
    arrays = score_arrays("gagpo", group_ids=[0] * 5, traj_ids=[0, 0, 1, 1, 1], step_index=[0, 1, 0, 1, 2],
                          state_keys=["A", "B", "A", "C", "B"], next_state_keys=["B", "G", "C", "B", "D"],
                          rewards=[0.0] * 5, success=[True, True, False, False, False], reward_source="success",
                          gamma=0.9, lam=0.7)
    np.testing.assert_allclose(arrays, flat(trajs, "advantage"), rtol=1e-12)


@pytest.mark.parametrize("knobs, message", [
    ({"lam": 1.5}, "knob lam must be in [0, 1], got 1.5"),
    ({"gamma": -0.1}, "knob gamma must be in [0, 1], got -0.1"),
    ({"normalize": "zscore"}, "knob normalize"),
    ({"alpha_traj": -1.0}, "knob alpha_traj must be in [0, inf), got -1.0"),
])
def test_bad_knobs_are_one_line_errors(knobs, message):
    with pytest.raises(CreditError) as exc:
        compute("gagpo", shared_state(), **knobs)
    assert message in str(exc.value) and len(str(exc.value).splitlines()) == 1


def test_cli_round_trip_and_bad_knob(tmp_path, capsys):
    path, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    write_jsonl(path, shared_state())
    with pytest.raises(SystemExit) as exc:
        main(["credit", "--estimator", "gagpo", "--in", str(path), "--out", str(out), "reward_source=success",
              "gamma=1", "lam=0.5", "normalize=none"])
    err = capsys.readouterr().err
    assert exc.value.code == 0, err
    assert flat(read_jsonl(out), "advantage") == [near(x) for x in [0.25, 0.5, -0.375, 0.25, -0.5]]
    with pytest.raises(SystemExit) as exc:
        main(["credit", "-e", "gagpo", "--in", str(path), "--out", str(tmp_path / "bad.jsonl"), "lam=2"])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and "knob lam must be in [0, 1], got '2'" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "bad.jsonl").exists()
