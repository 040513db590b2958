"""What every trainer bridge shares (creditflow/integrations/rows.py, framework-free): credit's Rows, advantages()
with its metrics, the trainer names from the registry, the rows attached to a call and the RowUid route."""

from dataclasses import replace

import numpy as np
import pytest
from tests.credit.credit_testlib import traj

from creditflow import credit
from creditflow.credit import Rows
from creditflow.integrations import rows


def batch():
    """One group: a win through B, a loss through C (both start in A), as trajectories and as rows."""
    a = traj(["A", "B", "S"], success=True, rewards=[0.0, 1.0], traj_id="a")
    b = traj(["A", "C", "D"], traj_id="b")
    cols = Rows.filled(["g"] * 4, traj_ids=["a", "a", "b", "b"], rewards=[0.0, 1.0, 0.0, 0.0],
                       success=[True, True, False, False], state_keys=["A", "B", "A", "C"],
                       next_state_keys=["B", "S", "C", "D"], scores=[0.0] * 4)
    return [a, b], cols


def test_rows_filled_fill_the_defaults_and_refuse_unknown_ones():
    cols = Rows.filled(["g", "g", "g"], traj_ids=["a", "a", "b"], rewards=[1, 0, 0], success=[1, 1, 0])
    assert cols.step_index.tolist() == [0, 1, 0] and cols.active.tolist() == [True] * 3
    assert cols.state_keys == [""] * 3 and cols.valid is None and cols.scores is None
    assert cols.rewards.dtype == np.float64 and cols.success.dtype == bool
    with pytest.raises(TypeError, match="unknown column.*reward\\b"):
        Rows.filled(["g"], traj_ids=["a"], reward=[1.0])


@pytest.mark.parametrize("name", list(rows.ESTIMATORS))
def test_advantages_are_credit_scores_with_the_estimators_metrics(name):
    trajs, cols = batch()
    estimator = rows.ESTIMATORS[name]
    knobs = {"ddof": 0} if "ddof" in credit.knob_model(estimator).model_fields else {}  # knobs reach the kernel
    got, metrics = rows.advantages(name, cols, knobs)
    want = [s.advantage for t in credit.score(trajs, estimator=estimator, **knobs) for s in t.steps]
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-12)
    assert isinstance(metrics, dict)


def test_inactive_rows_get_zero_and_padding_copies_share_their_original():
    _, cols = batch()
    padded = Rows.filled(cols.group_ids + ["g", "g"], traj_ids=cols.traj_ids + ["a", "pad"],
                         step_index=[0, 1, 0, 1, 1, 0], rewards=list(cols.rewards) + [1.0, 0.0],
                         success=list(cols.success) + [True, False], state_keys=cols.state_keys + ["B", "Z"],
                         active=[True] * 5 + [False])
    got, _ = rows.advantages("rewardflow", padded)
    alone, _ = rows.advantages("rewardflow", replace(cols, next_state_keys=None))
    assert got[5] == 0.0 and got[4] == got[1]
    np.testing.assert_array_equal(got[:4], alone)


def test_an_attached_call_gets_the_estimators_metrics():
    _, cols = batch()
    uids = rows.uids_from_rows(cols)
    plain = np.array([str(u) for u in uids], dtype=object)
    with rows.attached(uids) as call:
        got = rows.estimate_call("rewardflow", rows.call_of(plain, "rewardflow", "hint"), None)
    np.testing.assert_array_equal(got, rows.advantages("rewardflow", cols)[0])
    assert call.metrics["credit/graph_nodes"] > 0
    assert rows.call_metrics(call)["groups/all_one_frac"] == 0.0
    assert not hasattr(uids[0], "metrics") or uids[0].metrics == {}  # the call holds them, not the rows
    with pytest.raises(rows.LayoutError, match="carry no rows: hint"):
        rows.call_of(plain, "rewardflow", "hint")  # outside the block: plain ids, no rows


def test_rows_that_carry_themselves_carry_their_metrics():
    """verl's legacy trainer: RowUid values, and the metrics of the estimate on them."""
    _, cols = batch()
    uids = rows.uids_from_rows(cols)
    rows.estimate_call("rewardflow", rows.call_of(uids, "rewardflow", ""), {"creditflow": {"gamma": 0.5}})
    found = rows.row_metrics(uids)
    assert found["credit/graph_nodes"] > 0 and "groups/entropy" in found
    assert "credit/graph_nodes" not in rows.row_metrics(rows.uids_from_rows(cols))  # other rows: none


def test_row_advantages_is_a_deprecated_alias():
    _, cols = batch()
    with pytest.warns(DeprecationWarning, match="advantages"):
        got, _ = rows.row_advantages("gigpo", cols, {"creditflow": {"gamma": 0.9}})
    np.testing.assert_array_equal(got, rows.advantages("gigpo", cols, {"gamma": 0.9})[0])


def test_the_bridges_old_row_names_are_deprecated_aliases():
    """integrations.rows.Columns, columns and FIELDS (docs/integrations.md named them) are credit's Rows now."""
    with pytest.warns(DeprecationWarning, match="creditflow.credit.Rows"):
        assert rows.Columns is Rows
    with pytest.warns(DeprecationWarning, match="Rows.filled"):
        got = rows.columns(["g", "g"], traj_ids=["a", "b"], rewards=[1.0, 0.0], success=[True, False])
    assert isinstance(got, Rows) and got.step_index.tolist() == [0, 0] and got.active.tolist() == [True, True]
    with pytest.warns(DeprecationWarning, match="FIELDS"):
        assert "next_state_keys" in rows.FIELDS
