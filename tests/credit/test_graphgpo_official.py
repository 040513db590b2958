"""GraphGPO ``preset=official`` against the authors' recipe (verl-agent ``recipe/GraphGPO``, upstream commit
234a913; read from the public fork zzj1111/alfworldauto, which holds it unchanged).

The numbers below are the recipe's own output on these batches: ``gather_rollout_data`` (rollout_loop.py),
``ComplexGraph.from_data`` + ``Calculate_all_shortest_path`` + ``compute_graph_path_returns`` (core_graph.py),
the episode reward on the last token (agent_system/reward_manager/episode.py), ``apply_invalid_action_penalty``
(graphgpo_ray_trainer.py) and ``compute_graphgpo_outcome_advantage`` (core_graph.py over gigpo/core_gigpo.py),
run on DataProto batches in verl 0.9.1 in a working session (2026-12-06). With the recipe's float32 arrays
widened to float64 they equal creditflow's to 2.7e-14 on 42 checks (6 batches x 7 settings); as the recipe
runs, in float32, to 1.8e-5 (docs/methods.md, "GraphGPO"). The first two cases are also worked by hand.
"""

import json

import numpy as np
import pytest
from tests.credit.credit_testlib import traj
from tests.credit.test_cli import run

from creditflow.credit import CreditError, compute, score, validate_knobs


def T(group, i, states, success=False, rewards=None, valid=None):
    """A rollout of ``group`` through ``states``; sparse reward 10 on a successful last step by default."""
    n = len(states) - 1
    rewards = rewards if rewards is not None else [0.0] * (n - 1) + [10.0 if success else 0.0]
    return traj(states, success=success, rewards=rewards, valid=valid, group=group, traj_id=f"{group}/{i}")


def shared_invalid():
    """The docs' example: a failed rollout through B, which the successful one continued; an invalid self-loop."""
    return [T("g", 0, ["A", "B", "G"], True), T("g", 1, ["A", "C", "B", "D"]),
            T("g", 2, ["A", "C", "C", "E"], valid=[True, False, True])]


def all_fail():
    return [T("f", 0, ["A", "B", "B", "C"], valid=[True, False, True]), T("f", 1, ["A", "D", "E"]),
            T("f", 2, ["A", "B", "D"]), T("f", 3, ["A", "A", "B"], valid=[False, True])]


def cycle():
    return [T("c", 0, ["A", "B", "A", "B", "G"], True), T("c", 1, ["A", "C", "A", "C"]),
            T("c", 2, ["A", "B", "C", "A", "B", "G"], True), T("c", 3, ["A", "C", "C"], valid=[True, False])]


def unreachable_two_groups():
    return ([T("u", 0, ["S", "X", "Y", "G"], True), T("u", 1, ["S", "P", "Q", "R"]), T("u", 2, ["S", "X", "Z"]),
             T("u", 3, ["S", "P", "P", "Q"], valid=[True, False, True])]
            + [T("v", 0, ["S", "K", "L"], True), T("v", 1, ["S", "M", "N"]), T("v", 2, ["S", "K", "N"])])


def sokoban_rewards():
    """-0.1 a step, +1 box on target, +10 solved. s/1 never solves but ends with return 0.7 > 0: the recipe's
    success rule (episode_rewards > 0) sends its last step into the success node."""
    return [T("s", 0, ["A", "B", "C", "G"], True, rewards=[-0.1, -0.1, 10.9]),
            T("s", 1, ["A", "B", "D", "E"], rewards=[-0.1, 0.9, -0.1]),
            T("s", 2, ["A", "F", "F", "E"], rewards=[-0.1, -0.1, -0.1], valid=[True, False, True]),
            T("s", 3, ["A", "B", "C", "H"], rewards=[-0.1, -0.1, -1.1])]


def rows(trajs, name):
    return [getattr(s, name) for t in trajs for s in t.steps]


