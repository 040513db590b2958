"""creditflow's estimators inside the real verl (0.9.x, CPU): verl's own compute_advantage with the
registered names gives creditflow's advantages on verl-agent's row layout (runs in .venv-verl: make verl)."""

import pickle
from pathlib import Path

import numpy as np
import pytest

verl = pytest.importorskip("verl")  # only in .venv-verl (make verl); the main environment skips this module

from omegaconf import OmegaConf  # noqa: E402
from tests.credit.credit_testlib import traj  # noqa: E402
from verl import DataProto  # noqa: E402
from verl.trainer.ppo import core_algos  # noqa: E402
from verl.trainer.ppo.ray_trainer import compute_advantage as verl_compute_advantage  # noqa: E402

from benchmarks.credit_speed import sokoban_batch  # noqa: E402
from creditflow import credit  # noqa: E402
from creditflow.integrations import verl as cf_verl  # noqa: E402

CONFIG = OmegaConf.create({"adv_estimator": "rewardflow", "creditflow": {}})
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def trajs():
    return sokoban_batch(tasks=4, rollouts=4, steps=14, seed=5)


def expected(trajs, name, **knobs):
    """creditflow.credit.score with verl's ddof=1 (where the estimator has a std)."""
    est = cf_verl.ESTIMATORS[name]
    if "ddof" in credit.knob_model(est).model_fields:
        knobs.setdefault("ddof", 1)
    knobs.setdefault("reward_source", credit.knob_model(est).model_fields["reward_source"].default)
    return np.array([s.advantage for t in credit.score(trajs, estimator=est, **knobs) for s in t.steps])


def row_advantages(data):
    """The advantage of each row (every response token carries it)."""
    adv = data.batch["advantages"].numpy()
    mask = data.batch["response_mask"].numpy().astype(bool)
    first = mask.argmax(-1)
    assert np.allclose(adv * mask, adv[np.arange(len(adv)), first][:, None] * mask)  # one value per row
    return adv[np.arange(len(adv)), first]


def test_the_plugin_entry_point_registers_the_estimators():
    assert set(cf_verl.ESTIMATORS) <= set(core_algos.ADV_ESTIMATOR_REGISTRY)
    assert core_algos.get_adv_estimator_fn("rewardflow").__name__ == "creditflow_rewardflow_advantage"
    assert core_algos.get_adv_estimator_fn("grpo").__module__.startswith("verl")  # verl's own stays


def test_to_dataproto_builds_verl_agents_layout(trajs):
    data = cf_verl.to_dataproto(trajs)
    n = sum(len(t.steps) for t in trajs)
    assert len(data) == n and isinstance(data, DataProto)
    nt = data.non_tensor_batch
    for key in ("uid", "traj_uid", "anchor_obs", "state_key", "rewards", "success", "active_masks",
                "is_action_valid", "step_index"):
        assert len(nt[key]) == n, key
    rows = [(t.traj_id, i) for t in trajs for i in range(len(t.steps))]  # trajectory-major, then step
    assert list(zip(nt["traj_uid"], nt["step_index"].tolist())) == rows
    assert nt["uid"][0] == trajs[0].group_id and hash(nt["uid"][0]) == hash(trajs[0].group_id)
    assert data.batch["token_level_rewards"].sum().item() == pytest.approx(sum(t.total_reward for t in trajs), abs=1e-4)


@pytest.mark.parametrize("name", list(cf_verl.ESTIMATORS))
def test_verls_compute_advantage_equals_creditflow_score(trajs, name):
    data = verl_compute_advantage(cf_verl.to_dataproto(trajs), adv_estimator=name, config=CONFIG)
    np.testing.assert_array_equal(row_advantages(data), expected(trajs, name).astype(np.float32))


def test_knobs_come_from_algorithm_creditflow(trajs):
    config = OmegaConf.create({"creditflow": {"gamma": 0.5, "alpha_traj": 0.0, "ddof": 0}})
    data = verl_compute_advantage(cf_verl.to_dataproto(trajs), adv_estimator="rewardflow", config=config)
    want = expected(trajs, "rewardflow", gamma=0.5, alpha_traj=0.0, ddof=0)
    np.testing.assert_array_equal(row_advantages(data), want.astype(np.float32))


def test_rows_survive_reordering_padding_and_pickling(trajs):
    data = cf_verl.to_dataproto(trajs)
    rng = np.random.default_rng(0)
    order = rng.permutation(len(data))
    data.reorder(__import__("torch").as_tensor(order))  # verl's balance_batch
    data = DataProto.concat([data, data.select_idxs(np.arange(5))])  # verl-agent's adjust_batch copies rows
    data = pickle.loads(pickle.dumps(data))  # Ray
    out = verl_compute_advantage(data, adv_estimator="rewardflow", config=CONFIG)
    want = expected(trajs, "rewardflow").astype(np.float32)
    np.testing.assert_array_equal(row_advantages(out), np.concatenate([want[order], want[order][:5]]))


