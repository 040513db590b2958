"""GraphGPO (arXiv 2605.26684) and G2PO (arXiv 2606.22995): worked examples computed by hand from the papers'
definitions (docs/methods.md, "GraphGPO and G2PO"). Neither official implementation could be fetched here, so
these hand-worked graphs are the reference: a 2-rollout graph, a graph with a cycle, an all-fail group, and a
failed rollout that passes through a state on a successful path."""

from __future__ import annotations

import numpy as np
import pytest

from tests.credit.credit_testlib import field, traj

from creditflow.credit import CreditError, compute, estimator_names, knob_model, score_arrays

SQ = np.sqrt(0.5)  # (x - mean) / sample std of two distinct values: +-0.7071


def two_rollouts():
    """A -> B -> G (success) and A -> C -> D (failure): the worked example of docs/methods.md."""
    return [traj(["A", "B", "G"], success=True, rewards=[0, 1]), traj(["A", "C", "D"])]


def near(x, rel=1e-5):
    return pytest.approx(x, rel=rel, abs=1e-6)


# --------------------------------------------------------------------------------------------------
# GraphGPO
# --------------------------------------------------------------------------------------------------


def test_graphgpo_registered_with_its_knobs():
    assert {"graphgpo", "g2po"} <= set(estimator_names())
    assert set(knob_model("graphgpo").model_fields) >= {"omega", "beta_episode", "beta_graph", "ddof"}


def test_graphgpo_two_rollouts():
    trajs = two_rollouts()
    metrics = compute("graphgpo", trajs, reward_source="success", preset="reproduction")
    # d: G 0, B 1, A 2; C and D reach no success: d = max finite (2) + 1 = 3
    assert field(trajs, "process_reward") == [[2, 1], [2, 3]]
    # Eq. 4: 10 * 0.1 ** (d(s') + 1)
    assert field(trajs, "step_reward") == [[near(0.1), near(1.0)], [near(0.001), near(0.001)]]
    # source A: {0.1, 0.001} -> +-0.7071; B and C have one edge each -> 0; episode: success [1, 0] -> +-0.7071
    assert field(trajs, "advantage") == [[near(2 * SQ), near(SQ)], [near(-2 * SQ), near(-SQ)]]
    assert metrics["credit/success_group_frac"] == 1.0
    assert metrics["credit/reach_success_frac"] == pytest.approx(3 / 4)  # steps leaving A, B, A reach G; C not
    assert metrics["credit/progress_in_failed_frac"] == 0.0
    assert metrics["credit/no_progress_in_success_frac"] == 0.0


def test_graphgpo_failed_rollout_through_a_successful_path():
    # the failed rollout reaches B, which the successful one continued to G: C gets a finite distance
    trajs = [traj(["A", "B", "G"], success=True, rewards=[0, 1]), traj(["A", "C", "B", "D"])]
    metrics = compute("graphgpo", trajs, reward_source="success", preset="reproduction")
    assert field(trajs, "process_reward") == [[2, 1], [2, 2, 1]]  # d(C) = 2 through C -> B -> G
    assert field(trajs, "step_reward") == [[near(0.1), near(1.0)], [near(0.01), near(0.1), near(0.001)]]
    a = field(trajs, "advantage")
    # A: {A->B 0.1, A->C 0.01} +-SQ; B: {B->G 1.0, B->D 0.001} +-SQ; C: one edge, 0
    assert a == [[near(2 * SQ), near(2 * SQ)], [near(-2 * SQ), near(-SQ), near(-2 * SQ)]]
    # the paper's Fig. 1 statistic: C -> B makes progress inside a failed rollout (1 of its 3 steps)
    assert metrics["credit/progress_in_failed_frac"] == pytest.approx(1 / 3)


