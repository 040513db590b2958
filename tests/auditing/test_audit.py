"""The credit audit: Monte-Carlo ground truth, the metrics, the race's power, the arms from the registry, bad input."""

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import creditflow
from creditflow.auditing import AuditError, AuditSettings, audit
from creditflow.auditing import metrics as mt
from creditflow.auditing.accuracy import true_advantages
from creditflow.auditing.estimators import arms, reads_state
from creditflow.auditing.policy import EpsilonExpert, Tabular, ppo_clip_step
from creditflow.auditing.race import RaceSettings, race_run
from creditflow.auditing.sim import Sim
from creditflow.credit import registry
from creditflow.credit.grpo import GRPOKnobs, grpo
from tests.auditing.chain import ChainEnv, FreeTextChain, SnapshotChain, exact_q

TINY = dict(seeds=2, epsilons=(0.5,), tasks=2, group_size=4, m=8, race_seeds=2, race_pool=2, race_groups=2,
            race_episodes=16, rro_m=2, rro_truth_m=8)


# --------------------------------------------------------------------------------------------------
# Monte-Carlo ground truth
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("env_cls", [SnapshotChain, ChainEnv])  # restored by snapshot, and by verified replay
def test_mc_q_and_v_match_the_closed_form_within_3_se(env_cls):
    n, steps, eps = 4, 7, 0.6
    sim = Sim(lambda: env_cls(n=n, max_steps=steps))
    policy = EpsilonExpert(eps)  # π(right) = 1 - eps/2 everywhere below n
    q, v = exact_q(n, steps, lambda pos: 1 - eps / 2)
    episodes = sim.groups([0], 4, policy, np.random.default_rng(0))
    m = 400
    truth = true_advantages(sim, episodes, m, policy, np.random.default_rng(1))
    rows = [(s.node, s.action) for ep in episodes for s in ep.steps]
    assert len(rows) >= 8
    for (node, action), q_hat, v_hat in zip(rows, truth["q"], truth["v"]):
        pos, t = int(node.key), node.t
        for est, exact in ((q_hat, q(pos, t, action)), (v_hat, v(pos, t))):
            se = max(np.sqrt(exact * (1 - exact) / m), 1e-12)
            assert abs(est - exact) <= 3 * se + 1e-12, (pos, t, action, est, exact)


def test_restoring_by_snapshot_copies_nothing_but_the_snapshot():
    sim = Sim(lambda: SnapshotChain())
    episodes = sim.groups([0], 2, EpsilonExpert(1.0), np.random.default_rng(0))
    node = episodes[0].steps[1].node
    assert node.snap == (int(node.key), 1, False)  # the state itself, stored as the env gave it
    sim.run([(node, "right")] * 3, EpsilonExpert(1.0), np.random.default_rng(0))
    assert node.snap == (int(node.key), 1, False)  # restore left it reusable


# --------------------------------------------------------------------------------------------------
# metrics on hand-made advantages
# --------------------------------------------------------------------------------------------------


def test_spearman_by_hand():
    assert mt.spearman([1, 2, 3], [10, 20, 30]) == pytest.approx(1.0)
    assert mt.spearman([3, 2, 1], [10, 20, 30]) == pytest.approx(-1.0)
    # ranks (1, 2.5, 2.5) vs (1, 2, 3): centred (-1, .5, .5)·(-1, 0, 1) = 1.5; squared norms 1.5 and 2
    assert mt.spearman([0, 1, 1], [1, 2, 3]) == pytest.approx(1.5 / np.sqrt(1.5 * 2))
    assert mt.spearman([1, 1, 1], [1, 2, 3]) == 0.0


def test_sign_agreement_counts_resolved_steps_and_zero_as_a_miss():
    a, se = [0.5, -0.5, 0.01, -0.4], [0.1, 0.1, 0.1, 0.1]  # the third is within 2 SE: left out
    assert mt.sign_agreement([1.0, 1.0, 5.0, 0.0], a, se) == pytest.approx(1 / 3)  # +, wrong, (out), zero
    assert mt.sign_agreement([1.0, -1.0, 5.0, -2.0], a, se) == 1.0
    assert np.isnan(mt.sign_agreement([1.0], [0.01], [0.1]))


