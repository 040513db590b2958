"""The public credit paths run one kernel: score on dicts and on Trajectories, score_arrays, compute."""

import copy
import json
from dataclasses import replace

import numpy as np
import pytest
from tests.credit.credit_testlib import traj

from benchmarks.credit_speed import sokoban_batch
from creditflow.credit import BatchError, CreditError, Rows, compute, credit_arrays, score, score_arrays
from creditflow.credit.batch import batch_from_dicts, batch_from_trajectories
from creditflow.credit.returns import outcome_conflicts
from creditflow.rollout.trajectory import Trajectory, TrajectoryFormatError

ESTIMATORS = ("grpo", "rloo", "gigpo", "rewardflow")
EXPLICIT = {"reward_source": "return"}  # the sokoban batch: return and success agree; say so explicitly


@pytest.fixture(scope="module")
def batch():
    return sokoban_batch(tasks=5, rollouts=4, steps=16, seed=2)


def advantages(trajs):
    return [s.advantage for t in trajs for s in t.steps]


COLUMNS = ("group_ids", "success", "score", "lengths", "state", "next_state", "reward", "valid", "observation",
           "action", "final_state", "final_observation")


def columns(b):
    return {k: (v.tolist() if isinstance(v, np.ndarray) else v) for k in COLUMNS for v in [getattr(b, k)]}


def test_dict_columns_equal_the_trajectory_columns(batch):
    dicts = [t.to_dict() for t in batch]
    dicts[0]["steps"][0].pop("response")  # optional fields absent, None or as ints
    dicts[1]["steps"][0]["observation"] = None
    dicts[2]["steps"][1]["reward"] = 0
    dicts[3]["score"] = 1
    dicts[4].pop("group_id")
    want = batch_from_trajectories([Trajectory.from_dict(d) for d in dicts])
    got = batch_from_dicts(dicts)
    assert columns(got) == columns(want)
    assert got.source[0] is dicts[0]["steps"][0]


@pytest.mark.parametrize("name", ESTIMATORS)
def test_every_public_path_gives_the_same_advantages(batch, name):
    knobs = {} if name == "rewardflow" else EXPLICIT
    inplace = copy.deepcopy(batch)
    compute(name, inplace, **knobs)
    want = advantages(inplace)
    assert advantages(score(batch, estimator=name, **knobs)) == want
    assert advantages(score([t.to_dict() for t in batch], estimator=name, **knobs)) == want
    rows = [(t, i, s) for t in batch for i, s in enumerate(t.steps)]
    in_order = np.arange(len(rows))
    shuffled = np.random.default_rng(1).permutation(len(rows))  # rows in any order (verl's balance_batch)
    for order in (in_order, shuffled):
        got = score_arrays(name, **array_columns([rows[k] for k in order]), **knobs)
        if order is in_order:  # the same trajectory order: bit for bit
            np.testing.assert_array_equal(got, np.array(want))
        else:  # group statistics summed in another order: equal to rounding
            np.testing.assert_allclose(got, np.array(want)[order], rtol=1e-12, atol=1e-12)


def array_columns(rows):
    """One-row-per-step columns of ``(trajectory, step index, step)`` rows."""
    nxt = [s.next_state or (t.steps[i + 1].state if i + 1 < len(t.steps) else t.final_state) for t, i, s in rows]
    return dict(group_ids=[t.group_id for t, _, _ in rows], traj_ids=[t.traj_id for t, _, _ in rows],
                step_index=[i for _, i, _ in rows], state_keys=[s.state for _, _, s in rows],
                rewards=[s.reward for _, _, s in rows], success=[t.success for t, _, _ in rows],
                valid=[s.valid for _, _, s in rows], observations=[s.observation for _, _, s in rows],
                next_state_keys=nxt)


def test_score_copies_without_touching_the_input(batch):
    before = [t.to_dict() for t in batch]
    scored = score(batch, estimator="rewardflow")
    assert [t.to_dict() for t in batch] == before
    assert scored[0] is not batch[0] and scored[0].steps[0] is not batch[0].steps[0]
    assert scored[0].steps[0].state == batch[0].steps[0].state


def test_score_on_dicts_builds_what_from_dict_builds(batch):
    dicts = [t.to_dict() for t in batch]
    dicts[0]["steps"][0]["info"] = {"next_observation": "x"}
    dicts[0]["meta"] = {"seed": 3}
    got = score(dicts, estimator="rewardflow")
    want = score([Trajectory.from_dict(d) for d in dicts], estimator="rewardflow")
    assert [t.to_dict() for t in got] == [t.to_dict() for t in want]
    assert "advantage" not in dicts[0]["steps"][0]


def test_bad_dicts_keep_their_one_line_errors():
    good = traj(["A", "B"]).to_dict()
    bad = copy.deepcopy(good)
    bad["steps"][0]["reward"] = "high"
    with pytest.raises(TrajectoryFormatError, match=r"trajectory 1: steps\[0\]: field 'reward' must be number"):
        score([good, bad], estimator="grpo")
    bad["steps"][0].pop("reward")
    bad["steps"][0].pop("action")
    with pytest.raises(TrajectoryFormatError, match="missing field 'action'"):
        batch_from_dicts([good, bad], ["in.jsonl:1", "in.jsonl:2"])