def test_wrapper_reads_non_tensor_batch_without_attached_rows(trajs):
    data = cf_verl.compute_advantage(cf_verl.to_dataproto(trajs, attach=False), "gigpo", config=CONFIG)
    np.testing.assert_array_equal(row_advantages(data), expected(trajs, "gigpo").astype(np.float32))


def test_inactive_rows_get_zero_and_take_no_part():
    a = traj(["A", "B", "S"], success=True, group="g", traj_id="a")
    b = traj(["A", "C", "D"], group="g", traj_id="b")
    data = cf_verl.to_dataproto([a, b], attach=False)
    padded = DataProto.concat([data, data.select_idxs([0])])
    padded.non_tensor_batch["active_masks"] = np.array([True] * 4 + [False])
    padded.non_tensor_batch["traj_uid"][4] = "padding"
    out = cf_verl.compute_advantage(padded, "rewardflow", config=CONFIG)
    adv = row_advantages(out)
    assert adv[4] == 0.0
    np.testing.assert_array_equal(adv[:4], expected([a, b], "rewardflow").astype(np.float32))


@pytest.mark.parametrize("key", ["traj_uid", "rewards", "success", "anchor_obs"])
def test_a_missing_key_is_one_clear_error_naming_it(trajs, key):
    data = cf_verl.to_dataproto(trajs, attach=False)
    data.non_tensor_batch.pop(key)
    if key == "anchor_obs":
        data.non_tensor_batch.pop("state_key")
    with pytest.raises(cf_verl.VerlLayoutError) as err:
        cf_verl.compute_advantage(data, "rewardflow", config=CONFIG)
    message = str(err.value)
    assert f"'{key}'" in message and "\n" not in message
    with pytest.raises(cf_verl.VerlLayoutError, match=key):
        cf_verl.attach_rows(data)


def test_plain_uids_through_verls_compute_advantage_say_what_to_do(trajs):
    data = cf_verl.to_dataproto(trajs, attach=False)
    with pytest.raises(cf_verl.VerlLayoutError, match="attach_rows"):
        verl_compute_advantage(data, adv_estimator="rewardflow", config=CONFIG)


def test_from_dataproto_is_the_reverse(trajs):
    data = verl_compute_advantage(cf_verl.to_dataproto(trajs), adv_estimator="rewardflow", config=CONFIG)
    back = cf_verl.from_dataproto(data)
    assert [t.traj_id for t in back] == [t.traj_id for t in trajs]
    for got, want in zip(back, trajs):
        assert (got.group_id, got.success, got.score) == (want.group_id, want.success, want.score)
        assert [(s.state, s.observation, s.action, s.reward, s.valid) for s in got.steps] == \
            [(s.state, s.observation, s.action, s.reward, s.valid) for s in want.steps]
    np.testing.assert_array_equal(np.array([s.advantage for t in back for s in t.steps], dtype=np.float32),
                                  row_advantages(data))
    # and back again: the same advantages from the recovered trajectories
    np.testing.assert_array_equal(expected(back, "rewardflow"), expected(trajs, "rewardflow"))


def test_credit_metrics_for_verls_metrics_dict(trajs):
    data = verl_compute_advantage(cf_verl.to_dataproto(trajs), adv_estimator="rewardflow", config=CONFIG)
    metrics = cf_verl.credit_metrics(data)
    wins = {}
    for t in trajs:
        wins.setdefault(t.group_id, []).append(t.success)
    assert metrics["groups/all_zero_frac"] == sum(not any(w) for w in wins.values()) / len(wins)
    assert 0.0 <= metrics["groups/entropy"] <= 1.0
    assert metrics["credit/graph_nodes"] > 0 and "credit/reach_success_frac" in metrics
    other = cf_verl.to_dataproto(trajs)  # a batch the estimator did not see: diagnostics only
    assert "credit/graph_nodes" not in cf_verl.credit_metrics(other)


def test_the_example_config_composes_validates_and_runs_its_estimator(trajs):
    """configs/verl/sokoban_rewardflow.yaml: everything of it that runs on CPU."""
    from hydra import compose, initialize_config_dir
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import validate_config

    with initialize_config_dir(config_dir=str(ROOT / "configs" / "verl"), version_base=None):
        cfg = compose(config_name="sokoban_rewardflow")
    validate_config(config=cfg, use_reference_policy=need_reference_policy(cfg), use_critic=need_critic(cfg))
    assert not need_critic(cfg) and cfg.algorithm.adv_estimator in core_algos.ADV_ESTIMATOR_REGISTRY
    knobs = cf_verl.estimator_knobs(cfg.algorithm.adv_estimator, cfg.algorithm)
    credit.validate_knobs("rewardflow", knobs)
    data = verl_compute_advantage(cf_verl.to_dataproto(trajs), adv_estimator=cfg.algorithm.adv_estimator,
                                  config=cfg.algorithm)
    np.testing.assert_array_equal(row_advantages(data), expected(trajs, "rewardflow", **knobs).astype(np.float32))