def test_auc_is_the_mann_whitney_share_with_half_ties():
    a, se = [0.5, 0.6, -0.5, -0.7], [0.1] * 4
    # positives' advantages 3, 2; negatives' 1, 2: 3>1, 3>2, 2>1, 2=2 (half) -> 3.5 / 4
    assert mt.auc([3.0, 2.0, 1.0, 2.0], a, se) == pytest.approx(0.875)
    assert mt.auc([-1.0, -2.0, 1.0, 2.0], a, se) == 0.0
    assert np.isnan(mt.auc([1.0, 2.0], [0.5, 0.6], [0.1, 0.1]))  # no negative step


def test_within_state_compares_steps_that_share_a_state():
    groups = ["g", "g", "g", "g", "h"]
    keys = ["s", "s", "s", "x", "s"]  # three steps share (g, s); (g, x) and (h, s) are alone
    a = [0.9, 0.1, 0.5, -0.9, 0.0]
    se = [0.05] * 5
    right = mt.within_state([3.0, 1.0, 2.0, 9.0, -9.0], a, se, groups, keys)
    assert right["steps"] == 3 and right["pairs"] == 3
    assert right["sign"] == 1.0 and right["auc"] == 1.0 and right["spearman"] == pytest.approx(1.0)
    tied = mt.within_state([1.0, 1.0, 1.0, 0.0, 0.0], a, se, groups, keys)
    assert tied["sign"] == 0.0 and tied["auc"] == 0.5  # no ordering: ties miss the sign, count half in the AUC
    alone = mt.within_state([1.0, 2.0], [0.5, 0.1], [0.01, 0.01], ["g", "g"], ["a", "b"])
    assert alone["steps"] == 0 and np.isnan(alone["sign"])


def test_rankdata_averages_ties():
    assert mt.rankdata([10, 20, 20, 5]).tolist() == [2.0, 3.5, 3.5, 1.0]


# --------------------------------------------------------------------------------------------------
# the race can tell good credit from bad
# --------------------------------------------------------------------------------------------------


def _true_advantage(n, steps):
    def fn(episodes, policy: Tabular):
        def p_right(pos):
            r = policy.row((0, str(pos)), ["left", "right"])  # rows are keyed by (task seed, state_key)
            return float(policy.table_probs(np.array([r]))[0, policy.actions[r].index("right")])

        q, v = exact_q(n, steps, p_right)
        return np.array([q(int(s.node.key), s.node.t, s.action) - v(int(s.node.key), s.node.t)
                         for ep in episodes for s in ep.steps])
    return fn


def test_a_50_seed_race_separates_true_advantages_from_random_ones():
    n, steps = 5, 8
    sim = Sim(lambda: SnapshotChain(n=n, max_steps=steps))
    settings = RaceSettings(pool=[0], groups=1, group_size=4, episodes=48, lr=1.0, eval_every=1)
    noise = np.random.default_rng(123)
    random_adv = lambda episodes, policy: noise.normal(size=sum(len(ep.steps) for ep in episodes))  # noqa: E731
    good = [race_run(sim, None, s, settings, advantage_fn=_true_advantage(n, steps))["auc"] for s in range(50)]
    bad = [race_run(sim, None, s, settings, advantage_fn=random_adv)["auc"] for s in range(50)]
    diff = np.array(good) - np.array(bad)
    lo, hi = mt.bootstrap_interval(diff)
    assert lo > 0, (np.mean(good), np.mean(bad), lo, hi)


def test_ppo_clip_step_is_the_policy_gradient_then_stops_at_the_clip():
    pol = Tabular()
    r = pol.row("s", ["a", "b"])
    ppo_clip_step(pol, np.array([r]), np.array([0]), np.array([1.0]), np.array([1.0]), lr=0.1, epochs=1)
    # d/dθ log π(a) = onehot(a) - π = (0.5, -0.5) at θ = 0
    assert pol.logits[r, :2].tolist() == pytest.approx([0.05, -0.05])
    pol2 = Tabular()
    r = pol2.row("s", ["a", "b"])
    ppo_clip_step(pol2, np.array([r]), np.array([0]), np.array([1.0]), np.array([1.0]), lr=100.0, epochs=5)
    # the first step pushes π(a) far above 1.2 π_old: every later epoch is clipped, nothing moves any more
    assert pol2.logits[r, :2].tolist() == pytest.approx([50.0, -50.0])