def test_graphgpo_cycle():
    trajs = [traj(["A", "B", "A", "B", "G"], success=True, rewards=[0, 0, 0, 1]), traj(["A", "C"])]
    compute("graphgpo", trajs, reward_source="success", beta_episode=0.0, preset="reproduction")
    # d: G 0, B 1, A 2, C 3; B -> A goes back: 10 * 0.1 ** 3 = 0.01
    assert field(trajs, "step_reward") == [[near(0.1), near(0.01), near(0.1), near(1.0)], [near(0.001)]]
    # source A: {0.1, 0.1, 0.001}; source B: {0.01, 1.0}: -+SQ
    xa = np.array([0.1, 0.1, 0.001])
    za = (xa - xa.mean()) / (xa.std(ddof=1) + 1e-6)
    assert field(trajs, "advantage") == [[near(za[0]), near(-SQ), near(za[1]), near(SQ)], [near(za[2])]]


def test_graphgpo_all_fail_group_has_no_graph_term():
    trajs = [traj(["A", "B", "C"], rewards=[-0.1, 0]), traj(["A", "D"], rewards=[0])]
    metrics = compute("graphgpo", trajs, preset="reproduction")  # returns -0.1 and 0: only the episode term moves
    assert field(trajs, "step_reward") == [[0.0, 0.0], [0.0]]
    assert field(trajs, "process_reward") == [[-1.0, -1.0], [-1.0]]
    z = 0.05 / (np.std([-0.1, 0.0], ddof=1) + 1e-6)
    assert field(trajs, "advantage") == [[near(-z), near(-z)], [near(z)]]
    assert metrics["credit/success_group_frac"] == 0.0


def test_graphgpo_groups_are_separate_graphs():
    a = [traj(["A", "B", "G"], success=True, group="x"), traj(["A", "C"], group="x")]
    b = [traj(["A", "C"], group="y"), traj(["A", "C"], group="y")]  # the same keys, no success in y
    compute("graphgpo", a + b, reward_source="success", preset="reproduction")
    assert field(b, "advantage") == [[0.0], [0.0]]
    assert field(a, "process_reward") == [[2, 1], [2]]


# --------------------------------------------------------------------------------------------------
# G2PO
# --------------------------------------------------------------------------------------------------


def test_g2po_two_rollouts():
    trajs = two_rollouts()
    compute("g2po", trajs, reward_source="success")
    # V: A mean(1, 0) = 0.5, B 1, C 0; G and D are never left: 0
    assert field(trajs, "process_reward") == [[0.5, 1.0], [0.5, 0.0]]
    # delta = r + V(s') - V(s): A->B 0.5, B->G 0, A->C -0.5, C->D 0
    assert field(trajs, "step_reward") == [[0.5, 0.0], [-0.5, 0.0]]
    z = 0.5 / np.sqrt(0.5 / 3)  # four edges, TD errors [0.5, 0, -0.5, 0]: sample std sqrt(0.5 / 3)
    assert field(trajs, "advantage") == [[near(z), 0.0], [near(-z), 0.0]]


def test_g2po_cycle_and_repeated_edges():
    trajs = [traj(["A", "B", "A", "B", "G"], success=True, rewards=[0, 0, 0, 1]), traj(["A", "C"])]
    compute("g2po", trajs, reward_source="success")
    # V(A) = mean(1, 1, 0) = 2/3, V(B) = 1; edges A->B 1/3 (twice, counted once), B->A -1/3, B->G 0, A->C -2/3
    assert field(trajs, "step_reward") == [[near(1 / 3), near(-1 / 3), near(1 / 3), 0.0], [near(-2 / 3)]]
    d = np.array([1 / 3, -1 / 3, 0.0, -2 / 3])
    z = (d - d.mean()) / (d.std(ddof=1) + 1e-6)
    assert field(trajs, "advantage") == [[near(z[0]), near(z[1]), near(z[0]), near(z[2])], [near(z[3])]]
    trajs = [traj(["A", "B", "A", "B", "G"], success=True, rewards=[0, 0, 0, 1]), traj(["A", "C"])]
    compute("g2po", trajs, reward_source="success", standardize="steps")
    s = np.array([1 / 3, -1 / 3, 1 / 3, 0.0, -2 / 3])
    zs = (s - s.mean()) / (s.std(ddof=1) + 1e-6)
    assert field(trajs, "advantage") == [[near(v) for v in zs[:4]], [near(zs[4])]]