@pytest.mark.parametrize("value", [float("nan"), float("inf"), float("-inf")])
def test_non_finite_rewards_and_scores_are_one_line_errors(value):
    d = traj(["A", "B", "C"]).to_dict()
    d["steps"][1]["reward"] = value
    with pytest.raises(TrajectoryFormatError, match=r"^f\.jsonl:7: steps\[1\]: field 'reward' must be a finite"):
        batch_from_dicts([d], ["f.jsonl:7"])
    d["steps"][1]["reward"] = 0.0
    d["score"] = value
    with pytest.raises(TrajectoryFormatError, match="field 'score' must be a finite"):
        score([d], estimator="grpo")
    with pytest.raises(TrajectoryFormatError, match="'t'.*finite"):
        score_arrays("grpo", group_ids=["g"], traj_ids=["t"], step_index=[0], state_keys=["A"], rewards=[value],
                     success=[False])


def test_array_rows_must_describe_trajectories():
    base = dict(group_ids=["g", "g"], traj_ids=["t", "t"], step_index=[0, 1], state_keys=["A", "B"],
                rewards=[0.0, 1.0], success=[True, True])
    assert score_arrays("grpo", **base).tolist() == [0.0, 0.0]  # a group of one rollout
    with pytest.raises(BatchError, match="two rows with step_index 1"):
        score_arrays("grpo", **{**base, "step_index": [1, 1]})
    with pytest.raises(BatchError, match="different group_ids"):
        score_arrays("grpo", **{**base, "group_ids": ["g", "h"]})
    with pytest.raises(BatchError, match="different success"):
        score_arrays("grpo", **{**base, "success": [True, False]})
    with pytest.raises(BatchError, match=r"rewards \(1\)"):
        score_arrays("grpo", **{**base, "rewards": [0.0]})
    with pytest.raises(BatchError, match="step_index must be integers"):
        score_arrays("grpo", **{**base, "step_index": [0.0, 1.0]})


def test_credit_arrays_returns_every_field_in_row_order():
    out = credit_arrays("rewardflow", Rows(group_ids=["g"] * 3, traj_ids=["b", "a", "a"], step_index=[0, 1, 0],
                                           state_keys=["A", "B", "A"], rewards=[0.0, 0.0, 0.0],
                                           success=[False, True, True]), gamma=0.5)
    assert out.process_reward.tolist() == [0.25, 0.5, 0.25]  # rows: b/0 (A), a/1 (B), a/0 (A)
    assert out.metrics["credit/groups"] == 1


def test_credit_arrays_leaves_inactive_rows_out():
    """Rows.active False: the row takes no part and gets 0 in every field; a batch of padding alone scores nothing."""
    rows = Rows(group_ids=["g"] * 4, traj_ids=["b", "a", "a", "pad"], step_index=[0, 1, 0, 0],
                state_keys=["A", "B", "A", "Z"], rewards=[0.0] * 4, success=[False, True, True, True])
    out = credit_arrays("rewardflow", replace(rows, active=[True, True, True, False]), gamma=0.5)
    alone = credit_arrays("rewardflow", rows.select([0, 1, 2]), gamma=0.5)
    assert out.process_reward.tolist() == alone.process_reward.tolist() + [0.0]
    assert out.advantage.tolist() == alone.advantage.tolist() + [0.0]
    assert out.metrics["credit/graph_nodes"] == alone.metrics["credit/graph_nodes"]
    none = credit_arrays("rewardflow", replace(rows, active=[False] * 4))
    assert none.advantage.tolist() == [0.0] * 4 and none.process_reward is None and none.metrics == {}
    with pytest.raises(BatchError, match="active must be booleans"):
        credit_arrays("rewardflow", replace(rows, active=["yes"] * 4))


# --------------------------------------------------------------------------------------------------
# the default reward source follows the data's outcome
# --------------------------------------------------------------------------------------------------


def hand_written():
    """Docs-style data: success recorded, step rewards 0 or -0.1, no terminal reward."""
    won = traj(["A", "B", "C", "G"], rewards=[-0.1, -0.1, -0.1], success=True, traj_id="won")
    lost = traj(["A", "D"], rewards=[0.0], traj_id="lost")
    return [won, lost]


@pytest.mark.parametrize("name", ["grpo", "rloo", "gigpo"])
def test_a_default_return_that_contradicts_success_is_refused(name):
    with pytest.raises(CreditError, match="default reward_source=return .* pass reward_source=success"):
        score(hand_written(), estimator=name)
    scored = score(hand_written(), estimator=name, reward_source="success")
    assert scored[0].steps[0].advantage > scored[1].steps[0].advantage
    score(hand_written(), estimator=name, reward_source="return")  # asked for: allowed
    compute(name, hand_written())  # the trainer's in-place path does not check


def test_outcome_conflicts_per_group():
    groups = np.array([0, 0, 0, 1, 1, 2])
    outcome = np.array([1.0, 0.0, 0.0, 1.0, 0.0, 1.0])
    returns = np.array([5.0, 1.0, 5.0, 2.0, 1.0, -3.0])
    assert outcome_conflicts(groups, outcome, returns).tolist() == [0]  # group 0: won 5 <= lost 5
    scores = np.array([0.2, 0.5, 0.9, 0.0, 0.0, 0.0])
    assert outcome_conflicts(groups, scores, np.array([1.0, 2.0, 3.0, 0.0, 1.0, 0.0])).tolist() == []
    assert outcome_conflicts(groups, scores, np.array([1.0, 3.0, 2.0, 0.0, 1.0, 0.0])).tolist() == [0]


def test_json_round_trip_of_the_scored_dicts(batch):
    dicts = [t.to_dict() for t in batch]
    json.dumps(dicts)  # plain JSON in, so the scored copies serialise too
    assert all(isinstance(s.advantage, float) for t in score(dicts, estimator="grpo", **EXPLICIT) for s in t.steps)