# --------------------------------------------------------------------------------------------------
# arms come from the registry; the whole audit on a tiny budget
# --------------------------------------------------------------------------------------------------


@pytest.fixture
def extra_estimator():
    registry.register_estimator("zz_test_grpo", knobs=GRPOKnobs)(grpo)
    yield "zz_test_grpo"
    registry._ESTIMATORS.pop("zz_test_grpo")


def test_every_registered_estimator_and_preset_is_an_arm(extra_estimator):
    names = [a.name for a in arms()]
    assert extra_estimator in names
    for name in registry.estimator_names():
        assert name in names
        model = registry.knob_model(name)
        for preset in model.presets:
            assert f"{name}_{preset}" in names
    assert not reads_state(next(a for a in arms() if a.name == extra_estimator))


def test_audit_runs_the_four_parts_and_a_new_estimator_joins_them(extra_estimator):
    result = audit(lambda: SnapshotChain(n=3, max_steps=5), settings=AuditSettings(**TINY))
    rec = result.record
    (label,) = rec["accuracy"]
    seed0 = rec["accuracy"][label][0]
    assert set(seed0["accuracy"]["arms"]) == {a.name for a in arms()}
    assert extra_estimator in seed0["coverage"]["at_trajectory_level"]
    assert {f"{extra_estimator}", "grpo+crps", "grpo+expreplay"} <= set(rec["race"])
    assert set(rec["rro"][label][0]) >= {"rising", "fixed"}
    text = "\n".join(result.lines())
    assert "reading:" in text and "race" in text and "rising − fixed" in text
    json.dumps(rec)  # a record is plain JSON


def test_an_arm_runs_with_the_knobs_given_for_it():
    """settings.knobs (arm -> knob values): GraphGPO at the omega of the authors' Sokoban script, its other arm
    and every other estimator untouched."""
    knobs = {"graphgpo": {"omega": 0.8}}
    by_name = {a.name: a for a in arms(knobs=knobs)}
    assert by_name["graphgpo"].knobs == {"omega": 0.8}
    assert by_name["graphgpo_reproduction"].knobs == {"preset": "reproduction"}
    assert by_name["gigpo"].knobs == {}
    base = audit(lambda: SnapshotChain(n=3, max_steps=5), settings=AuditSettings(**{**TINY, "parts": ("accuracy",)}))
    tuned = audit(lambda: SnapshotChain(n=3, max_steps=5),
                  settings=AuditSettings(**{**TINY, "parts": ("accuracy",), "knobs": knobs}))
    (label,) = base.record["accuracy"]
    a, b = (r.record["accuracy"][label][0]["accuracy"]["arms"] for r in (base, tuned))
    assert a["gigpo"] == b["gigpo"] and a["graphgpo_reproduction"] == b["graphgpo_reproduction"]
    assert tuned.record["settings"]["knobs"] == knobs


@pytest.mark.parametrize("knobs,needle", [({"graphgpx": {"omega": 0.8}}, "unknown arm 'graphgpx'"),
                                          ({"graphgpo": {"omega": 2}}, r"knobs\['graphgpo'\]: knob omega must be"),
                                          ({"graphgpo": 0.8}, "must be a mapping")])
def test_bad_arm_knobs_are_one_audit_error(knobs, needle):
    with pytest.raises(AuditError, match=needle) as info:
        audit(lambda: SnapshotChain(), settings=AuditSettings(**{**TINY, "knobs": knobs}))
    assert "\n" not in str(info.value)


def test_api_audit_takes_env_names_and_options():
    result = creditflow.audit("sokoban", env_options={"size": 5}, parts=("coverage",), seeds=1, tasks=1,
                              group_size=2, epsilons=(0.5,))
    assert result.record["accuracy"]["eps=0.5"][0]["coverage"]["steps"] > 0


# --------------------------------------------------------------------------------------------------
# bad input: one line
# --------------------------------------------------------------------------------------------------


class NeverActs:
    name = "never"

    def act(self, items, rng):
        return [None for _ in items]