# (batch, knobs, the recipe's advantages, the recipe's step returns G after the invalid penalty)
RECIPE = [
    (shared_invalid, {"omega": 0.1},
     [2.774838, 2.327247, -1.113801, 0.618202, -1.243559, -1.113801, -1.144049, -1.105076],
     [1.0, 10.0, 0.1, 1.0, 0.01, 0.1, 0.0, 0.01]),
    (all_fail, {"omega": 0.1},
     [0.951144, -2.918476, 1.081281, 0.951144, 0.503941, 0.951144, 1.081281, -3.552609, 0.951144],
     [1.0, 0.9, 1.0, 1.0, 1.0, 1.0, 1.0, 0.9, 1.0]),
    (cycle, {"omega": 0.1},
     [1.520016, -0.139936, 1.520016, 1.584241, -2.35785, -0.711462, -2.35785, 1.520016, -0.155611, 1.295579,
      1.520016, 1.584241, -2.35785, -2.463567],
     [1.0, 0.1, 1.0, 10.0, 0.01, 0.1, 0.01, 1.0, 0.01, 0.1, 1.0, 10.0, 0.01, -0.09]),
    (cycle, {"omega": 0.8},
     [1.520017, 0.126972, 1.520017, 1.565177, -2.357851, -0.711458, -2.357851, 1.520017, -0.38439, 1.295584,
      1.520017, 1.565177, -2.357851, -2.463577],
     [8.0, 6.4, 8.0, 10.0, 5.12, 6.4, 5.12, 8.0, 5.12, 6.4, 8.0, 10.0, 5.12, 5.02]),
    (unreachable_two_groups, {"omega": 0.1},
     [2.422977, 2.264072, 1.556966, -1.4472, -0.003849, -0.58119, 0.284821, -1.288296, -1.4472, -1.757252,
      -0.003849, 1.868343, 1.998101, -1.800196, -0.645497, -0.068148, -1.352604],
     [0.1, 1.0, 10.0, 0.001, 0.001, 0.001, 0.1, 0.001, 0.001, -0.099, 0.001, 1.0, 10.0, 0.01, 0.01, 1.0, 0.01]),
    (sokoban_rewards, {"omega": 0.8},
     [2.140344, 1.640345, 2.347451, 0.154054, -0.345946, -0.345946, -2.044573, -1.271534, 0.162522, -0.243204,
      -0.743204, -1.45031],
     [6.4, 8.0, 10.0, 6.4, 8.0, 10.0, 4.096, 3.996, 4.096, 6.4, 8.0, 4.096]),
    (shared_invalid, {"omega": 0.8, "normalize_distance": True},
     [2.77484, 2.327247, -1.113802, 0.514249, -1.243559, -1.113802, -0.668618, -1.476554],
     [10.0, 10.0, 8.0, 10.0, 5.12, 8.0, 7.9, 6.4]),
    (shared_invalid, {"omega": 0.1, "normalize": "mean"},
     [8.1125, 12.5075, -2.7875, -1.824167, -7.4825, -2.7875, -2.924167, -2.814167],
     [1.0, 10.0, 0.1, 1.0, 0.01, 0.1, 0.0, 0.01]),
]


@pytest.mark.parametrize("make, knobs, advantage, returns", RECIPE,
                         ids=[f"{m.__name__}-{'-'.join(f'{k}={v}' for k, v in kn.items())}" for m, kn, _, _ in RECIPE])
def test_official_preset_equals_the_recipe(make, knobs, advantage, returns):
    trajs = make()
    compute("graphgpo", trajs, **knobs)  # preset=official is the default
    np.testing.assert_allclose(rows(trajs, "step_reward"), returns, atol=1e-6)
    np.testing.assert_allclose(rows(trajs, "advantage"), advantage, atol=2e-6)  # the recipe's, rounded to 1e-6


def test_shared_invalid_by_hand():
    trajs = shared_invalid()
    compute("graphgpo", trajs, omega=0.1)
    # success: g/0 (return 10 > 0); its last step B -> success node. d: success 0, B 1, A 2 (A -> B),
    # C 2 (C -> B); D and E have no path: the farthest finite d (2) + 1 = 3
    assert rows(trajs, "process_reward") == [2, 1, 2, 2, 1, 2, 2, 2]  # d(s_t)
    # G = 10 * 0.1 ** d(s'), minus 0.1 on the invalid C -> C: 10 * 0.01 - 0.1 = 0
    np.testing.assert_allclose(rows(trajs, "step_reward"), [1.0, 10.0, 0.1, 1.0, 0.01, 0.1, 0.0, 0.01], atol=1e-12)
    # A_G by source state: A {1.0, 0.1, 0.1}: mean 0.4, sample std sqrt(0.27) -> +1.1547, -0.5774 (twice);
    # B {10, 0.01} -> +-0.7071; C {1.0, 0.0, 0.01}: mean 0.33667, std 0.57449 -> +1.1546, -0.5860, -0.5686
    # A_E over the group's 8 step rows: scores 10, 10, 0, 0, 0, 0, -0.1 (the invalid row), 0: mean 2.4875,
    # sample std 4.63695 -> +1.62014 (g/0), -0.53645, and -0.55802 on the invalid row
    a_e = np.array([7.5125] * 2 + [-2.4875] * 4 + [-2.5875, -2.4875]) / np.std(
        [10, 10, 0, 0, 0, 0, -0.1, 0], ddof=1)
    za = (np.array([1.0, 0.1, 0.1]) - 0.4) / np.sqrt(0.27)
    c = np.array([1.0, 0.0, 0.01])
    zc = (c - c.mean()) / c.std(ddof=1)
    a_g = [za[0], np.sqrt(0.5), za[1], zc[0], -np.sqrt(0.5), za[2], zc[1], zc[2]]
    np.testing.assert_allclose(rows(trajs, "advantage"), a_e + a_g, atol=1e-5)  # eps 1e-6


