"""Issue 85, a fair audit: the Monte Carlo on a branching env with dead ends and a per-state policy; behaviour
policies that favour no estimator (the detour expert's value is no function of distance, tabular snapshots hit
their success, the LM samples through the engine and repeats by seed); bias apart from noise worked by hand; the
race tuned on seeds apart from the reported ones, on fresh pools, rows keyed by (task, state); verdicts per policy
with "not resolved" cells; bad input in one line."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

import creditflow
from creditflow.auditing import AuditError, AuditSettings, audit
from creditflow.auditing.accuracy import true_advantages
from creditflow.auditing.bias import bias_noise_metrics
from creditflow.auditing.policy import DetourExpert, EpsilonExpert, TabularSnapshot, Tabular
from creditflow.auditing.race import SnapshotTrainer, best_rates, check_pools, pool_of
from creditflow.auditing.run import policies, race_rates
from creditflow.auditing.sim import Sim
from creditflow.auditing.summary import accuracy_verdict, fair_lines
from tests.auditing.chain import SnapshotChain
from tests.auditing.grid import GridEnv, TablePolicy, exact, key_of

TINY = dict(seeds=2, epsilons=(0.5,), tasks=2, group_size=4, m=8, race_seeds=2, race_pool=2, race_groups=2,
            race_episodes=16, rro_m=2, rro_truth_m=8)


# --------------------------------------------------------------------------------------------------
# the Monte Carlo against dynamic programming on a branching env with dead ends
# --------------------------------------------------------------------------------------------------


def test_mc_advantages_match_dynamic_programming_and_their_standard_errors_are_calibrated():
    env = GridEnv()
    policy = TablePolicy(GridEnv(), seed=1)
    q, v = exact(GridEnv(), policy)
    assert 0.2 < v((0, 0), 0) < 0.8  # success neither rare nor sure: groups mix, A^π is not degenerate
    sim = Sim(lambda: GridEnv())
    episodes = sim.groups([0] * 6, 8, policy, np.random.default_rng(0))
    m = 200
    truth = true_advantages(sim, episodes, m, policy, np.random.default_rng(1))
    steps = [s for ep in episodes for s in ep.steps]
    assert len(steps) >= 150 and len({s.node.key for s in steps}) >= 8  # many states, dead ends among the moves
    cells = [tuple(map(int, s.node.key.split(","))) for s in steps]
    a = np.array([q(c, s.node.t, s.action) - v(c, s.node.t) for c, s in zip(cells, steps)])
    z = (truth["a"] - a) / truth["se"]
    assert np.mean(np.abs(z) <= 3) >= 0.97, np.mean(np.abs(z) <= 3)
    assert any(env.move(c, s.action) in env.pits for c, s in zip(cells, steps))  # some steps fell into a dead end
    # calibration where the truth is not degenerate (Q and V strictly between 0 and 1: a sure outcome has no spread)
    live = np.array([0 < q(c, s.node.t, s.action) < 1 and 0 < v(c, s.node.t) < 1 for c, s in zip(cells, steps)])
    assert live.sum() >= 100
    spread = float(np.std(z[live]))
    assert 0.8 <= spread <= 1.2, spread


# --------------------------------------------------------------------------------------------------
# behaviour policies that favour no estimator
# --------------------------------------------------------------------------------------------------


def _values_by_distance(policy, max_steps=12):
    env = GridEnv(size=5, pits=((1, 1), (3, 2)), max_steps=max_steps)
    _, v = exact(GridEnv(size=5, pits=((1, 1), (3, 2)), max_steps=max_steps), policy)
    cells = [c for c in env.cells() if c not in env.pits and c != env.goal and env.distance(c) is not None]
    return [(env.distance(c), v(c, 0)) for c in cells], v((0, 0), 0)


def test_the_epsilon_experts_value_falls_with_the_distance_and_the_detour_experts_does_not():
    eps = _values_by_distance(EpsilonExpert(0.2))[0]
    # under the ε-expert no state is worth 0.1 less than a state farther from the goal (pits and walls aside, V^π is
    # a falling function of the distance: what γ^d and ω^d compute)
    assert not [1 for da, va in eps for db, vb in eps if da < db and va < vb - 0.1]
    detour, start = _values_by_distance(DetourExpert(rate=0.5, epsilon=0.1, seed=0))
    inversions = [(da, va, db, vb) for da, va in detour for db, vb in detour if da < db and va < vb - 0.1]
    assert len(inversions) >= 5, "a detour expert whose value still falls with the distance"
    def spread(values):  # the widest range of V^π among states at one distance
        same = {}
        for d, val in values:
            same.setdefault(d, []).append(val)
        return max(max(v) - min(v) for v in same.values())

    assert spread(eps) < 0.15 and spread(detour) > 0.3  # under detours, states at one distance differ widely
    assert start > 0.3  # and it still reaches the goal from the start (8 moves away, 12 steps) often


def test_the_detour_experts_choices_are_markov_and_repeat_in_every_process():
    env = GridEnv(size=5)
    env.reset()
    a, b = DetourExpert(rate=0.5, seed=7), DetourExpert(rate=0.5, seed=7)
    prefs = []
    for pol in (a, b):
        row = []
        for cell in env.cells():
            env.pos = cell
            row.append(pol.preferred(0, key_of(cell), ["up", "down", "left", "right"], env))
        prefs.append(row)
    assert prefs[0] == prefs[1]
    detours = 0
    for cell, pref in zip(env.cells(), prefs[0]):
        env.pos = cell
        if cell != env.goal and cell not in env.pits:
            detours += pref != env.expert_actions()[0]
    assert 5 <= detours <= 17  # about half of the 22 states off the goal and the pits detour
    assert DetourExpert(rate=0.0).label == "detour=0,eps=0.2"
    with pytest.raises(AuditError, match="detour rate must be in"):
        DetourExpert(rate=1.5)


def test_tabular_snapshots_are_frozen_where_their_success_reaches_the_target():
    sim = Sim(lambda: SnapshotChain(n=4, max_steps=6))
    trainer = SnapshotTrainer(lr=0.3, group_size=8, probe=32, targets=(0.5, 0.8))
    tasks = [0, 1]
    rng = np.random.default_rng(5)
    start = float(np.mean(sim.run([(sim.start(t), None) for t in tasks for _ in range(200)], Tabular(), rng)))
    assert start < 0.4  # the untrained (uniform) policy is below both targets
    measured = {}
    for target in (0.5, 0.8):
        pol = TabularSnapshot(target, trainer)
        info = pol.prepare(sim, tasks, seed=0)
        assert info["reached"] and info["episodes"] > 0 and info["probe_success"] >= target
        wins = sim.run([(sim.start(t), None) for t in tasks for _ in range(400)], pol, rng)
        measured[target] = float(np.mean(wins))
        assert abs(measured[target] - target) < 0.15, (target, measured[target], info)
    assert measured[0.8] > measured[0.5]
    assert trainer.snapshot(sim, tasks, 0, 0.5)[1]["episodes"] < trainer.snapshot(sim, tasks, 0, 0.8)[1]["episodes"]
    with pytest.raises(AuditError, match="target success must be in"):
        TabularSnapshot(1.0, trainer)


def test_the_audit_runs_every_built_in_policy_and_records_where_each_snapshot_froze():
    settings = AuditSettings(**{**TINY, "parts": ("coverage", "accuracy"), "policies": ("expert", "uniform", "detour",
                                                                                         "tabular"),
                                "tabular_targets": (0.5,), "seeds": 1})
    result = audit(lambda: SnapshotChain(n=3, max_steps=5), settings=settings)
    assert list(result.record["accuracy"]) == ["eps=0.5", "uniform", "detour=0.5,eps=0.2", "tabular=0.5"]
    (snap,) = result.record["accuracy"]["tabular=0.5"]
    assert snap["policy"]["target"] == 0.5 and "probe_success" in snap["policy"]
    text = "\n".join(result.lines())
    assert "accuracy (tabular=0.5, 1 seeds" in text and "tabular=0.5: frozen after" in text
    assert "behaviour policy tabular=0.5" in "\n".join(result.lines(verbose=True))  # its verdict line


# --------------------------------------------------------------------------------------------------
# the LM as the behaviour policy
# --------------------------------------------------------------------------------------------------


def test_the_lm_policy_samples_every_action_through_the_engine_and_repeats_by_seed(tiny_model_dir):
    from creditflow.recipes.audit import ModelPolicy

    kw = dict(parts=("coverage", "accuracy"), seeds=1, tasks=1, group_size=2, m=2, subsample=3,
              overrides=["generation.max_new_tokens=8"])
    pol = ModelPolicy(tiny_model_dir, ["generation.max_new_tokens=8"], label="lm")
    first = creditflow.audit("sokoban", env_options={"size": 5}, policy=pol, **{k: v for k, v in kw.items()
                                                                                 if k != "overrides"})
    calls = pol.engine.stats.generate_calls
    (seed,) = first.record["accuracy"]["lm"]
    steps = seed["accuracy"]["steps"]
    assert calls >= seed["mean_steps"]  # the groups' turns and every continuation's went through engine.act
    assert seed["accuracy"]["audited"] == min(3, steps)  # the record says how many steps were audited
    assert seed["policy"]["model"].endswith("model") and seed["policy"]["sha256"]
    again = creditflow.audit("sokoban", env_options={"size": 5}, policy_model=tiny_model_dir, **kw)
    (label,) = again.record["accuracy"]
    assert label == "model=model"
    a, b = ({k: v for k, v in x.items() if k not in ("seconds", "policy")} for x in (seed, again.record["accuracy"][label][0]))
    assert json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)  # the same seed: the same samples, numbers


def test_the_lm_policy_writes_free_text_where_the_env_offers_no_actions(tiny_model_dir):
    """WebShop's search page has no admissible actions: the LM writes its own query there (no menu needed), and a
    built-in policy named beside it (policies=) runs too."""
    result = creditflow.audit("webshop", policy_model=tiny_model_dir, overrides=["generation.max_new_tokens=8"],
                              parts=("coverage", "accuracy"), seeds=1, tasks=1, group_size=2, m=1, subsample=2)
    (seed,) = result.record["accuracy"]["model=model"]
    assert seed["coverage"]["groups"] == 1 and seed["accuracy"]["audited"] <= 2
    assert seed["policy"]["generate_calls"] > 0
    with pytest.raises(AuditError, match="free-text step"):  # the ε-expert still needs a menu there
        creditflow.audit("webshop", policy_model=tiny_model_dir, policies=("expert",), parts="coverage", seeds=1,
                         tasks=1, group_size=2)


def test_the_lm_policy_acts_invalidly_as_the_engine_does_and_only_such_a_policy_may():
    from creditflow.auditing.sim import _allowed

    assert _allowed("<invalid>jump", ("up", "down"), free=False, invalid=True)
    assert not _allowed("<invalid>jump", ("up", "down"), free=False, invalid=False)
    assert _allowed("search[red shoes]", (), free=True, invalid=True)
    assert not _allowed("search[red shoes]", (), free=False, invalid=False)


# --------------------------------------------------------------------------------------------------
# bias apart from noise, by hand
# --------------------------------------------------------------------------------------------------


def test_bias_and_noise_by_hand():
    # three (task, state, action) triples; T1 and T2 seen in two rounds, T3 in one (left out)
    triples = ["T1", "T1", "T2", "T1", "T2", "T2", "T3"]
    rounds = [0, 0, 0, 1, 1, 1, 0]
    a = np.array([0.4, 0.4, -0.2, 0.4, -0.2, -0.2, 0.9])  # Â: one estimate per triple
    se = np.array([0.1] * 7)
    estimate = [0, 0, 1, 0, 1, 1, 2]
    credit = {"steady": np.array([1.0, 1.0, -1.0, 1.0, -1.0, -1.0, 5.0]),
              "noisy": np.array([2.0, 0.0, -3.0, 0.0, 1.0, 1.0, 0.0]),
              "wrong": np.array([-1.0, -1.0, 1.0, -1.0, 1.0, 1.0, 0.0])}
    out = bias_noise_metrics(triples, rounds, credit, a, se, estimate)
    assert out["triples"] == 2 and out["steps"] == 6
    # Ā(T1) = 0.4, SE = (3 x 0.1) / 3 = 0.1 -> resolved; Ā(T2) = -0.2, SE 0.1 -> |Ā| = 2 SE, not more
    assert out["resolved"] == 1
    steady, noisy, wrong = (out["arms"][k] for k in ("steady", "noisy", "wrong"))
    assert steady["pearson"] == pytest.approx(1.0) and steady["noise_var"] == 0.0 and steady["noise_share"] == 0.0
    # noisy: T1 round means 1, 0 -> c̄ 0.5, var 0.5; T2 round means -3, 1 -> c̄ -1, var 8: mean noise 4.25
    assert noisy["pearson"] == pytest.approx(1.0) and noisy["noise_var"] == pytest.approx(4.25)
    # signal: variance of c̄ (0.5, -1), ddof 1 = 1.125 -> share 4.25 / (4.25 + 1.125)
    assert noisy["signal_var"] == pytest.approx(1.125) and noisy["noise_share"] == pytest.approx(4.25 / 5.375)
    assert wrong["pearson"] == pytest.approx(-1.0) and wrong["spearman"] == pytest.approx(-1.0)


def test_the_bias_part_runs_on_k_groups_of_the_same_tasks():
    result = audit(lambda: SnapshotChain(n=3, max_steps=5),
                   settings=AuditSettings(**{**TINY, "parts": ("bias",), "seeds": 1, "bias_groups": 3}))
    (seed,) = result.record["bias"]["eps=0.5"]
    assert seed["rounds"] == 3 and seed["episodes"] == 3 * TINY["tasks"] * TINY["group_size"]
    assert seed["triples"] > 0 and set(seed["arms"]) >= {"grpo", "rewardflow"}
    assert any(line.startswith("bias apart from noise") for line in result.lines())



def test_the_bias_subsample_estimates_only_repeated_triples_and_keeps_their_credit_numbers():
    def run(**kw):
        result = audit(lambda: SnapshotChain(n=3, max_steps=5),
                       settings=AuditSettings(**{**TINY, "parts": ("bias",), "seeds": 1, "bias_groups": 3, **kw}))
        (seed,) = result.record["bias"]["eps=0.5"]
        return seed

    full, every, two = run(), run(bias_subsample=10_000), run(bias_subsample=2)
    assert "triples_seen" not in full and every["triples_seen"] == full["triples"] > 2
    # the same groups: every repeated triple kept, its credit numbers exact; unrepeated steps cost no estimate
    assert every["triples"] == full["triples"] and every["steps"] == full["steps"]
    assert every["mc_states"] < full["mc_states"]
    for arm, numbers in full["arms"].items():
        assert every["arms"][arm]["noise_var"] == pytest.approx(numbers["noise_var"])
        assert every["arms"][arm]["signal_var"] == pytest.approx(numbers["signal_var"])
    assert two["triples"] == 2 and two["triples_seen"] == full["triples"] and two["mc_states"] < every["mc_states"]

# --------------------------------------------------------------------------------------------------
# a fair race
# --------------------------------------------------------------------------------------------------


def test_race_rows_are_keyed_by_task_and_state():
    pol = Tabular()
    items = [(1, "same key", ("a", "b"), None), (2, "same key", ("a", "b"), None)]
    pol.act(items, np.random.default_rng(0))
    assert len(pol.rows) == 2 and set(pol.rows) == {(1, "same key"), (2, "same key")}


def test_the_rate_is_picked_on_tuning_seeds_and_reported_on_fresh_disjoint_pools():
    assert best_rates({"a": {0.1: [0.2, 0.4], 1.0: [0.5, 0.5]}, "b": {0.3: [0.6], 3.0: [0.6]}}) == {"a": 1.0, "b": 0.3}
    settings = AuditSettings(**{**TINY, "parts": ("race",), "race_arms": ["grpo", "rewardflow"], "race_lrs": (0.3, 3.0),
                                "race_tune_seeds": 2, "race_seeds": 3})
    result = audit(lambda: SnapshotChain(n=3, max_steps=5), settings=settings)
    rec = result.record
    tuned, reported = rec["race_tuning"]["grpo"], rec["race"]["grpo"]
    assert {r["lr"] for r in tuned} == {0.3, 3.0} and len(tuned) == 4
    assert {r["lr"] for r in reported} == {0.3, 3.0, 1.0}  # every grid rate and the common one
    tune_tasks = {t for r in tuned for t in r["pool"]}
    pools = {r["seed"]: tuple(r["pool"]) for r in reported}
    assert len(set(pools.values())) == 3  # a fresh pool per reported seed
    assert not tune_tasks & {t for p in pools.values() for t in p}  # none of a tuning seed's tasks is reported
    # the rate each arm is reported at is the tuning seeds' choice, whatever the reported seeds say
    assert rec["race_rates"] == race_rates(rec["race_tuning"])
    fake = {"grpo": [{**r, "auc": 1.0 if r["lr"] == 3.0 else 0.0} for r in tuned]}
    assert race_rates(fake) == {"grpo": 3.0}
    assert any(line.startswith("race at each arm's own learning rate") for line in result.lines())


def test_pools_that_cannot_be_disjoint_are_one_audit_error():
    assert pool_of(100, 4, -1) == [96, 97, 98, 99] and pool_of(100, 4, 2) == [108, 109, 110, 111]
    check_pools(100_000, 8, 50, 10, None)
    with pytest.raises(AuditError, match="needs 480 distinct tasks"):
        check_pools(100_000, 8, 50, 10, 400)
    check_pools(100_000, 6, 50, 10, 400)  # household's 400 games: pools of 6 fit


# --------------------------------------------------------------------------------------------------
# verdicts per (setting, policy)
# --------------------------------------------------------------------------------------------------


def _seed(resolved, spearman):
    return {"seed": 0, "accuracy": {"resolved": resolved, "arms": {k: {"spearman": v} for k, v in spearman.items()}}}


def test_a_policy_with_too_few_resolved_steps_is_not_resolved_and_ranks_nothing():
    seeds = [_seed(2, {"a": 0.9, "b": 0.1}) for _ in range(20)]
    line = accuracy_verdict("household", "eps=0.5", seeds)
    assert "not resolved" in line and "household" in line and "eps=0.5" in line and "a 0.9" not in line
    rng = np.random.default_rng(0)
    seeds = [{"seed": i, "accuracy": {"resolved": 10, "arms": {"a": {"spearman": 0.6 + 0.01 * rng.normal()},
                                                                "b": {"spearman": 0.3 + 0.01 * rng.normal()},
                                                                "c": {"spearman": 0.3 + 0.01 * rng.normal()}}}}
             for i in range(10)]
    line = accuracy_verdict("sokoban", "uniform", seeds)
    ranking = line.split("closest to A^π by Spearman: ")[1]
    assert ranking.startswith("a 0.") and ranking.split(" ")[2] == ">"  # a first, separated from the next
    assert "≈" in ranking  # b and c are not separated
    record = {"env": "sokoban", "accuracy": {"uniform": seeds, "eps=0.5": [_seed(3, {"a": 1, "b": 0})] * 5},
              "race": {}, "settings": {}}
    lines = fair_lines(record)
    assert len([x for x in lines if x.startswith("verdict")]) == 2  # one per policy, never pooled


# --------------------------------------------------------------------------------------------------
# bad input: one line, exit 2
# --------------------------------------------------------------------------------------------------


class Offers:
    """A policy that takes an action the state does not offer."""

    name = "offers nothing offered"

    def act(self, items, rng):
        return ["fly" for _ in items]


def test_a_policy_whose_action_is_not_offered_is_one_audit_error():
    with pytest.raises(AuditError, match="took no admissible action") as info:
        audit(lambda: SnapshotChain(), settings=AuditSettings(**{**TINY, "parts": ("accuracy",)}), policy=Offers())
    assert "\n" not in str(info.value)


def test_built_in_policies_by_name():
    pols = policies(AuditSettings(policies=("uniform", "detour", "tabular"), tabular_targets=(0.2, 0.8)))
    assert list(pols) == ["uniform", "detour=0.5,eps=0.2", "tabular=0.2", "tabular=0.8"]
    assert pols["tabular=0.2"].trainer is pols["tabular=0.8"].trainer  # one training serves both targets


@pytest.mark.parametrize("args,needle", [
    (["--policy-model", "no/such/dir"], "no/such/dir"),
    (["--policy-model", "."], "no config.json"),
    (["--race-lrs", "0.3,0"], "a learning rate must be a positive number, got 0.0"),
    (["--race-lrs", "0.3,fast"], "--race-lrs: expected comma-separated float values"),
    (["--race-lrs", "-1"], "a learning rate must be a positive number"),
    (["--policy", "greedy"], "unknown policy 'greedy' in policies; policies: expert, uniform, detour, tabular"),
    (["--tabular-success", "1.5"], "tabular_targets"),
    (["--bias-groups", "1"], "bias_groups"),
    (["--bias-subsample", "0"], "bias_subsample"),
])
def test_cli_bad_input_is_one_line_exit_2(tmp_path, args, needle):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    proc = subprocess.run([sys.executable, "-m", "creditflow", "audit", *args], capture_output=True, text=True,
                          cwd=tmp_path, timeout=300, env=env)
    lines = [line for line in proc.stderr.strip().splitlines() if line.strip()]
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr and len(lines) == 1 and needle in lines[0], proc.stderr


def test_a_record_is_plain_json():
    result = audit(lambda: SnapshotChain(n=3, max_steps=5),
                   settings=AuditSettings(**{**TINY, "parts": ("accuracy", "bias"), "seeds": 1, "bias_groups": 2,
                                             "policies": ("uniform",), "subsample": 4}))
    rec = json.loads(json.dumps(result.record))
    assert rec["accuracy"]["uniform"][0]["accuracy"]["audited"] <= 4