@pytest.mark.parametrize("kwargs,needle", [
    (dict(settings=AuditSettings(**{**TINY, "m": 0})), "must be at least 1, got 0"),
    (dict(settings=AuditSettings(**{**TINY, "estimators": ["nope"]})), "unknown estimator 'nope'"),
    (dict(settings=AuditSettings(**{**TINY, "parts": ("accuracy",)}), policy=NeverActs()), "took no admissible"),
])
def test_bad_input_is_one_audit_error(kwargs, needle):
    with pytest.raises(AuditError, match=needle) as info:
        audit(lambda: SnapshotChain(), **kwargs)
    assert "\n" not in str(info.value)


def test_an_env_that_cannot_restore_is_one_audit_error():
    with pytest.raises(AuditError, match="cannot restore a state"):
        audit(lambda: ChainEnv(slip=0.5), settings=AuditSettings(**{**TINY, "parts": ("accuracy",)}))


def _cli(*args, cwd=None):
    proc = subprocess.run([sys.executable, "-m", "creditflow", "audit", *args], capture_output=True, text=True,
                          cwd=cwd, timeout=300)
    return proc.returncode, proc.stderr


@pytest.mark.parametrize("args,needle", [
    (["--mc", "0"], "must be at least 1, got 0"),
    (["--estimators", "nope"], "unknown estimator 'nope'"),
    (["--env", "slipchain:Slippery", "--parts", "accuracy", "--seeds", "1", "-M", "2"], "cannot restore a state"),
    (["--env", "webshop", "--parts", "coverage", "--seeds", "1"], "free-text step): give the audit a menu"),
    (["--env", "webshop", "--model", "no/such/dir", "--parts", "coverage"], "no/such/dir"),
    (["--env", "webshop", "--menu-size", "0"], "menu_size"),
])
def test_cli_bad_input_is_one_line_exit_2(tmp_path, args, needle):
    (tmp_path / "slipchain.py").write_text(
        "from tests.auditing.chain import ChainEnv\n\n\nclass Slippery(ChainEnv):\n"
        "    def __init__(self):\n        super().__init__(slip=0.5)\n")
    import os
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), *sys.path])}
    proc = subprocess.run([sys.executable, "-m", "creditflow", "audit", *args], capture_output=True, text=True,
                          cwd=tmp_path, timeout=300, env=env)
    lines = [line for line in proc.stderr.strip().splitlines() if line.strip() and not line.startswith(("coverage",
                                                                                                     "accuracy"))]
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr and len(lines) == 1 and needle in lines[0], proc.stderr


# --------------------------------------------------------------------------------------------------
# free-text states: menus of candidate actions
# --------------------------------------------------------------------------------------------------


def test_free_text_states_choose_from_a_menu_kept_per_state():
    calls = []

    def menu(seed, actions, observations, observation, info, env):
        calls.append((seed, info["state_key"], len(actions), len(observations), observation))
        assert len(observations) == len(actions) and observation == env._obs()
        return ["right", "left", "shout", "right"]  # duplicates are kept once; "shout" is an invalid no-op

    sim = Sim(lambda: FreeTextChain(n=4, max_steps=6), menu=menu)
    episodes = sim.groups([0, 1], 4, EpsilonExpert(0.5), np.random.default_rng(0))
    keys = [(c[0], c[1]) for c in calls]
    assert len(keys) == len(set(keys)) and {(0, "0"), (1, "0")} <= set(keys)  # asked once per (seed, state)
    free = [s for ep in episodes for s in ep.steps if int(s.node.key) % 2 == 0]
    assert free and all(s.node.admissible == ("right", "left", "shout") for s in free)
    assert all(s.action in s.node.admissible for s in free)
    truth = true_advantages(sim, episodes, 16, EpsilonExpert(0.5), np.random.default_rng(1))
    assert len(truth["q"]) == sum(len(ep.steps) for ep in episodes)
    with pytest.raises(AuditError, match="free-text step"):
        Sim(lambda: FreeTextChain()).groups([0], 2, EpsilonExpert(0.5), np.random.default_rng(0))
    with pytest.raises(AuditError, match="gave no action"):
        Sim(lambda: FreeTextChain(), menu=lambda *a: []).groups([0], 2, EpsilonExpert(0.5), np.random.default_rng(0))