def test_all_fail_group_by_hand():
    trajs = all_fail()
    compute("graphgpo", trajs, omega=0.1)
    # no success: the success node still counts at d = 0, so every state is (farthest finite 0) + 1 = 1 and
    # G = 10 * 0.1 = 1 everywhere, 0.9 on the two invalid rows: only the penalty moves A_G
    np.testing.assert_allclose(rows(trajs, "step_reward"), [1.0, 0.9, 1.0, 1.0, 1.0, 1.0, 1.0, 0.9, 1.0])
    assert set(rows(trajs, "process_reward")) == {1.0}
    # B's edges {0.9 (invalid B -> B), 1.0 (B -> C)}: -+0.7071; the invalid A -> A sits among A's four edges
    adv = rows(trajs, "advantage")
    assert adv[1] < adv[2] and adv[7] == min(adv)


def test_reproduction_preset_keeps_the_earlier_reading():
    official, reproduction = shared_invalid(), shared_invalid()
    compute("graphgpo", official)
    compute("graphgpo", reproduction, preset="reproduction")
    # reproduction: goal = G (the final state), omega ** (d + 1), no penalty, one return per rollout
    np.testing.assert_allclose(rows(reproduction, "step_reward"), [0.1, 1.0, 0.01, 0.1, 0.001, 0.01, 0.01, 0.001])
    assert np.abs(np.subtract(rows(official, "advantage"), rows(reproduction, "advantage"))).max() > 0.3
    fail = all_fail()
    compute("graphgpo", fail, preset="reproduction")
    assert set(rows(fail, "step_reward")) == {0.0}  # no success, no graph term


def test_explicit_knobs_win_over_the_preset():
    knobs = validate_knobs("graphgpo", {"preset": "reproduction", "invalid_penalty": 0.2}).resolved()
    assert (knobs.invalid_penalty, knobs.goal, knobs.distance_offset, knobs.episode_stats) == \
        (0.2, "final_state", 1.0, "rollouts")
    with pytest.raises(CreditError, match="preset"):
        validate_knobs("graphgpo", {"preset": "paper"})
    with pytest.raises(CreditError, match="invalid_penalty"):
        validate_knobs("graphgpo", {"invalid_penalty": -0.1})


def test_success_from_outcome_for_data_without_rewards():
    """Data that records success but no reward: the recipe's rule (episode score > 0) on the summed reward finds
    no success there; with ``reward_source=success`` the episode score is the outcome, and so is the goal."""
    data = [T("x", 0, ["A", "B", "G"], True, rewards=[0, 0]), T("x", 1, ["A", "C", "D"])]
    as_recipe = score(data, estimator="graphgpo", reward_source="return")
    assert set(rows(as_recipe, "process_reward")) == {1.0}  # no goal reached: every state at d = 1
    by_success = score(data, estimator="graphgpo", reward_source="success")
    assert rows(by_success, "process_reward") == [2, 1, 2, 3]
    by_outcome = score(data, estimator="graphgpo", reward_source="return", success_from="outcome")
    assert rows(by_outcome, "process_reward") == [2, 1, 2, 3]


def test_credit_command_preset_official_equals_the_recipe(tmp_path, capsys):
    src, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    src.write_text("".join(json.dumps(t.to_dict()) + "\n" for t in shared_invalid()))
    code, err = run(["credit", "--estimator", "graphgpo", "--in", str(src), "--out", str(out), "preset=official",
                     "omega=0.1"], capsys)
    assert code == 0, err
    adv = [s["advantage"] for line in out.read_text().splitlines() for s in json.loads(line)["steps"]]
    np.testing.assert_allclose(adv, RECIPE[0][2], atol=2e-6)
