"""Fidelity knobs: preset=official (as the official RewardFlow/verl-agent trainers ran), ddof, groups of one."""

import numpy as np
import pytest
from tests.credit.credit_testlib import traj

from creditflow.credit import CreditError, compute, knob_model, score, score_arrays, validate_knobs
from creditflow.credit.graph import bellman_max, propagate, reverse_bfs, value_iteration


def two_rollouts():
    """gamma 0.5. Won: A -(r 0)-> B -(r 10)-> S. Lost (one step longer): A -(r -1)-> C -(0)-> D -(0)-> E."""
    won = traj(["A", "B", "S"], rewards=[0, 10], success=True, traj_id="won")
    lost = traj(["A", "C", "D", "E"], rewards=[-1, 0, 0], traj_id="lost")
    return [won, lost]


def fields(trajs, name):
    return [getattr(s, name) for t in trajs for s in t.steps]


def test_official_preset_by_hand():
    trajs = two_rollouts()
    compute("rewardflow", trajs, gamma=0.5, preset="official")
    # node values: sweeps from the entering env rewards A=0, B=0, S=10, C=-1, D=0, E=0
    #   sweep 1: B = max(0, .5*10) = 5, C = max(-1, .5*0) = 0; sweep 2: A = .5*5 = 2.5; then fixed
    assert fields(trajs, "process_reward") == [2.5, 5.0, 2.5, 0.0, 0.0]
    # Eq. 4 on those values
    assert fields(trajs, "step_reward") == [2.5, 5.0, -2.5, 0.0, 0.0]
    # state groups with mean_norm: A {2.5, -2.5} -> +-2.5; B, C, D singletons -> 0
    # trajectory term: summed env return (10, -1) against its mean over the group's 5 steps, (20 - 3) / 5 = 3.4
    a_traj = [10 - 3.4] * 2 + [-1 - 3.4] * 3
    np.testing.assert_allclose(fields(trajs, "advantage"), np.add([2.5, 0, -2.5, 0, 0], a_traj), rtol=1e-12)


def test_paper_preset_is_the_default_and_differs():
    paper, official = two_rollouts(), two_rollouts()
    compute("rewardflow", paper, gamma=0.5)
    compute("rewardflow", official, gamma=0.5, preset="official")
    assert fields(paper, "process_reward") == [0.25, 0.5, 0.25, 0.0, 0.0]  # Eq. 3: gamma ** d
    s = 1 / np.sqrt(2)  # +-0.25 and success {1, 0}, sample std: +-1/sqrt(2) at both levels
    np.testing.assert_allclose(fields(paper, "advantage"), [2 * s, s, -2 * s, -s, -s], rtol=1e-5)  # eps 1e-6
    gap = np.abs(np.subtract(fields(official, "advantage"), fields(paper, "advantage"))).max()
    assert gap > 5  # the two readings are far apart on env rewards like ALFWorld's 10 * won


def test_explicit_knobs_win_over_the_preset():
    knobs = validate_knobs("rewardflow", {"preset": "official", "normalize": "std"}).resolved()
    assert (knobs.node_init, knobs.normalize, knobs.reward_source, knobs.traj_stats) == \
        ("env_reward", "std", "return", "steps")
    cli = validate_knobs("rewardflow", {"preset": "official", "reward_source": "success"}, strings=True).resolved()
    assert cli.reward_source == "success" and cli.traj_stats == "steps"
    with pytest.raises(CreditError, match="distance=mean needs node_init=success"):
        validate_knobs("rewardflow", {"preset": "official", "distance": "mean"})


def test_gigpo_official_preset_takes_episode_stats_across_steps():
    trajs = two_rollouts()
    compute("gigpo", trajs, preset="official", gamma=0.5)
    # A_E: summed return (10, -1) minus its mean over the 5 steps (3.4); A_S: mean_norm within anchor groups
    # (A holds both rollouts' first steps: discounted returns 5 and -1 -> +-3; the rest are singletons)
    np.testing.assert_allclose(fields(trajs, "advantage"), [6.6 + 3, 6.6, -4.4 - 3, -4.4, -4.4], rtol=1e-12)