def test_webshop_audit_with_a_model_menu(tiny_model_dir):
    """WebShop's search page is free text: with ``model=`` the ε-expert chooses among the model's sampled
    queries plus the expert's, and the audit runs to its accuracy numbers."""
    result = creditflow.audit("webshop", model=tiny_model_dir, menu_size=2, overrides=["generation.max_new_tokens=8"],
                              parts=("coverage", "accuracy"), seeds=1, tasks=1, group_size=2, m=2, epsilons=(0.5,))
    (seed,) = result.record["accuracy"]["eps=0.5"]
    assert seed["coverage"]["groups"] == 1 and seed["accuracy"]["steps"] > 0
    assert any(line.startswith("accuracy vs Monte-Carlo") for line in result.lines(verbose=True))
    assert any(line.startswith("accuracy (eps=0.5, 1 seeds") for line in result.lines())


# --------------------------------------------------------------------------------------------------
# the output: short, a reading that names the cause, and a one-line verdict (issue 90)
# --------------------------------------------------------------------------------------------------

from creditflow.auditing.coverage import reading  # noqa: E402
from creditflow.auditing.run import Ranking, rank, race_verdict, ranking_phrase, verdict_line  # noqa: E402

EXAMPLE_ENV = Path(__file__).resolve().parents[2] / "examples" / "my_first_env"


def test_the_own_env_audit_is_short_and_ends_with_a_one_line_verdict(tmp_path):
    """The example plug-in env through the command: a line or two per part and policy, then the verdict naming the
    arm closest to A^π; --verbose adds every arm's metrics and paired differences, the same verdict last."""
    import os

    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(EXAMPLE_ENV), *sys.path])}
    args = [sys.executable, "-m", "creditflow", "audit", "--env", "my_first_env:ReachEnv", "--seeds", "5",
            "--epsilon", "0.5,1", "--race-seeds", "3", "--race-episodes", "64", "-M", "8",
            "--estimators", "grpo,gigpo,rewardflow,graphgpo", "--out", str(tmp_path / "audit.json")]
    short = subprocess.run(args, capture_output=True, text=True, env=env, timeout=600)
    assert short.returncode == 0, short.stderr
    lines = short.stdout.strip().splitlines()
    assert len(lines) <= 14, short.stdout  # coverage + reading + accuracy per policy, 2 race lines, RRO, the verdict
    verdict = lines[-1]
    record = json.loads((tmp_path / "audit.json").read_text())
    assert verdict == verdict_line(record)
    for p in ("eps=0.5", "eps=1"):  # one verdict per behaviour policy, never pooled over policies
        best = max(["grpo", "gigpo", "rewardflow", "graphgpo"], key=lambda n: np.mean(
            [record["accuracy"][p][i]["accuracy"]["arms"][n]["spearman"] for i in range(5)]))
        assert f"{p}: closest to A^π: {best} (Spearman " in verdict
    assert sum(line.startswith("accuracy (eps=") for line in lines) == 2 and "race: " in verdict
    verbose = subprocess.run([*args, "--verbose"], capture_output=True, text=True, env=env, timeout=600)
    assert verbose.returncode == 0 and verbose.stdout.strip().splitlines()[-1] == verdict
    assert "paired differences of spearman" in verbose.stdout and len(verbose.stdout.splitlines()) > 3 * len(lines)


def _coverage(**over):
    cov = {"shared": 0.91, "mixed_groups": 0.0, "no_success_groups": 1.0, "all_success_groups": 0.0,
           "path_to_success": 0.0, "reads_state": {"grpo": False, "rewardflow": True, "gigpo": True},
           "at_trajectory_level": {"grpo": 1.0, "rewardflow": 1.0, "gigpo": 1.0}}
    return {**cov, **over}