def test_g2po_discount_and_all_fail_group():
    trajs = [traj(["A", "B", "G"], success=True, rewards=[0, 1]), traj(["A", "C", "D"])]
    compute("g2po", trajs, reward_source="success", gamma=0.5)
    # returns-to-go [0.5, 1] / [0, 0]: V(A) 0.25, V(B) 1; delta A->B 0 + 0.5 * 1 - 0.25 = 0.25
    assert field(trajs, "step_reward") == [[0.25, 0.0], [-0.25, 0.0]]
    fail = [traj(["A", "B"]), traj(["A", "C"])]
    compute("g2po", fail, reward_source="success")
    assert field(fail, "advantage") == [[0.0], [0.0]]


def test_g2po_td_error_is_zero_between_states_visited_once():
    """gamma = 1 and shaped rewards: where a step's two states are each visited once in the group, V is that
    rollout's own return-to-go, so delta = r + G_{t+1} - G_t = 0; only the shared start A carries a TD error."""
    trajs = [traj(["A", "B", "C", "D"], rewards=[-0.1, -0.1, 1.0]), traj(["A", "E", "F"], rewards=[-0.1, -1.0])]
    compute("g2po", trajs)  # reward_source="return": the env rewards
    # returns-to-go: 0.8, 0.9, 1.0 / -1.1, -1.0; V(A) = mean(0.8, -1.1) = -0.15
    assert field(trajs, "process_reward") == [[near(-0.15), near(0.9), near(1.0)], [near(-0.15), near(-1.0)]]
    # A->B: -0.1 + 0.9 + 0.15 = 0.95; A->E: -0.1 - 1.0 + 0.15 = -0.95; every other step 0
    assert field(trajs, "step_reward") == [[near(0.95), near(0.0), near(0.0)], [near(-0.95), near(0.0)]]


def test_g2po_alpha_traj_adds_grpo():
    trajs = two_rollouts()
    compute("g2po", trajs, reward_source="success", alpha_traj=1.0)
    z = 0.5 / np.sqrt(0.5 / 3)
    assert field(trajs, "advantage") == [[near(z + SQ), near(SQ)], [near(-z - SQ), near(-SQ)]]


# --------------------------------------------------------------------------------------------------
# both: the public array path, knob checks, scale
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["graphgpo", "g2po"])
def test_score_arrays_equals_trajectory_path(name):
    trajs = [traj(["A", "B", "G"], success=True, rewards=[0, 1]), traj(["A", "C", "B", "D"])]
    compute(name, trajs)
    rows = [(t.group_id, k, i, s.state, s.reward, t.success) for k, t in enumerate(trajs)
            for i, s in enumerate(t.steps)]
    out = score_arrays(name, group_ids=[r[0] for r in rows], traj_ids=[r[1] for r in rows],
                       step_index=[r[2] for r in rows], state_keys=[r[3] for r in rows],
                       rewards=[r[4] for r in rows], success=[r[5] for r in rows],
                       next_state_keys=[s.next_state for t in trajs for s in t.steps])
    assert np.allclose(out, [a for t in field(trajs, "advantage") for a in t])


@pytest.mark.parametrize("name,bad", [("graphgpo", {"omega": 1.0}), ("graphgpo", {"ddof": 2}),
                                      ("g2po", {"gamma": 1.5}), ("g2po", {"standardize": "nodes"})])
def test_bad_knobs_are_one_line_errors(name, bad):
    with pytest.raises(CreditError):
        compute(name, two_rollouts(), **bad)


@pytest.mark.parametrize("name", ["graphgpo", "g2po"])
def test_empty_and_finite(name):
    assert compute(name, [])["credit/groups"] == 0
    rng = np.random.default_rng(0)
    trajs = []
    for g in range(20):
        for k in range(4):
            n = int(rng.integers(1, 12))
            states = [f"s{int(x)}" for x in rng.integers(0, 6, n + 1)]
            trajs.append(traj(states, success=bool(rng.random() < 0.3), group=f"g{g}",
                              rewards=rng.normal(size=n).tolist()))
    compute(name, trajs)
    assert np.isfinite([a for t in field(trajs, "advantage") for a in t]).all()
