"""creditflow's estimators inside the real verl (0.9.x, CPU): verl's own compute_advantage with the
registered names gives creditflow's advantages on verl-agent's row layout (runs in .venv-verl: make verl)."""

import copy
import pickle
from pathlib import Path

import numpy as np
import pytest

verl = pytest.importorskip("verl")  # only in .venv-verl (make verl); the main environment skips this module

import torch  # noqa: E402
from omegaconf import OmegaConf  # noqa: E402
from tests.credit.credit_testlib import traj  # noqa: E402
from tests.integrations.testlib import ENV, MODEL, expected, extra_estimator, turn_tokens  # noqa: E402,F401
from tests.integrations.testlib import row_advantages as token_rows  # noqa: E402
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


def row_advantages(data):
    """The advantage of each row (every response token carries it, every other token 0)."""
    return token_rows(data.batch["advantages"].numpy(), data.batch["response_mask"].numpy())


def test_the_plugin_entry_point_registers_the_estimators():
    assert set(cf_verl.ESTIMATORS) <= set(core_algos.ADV_ESTIMATOR_REGISTRY)
    assert core_algos.get_adv_estimator_fn("rewardflow").__name__ == "creditflow_rewardflow_advantage"
    assert core_algos.get_adv_estimator_fn("grpo").__module__.startswith("verl")  # verl's own stays


def test_an_estimator_registered_later_joins_verl_with_no_edit(trajs, extra_estimator):
    assert extra_estimator in cf_verl.ESTIMATORS and extra_estimator not in core_algos.ADV_ESTIMATOR_REGISTRY
    cf_verl.register()
    try:
        assert core_algos.get_adv_estimator_fn(extra_estimator) == cf_verl.VerlEstimator(extra_estimator)
        data = verl_compute_advantage(cf_verl.to_dataproto(trajs), adv_estimator=extra_estimator, config=CONFIG)
        np.testing.assert_array_equal(row_advantages(data), expected(trajs, extra_estimator).astype(np.float32))
    finally:
        core_algos.ADV_ESTIMATOR_REGISTRY.pop(extra_estimator)


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


# --------------------------------------------------------------------------------------------------
# token placement (the bug class of verl #2540/#3683, SkyRL #201/#1492): legacy trainer
# --------------------------------------------------------------------------------------------------


def multi_turn_batch(trajs, seed=0):
    """verl-agent's rows with verl's multi-turn token layout: each row's response is the model's tokens, then
    the env's reply (response_mask 0), the prompt the conversation before the turn."""
    tokens = turn_tokens(trajs, seed)
    with_tokens = copy.deepcopy(trajs)
    for t, turns in zip(with_tokens, tokens):
        for step, (prompt, response, _) in zip(t.steps, turns):
            step.prompt_ids, step.response_ids = prompt, response
    data = cf_verl.to_dataproto(with_tokens)
    masks = [m for turns in tokens for _, _, m in turns]
    width = data.batch["responses"].shape[1]
    data.batch["response_mask"] = torch.tensor([m + [0] * (width - len(m)) for m in masks], dtype=torch.long)
    return data, masks


@pytest.mark.parametrize("name", list(cf_verl.ESTIMATORS))
def test_legacy_a_steps_advantage_lands_on_exactly_its_model_tokens(trajs, name):
    data, masks = multi_turn_batch(trajs)
    prompts = data.batch["prompts"].clone()
    out = verl_compute_advantage(data, adv_estimator=name, config=CONFIG)
    adv = out.batch["advantages"].numpy()
    assert adv.shape == tuple(out.batch["responses"].shape)  # response-aligned: no prompt token has one
    assert torch.equal(out.batch["prompts"], prompts)
    want = expected(trajs, name).astype(np.float32)
    for row, mask in enumerate(masks):
        m = np.array(mask)
        np.testing.assert_array_equal(adv[row, :len(m)][m == MODEL], np.full((m == MODEL).sum(), want[row]))
        assert not adv[row, :len(m)][m == ENV].any()  # the env's tokens: none
        assert not adv[row, len(m):].any()  # right padding: none


@pytest.mark.parametrize("name", list(cf_verl.ESTIMATORS))
def test_legacy_no_step_trains_with_zero_advantage_unless_its_estimator_says_so(trajs, name):
    data, _ = multi_turn_batch(trajs)
    got = row_advantages(verl_compute_advantage(data, adv_estimator=name, config=CONFIG))
    want = expected(trajs, name)
    np.testing.assert_array_equal(got == 0.0, want == 0.0)
    mixed = {t.group_id for t in trajs if t.success} & {t.group_id for t in trajs if not t.success}
    rows = np.array([t.group_id in mixed for t in trajs for _ in t.steps])
    assert rows.any() and (got[rows] != 0).all()  # a group with both outcomes: every step of every trajectory


def test_legacy_padding_and_duplicated_rows_change_nothing(trajs):
    data, _ = multi_turn_batch(trajs)
    alone = row_advantages(verl_compute_advantage(data, adv_estimator="rewardflow", config=CONFIG))
    data, _ = multi_turn_batch(trajs)
    n = len(data)
    dup = data.select_idxs(np.arange(0, n, 7))  # verl-agent's adjust_batch: copies of real rows
    pad = data.select_idxs([1, 2])  # rows marked inactive (active_masks 0)
    pad.non_tensor_batch["active_masks"] = np.array([False, False])
    pad.non_tensor_batch["uid"] = cf_verl.row_uids(pad.non_tensor_batch)
    both = DataProto.concat([data, dup, pad])
    wide = torch.zeros(len(both), 7, dtype=both.batch["responses"].dtype)  # and longer right padding
    for key in ("responses", "response_mask", "token_level_rewards", "token_level_scores"):
        both.batch[key] = torch.cat([both.batch[key], wide.to(both.batch[key].dtype)], -1)
    got = row_advantages(verl_compute_advantage(both, adv_estimator="rewardflow", config=CONFIG))
    np.testing.assert_array_equal(got[:n], alone)
    np.testing.assert_array_equal(got[n:n + len(dup)], alone[np.arange(0, n, 7)])
    assert not got[n + len(dup):].any()