def test_the_reading_names_the_real_cause_when_groups_do_not_mix():
    """No group succeeded while 91% of steps share a state: the cause is the policy or the task, not state_key; and
    "every step", never "100% of steps or more"."""
    text = reading(_coverage())
    assert text.startswith("no rollout succeeded in 100% of groups: the policy is too weak for these tasks; lower ε")
    assert "state_key" not in text and "on every step (91% of steps share a state)" in text
    assert "or more" not in text
    text = reading(_coverage(no_success_groups=0.0, all_success_groups=1.0))
    assert "every rollout succeeded in 100% of groups: the tasks are too easy" in text and "raise ε" in text
    text = reading(_coverage(mixed_groups=0.8, no_success_groups=0.1, shared=0.05,
                             at_trajectory_level={"grpo": 1.0, "rewardflow": 0.97, "gigpo": 0.99}))
    assert "on at least 97% of steps here (only 5% of steps share a state" in text and "coarser function" in text
    old = _coverage(success=0.0)  # a record of an earlier release: no outcome shares, the pooled success tells
    del old["no_success_groups"], old["all_success_groups"]
    assert reading(old).startswith("no rollout succeeded in 100% of groups")


def test_the_verdict_ranks_by_paired_differences():
    values = {"rewardflow": [0.44, 0.46, 0.42, 0.45, 0.43], "graphgpo": [0.45, 0.40, 0.43, 0.41, 0.42],
              "gigpo": [0.20, 0.22, 0.18, 0.21, 0.19], "grpo": [0.10, 0.12, 0.09, 0.11, 0.10]}
    r = rank(values)
    assert [n for n, _ in r.leaders] == ["rewardflow", "graphgpo"] and [n for n, _ in r.behind] == ["gigpo", "grpo"]
    assert ranking_phrase(r, "Spearman") == ("rewardflow (Spearman 0.44) and graphgpo (0.42), ahead of gigpo and "
                                              "grpo, separated over 5 seeds")
    assert "separates nothing" in ranking_phrase(Ranking([("grpo", 0.1)], [], 1), "Spearman")
    assert "no arm separated" in ranking_phrase(rank({"a": [0.1, 0.3], "b": [0.3, 0.1]}), "AUC")


def test_the_race_says_when_no_arm_learned_or_the_pool_is_solved_before_training():
    flat = {"curve": [[0, 0.0], [32, 0.0]], "auc": 0.0}
    assert race_verdict({"grpo": [flat] * 3, "rewardflow": [{**flat, "auc": 0.02}] * 3}, 1280).startswith(
        "no arm learned (AUC ≤ 0.02 for every arm in 1280 episodes)")
    solved = {"curve": [[0, 1.0], [32, 1.0]], "auc": 1.0}
    assert "already solves 100% of the pool" in race_verdict({"grpo": [solved] * 3, "gigpo": [solved] * 3})
    seeds = [{**flat, "seed": i} for i in range(3)]  # records name each run's seed (the race pairs them by it)
    record = {"accuracy": {}, "rro": {}, "settings": {"race_episodes": 64}, "race": {"grpo": seeds, "gigpo": seeds}}
    assert verdict_line(record) == "verdict: race: no arm learned (AUC ≤ 0.02 for every arm in 64 episodes)"


def test_no_success_anywhere_is_the_verdict_not_a_ranking():
    seed = {"success": 0.0, "accuracy": {"steps": 10, "arms": {"grpo": {"spearman": 0.0},
                                                               "rewardflow": {"spearman": 0.01}}}}
    record = {"accuracy": {"eps=0.9": [seed] * 3}, "race": {}, "rro": {}}
    assert verdict_line(record).startswith("verdict: eps=0.9: no rollout succeeded, so no arm's credit can be compared")


def test_a_race_curve_reports_its_area_after_the_start_its_end_and_when_it_first_reached_the_threshold():
    from creditflow.auditing.race import curve_summary

    curve = [[0, 0.1], [5, 0.25], [10, 0.5], [15, 0.75]]
    assert curve_summary(curve, 0.5) == {"auc": pytest.approx(0.5), "final": 0.75, "reached_at": 10}
    assert curve_summary(curve, 0.6)["reached_at"] == 15 and curve_summary(curve, 0.8)["reached_at"] is None
    assert curve_summary([[0, 0.9], [5, 0.2]], 0.5) == {"auc": 0.2, "final": 0.2, "reached_at": 0}  # the start counts
    with pytest.raises(AuditError, match="at least one point after it"):
        curve_summary([[0, 0.1]])