def test_gigpo_official_preset_equals_verl_agents_functions_with_its_invalid_penalty():
    """verl-agent's compute_step_discounted_returns, apply_invalid_action_penalty (0.1) and
    compute_gigpo_outcome_advantage (mean_norm) on these batches, run in a working session (2026-12-06;
    benchmarks/results/graphgpo_official_check.json has all 48 checks: 2.7e-14 at float64)."""
    from tests.credit.test_graphgpo_official import all_fail, shared_invalid

    for make, want in [(shared_invalid, [13.845833, 12.5125, -5.654167, -2.454167, -7.4875, -5.654167, -2.654167,
                                         -2.454167]),
                       (all_fail, [0.042222, -0.144444, 0.055556, 0.042222, 0.022222, 0.042222, 0.055556, -0.157778,
                                   0.042222])]:
        trajs = make()
        compute("gigpo", trajs, preset="official", reward_source="return")
        np.testing.assert_allclose(fields(trajs, "advantage"), want, atol=1e-6)
    # by hand, shared_invalid's invalid row C -> C (g/2, step 1): its step return 0.95 * 0 - 0.1 = -0.1 against
    # A_S's group C {C->B 0.95 * 0 = 0 (g/1), -0.1, C->E 0}: mean -1/30 -> -0.0667; A_E: 0 - 0.1 against the mean
    # of the 8 rows' scores (10, 10, 0, 0, 0, 0, -0.1, 0: 2.4875) -> -2.5875; together -2.654167
    trajs = shared_invalid()
    compute("gigpo", trajs, preset="official", reward_source="return")
    assert fields(trajs, "advantage")[6] == pytest.approx(-0.1 + 1 / 30 - 2.5875, abs=1e-12)


@pytest.mark.parametrize("ddof, want", [(0, np.sqrt(2)), (1, 2 / np.sqrt(3))])
def test_grpo_ddof(ddof, want):
    trajs = [traj(["A", "B"], success=s, traj_id=str(i)) for i, s in enumerate([True, False, False])]
    compute("grpo", trajs, reward_source="success", ddof=ddof, eps=0.0)
    assert trajs[0].steps[0].advantage == pytest.approx(want)  # 1.414 (CRPS Eq. 4) vs 1.155 (verl)


def test_grpo_default_is_the_sample_std_as_trl_and_verl():
    """Issue 74: one std convention per estimator; GRPO's is TRL's and verl's (torch.std, unbiased)."""
    trajs = [traj(["A", "B"], success=s, traj_id=str(i)) for i, s in enumerate([True, False, False])]
    compute("grpo", trajs, reward_source="success", eps=0.0)
    assert trajs[0].steps[0].advantage == pytest.approx(2 / np.sqrt(3))  # (1 - 1/3) / sqrt(1/3), 1/(G-1)
    arrays = score_arrays("grpo", group_ids=[0, 0, 0], traj_ids=[0, 1, 2], step_index=[0, 0, 0],
                          state_keys=["s", "s", "s"], rewards=[1.0, 0.0, 0.0], success=[True, False, False], eps=0.0)
    np.testing.assert_allclose(arrays, [2 / np.sqrt(3), -1 / np.sqrt(3), -1 / np.sqrt(3)], rtol=1e-12)


@pytest.mark.parametrize("name", ["grpo", "gigpo", "rewardflow", "graphgpo", "g2po", "gagpo"])
def test_every_estimator_that_divides_by_a_std_defaults_to_the_sample_std(name):
    """The one convention every path (compute, score, score_arrays, the trainer, TRL, verl, SkyRL) takes from the
    knob model: none of them overrides it (docs/methods.md's table says where a peer differs)."""
    assert knob_model(name).model_fields["ddof"].default == 1


@pytest.mark.parametrize("name", ["grpo", "rloo", "gigpo", "rewardflow", "gagpo"])
@pytest.mark.parametrize("ddof", [0, 1])
def test_a_group_of_one_rollout_gets_zero(name, ddof):
    knobs = {} if name == "rloo" else {"ddof": ddof}
    scored = score([traj(["A", "B", "S"], rewards=[1, 3], success=True)], estimator=name,
                   reward_source="success", **knobs)
    assert fields(scored, "advantage") == [0.0, 0.0]


def naive_sweeps(init, src, dst, gamma, sweeps):
    """The official loop, node by node."""
    value = list(init)
    succ = {}
    for u, v in zip(src, dst):
        succ.setdefault(u, []).append(v)
    for _ in range(sweeps):
        new = list(value)
        for u, vs in succ.items():
            new[u] = max([value[u]] + [gamma * value[v] for v in vs])
        value = new
    return value


@pytest.mark.parametrize("seed", range(6))
def test_bellman_max_is_the_official_loop(seed):
    rng = np.random.default_rng(seed)
    n = 30
    src, dst = rng.integers(0, n, 70), rng.integers(0, n, 70)
    init = np.where(rng.random(n) < 0.3, rng.normal(0, 3, n), 0.0)  # some negative: entering step costs
    for sweeps in (0, 1, 3, 40):
        want = naive_sweeps(init, src, dst, 0.9, sweeps)
        np.testing.assert_array_equal(bellman_max(init, src, dst, 0.9, sweeps), want)


def test_value_iteration_from_one_zero_is_bfs():
    src, dst = np.array([0, 1, 2, 3]), np.array([1, 2, 3, 1])
    np.testing.assert_allclose(value_iteration(5, src, dst, [2], 0.5), propagate(reverse_bfs(5, src, dst, [2]), 0.5))
