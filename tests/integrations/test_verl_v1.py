"""creditflow's estimators in verl's v1 trainer (``trainer.use_v1=True``, verl 0.9's default), with the real
verl and TransferQueue in .venv-verl (make verl).

Fast tests run verl's v1 advantage function (``compute_advantage_for_multi_trajectories``) on the rows built
from agent-loop outputs. The ``slow`` ones start Ray and a TransferQueue (about a minute on 2 cores) and run
verl's v1 pipeline from the agent-loop worker's write to the trainer's ``_compute_advantage``: the
worker's ``_agent_loop_postprocess`` puts per-turn ``AgentLoopOutput``s into the TransferQueue, verl's
``ReplayBuffer`` samples the batch, verl's padding and a reorder (as ``_balance_batch``) follow, then the
registered trainer class computes the advantages, read back from the TransferQueue per token."""

import asyncio
import copy
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

verl = pytest.importorskip("verl")  # only in .venv-verl (make verl); the main environment skips this module

import torch  # noqa: E402
from omegaconf import OmegaConf  # noqa: E402
from tests.integrations.testlib import ENV, MODEL, expected, row_advantages, turn_tokens  # noqa: E402
from verl import DataProto  # noqa: E402
from verl.trainer.ppo.v1 import get_trainer_cls  # noqa: E402
from verl.trainer.ppo.v1.trainer_base import TRAINER_REGISTRY  # noqa: E402
from verl.trainer.ppo.v1.utils import compute_advantage_for_multi_trajectories  # noqa: E402

from benchmarks.credit_speed import sokoban_batch  # noqa: E402
from creditflow.integrations import verl as cf_verl  # noqa: E402
from creditflow.integrations import verl_v1  # noqa: E402
from creditflow.integrations.rows import advantages, call_metrics, rows_from_uids  # noqa: E402
from creditflow.integrations.verl import _next_state  # noqa: E402

CONFIG = OmegaConf.create({"adv_estimator": "rewardflow", "creditflow": {}})
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def trajs():
    return sokoban_batch(tasks=4, rollouts=4, steps=14, seed=5)


def v1_outputs(trajs, *, outcome_on_every_output=True, seed=0):
    """What a multi-turn agent loop returns, one output per turn, keyed as verl's v1 worker keys them:
    {uid}_{session_id}_{index}. Per-step fields in ``extra_fields``; the outcome (and score) in
    ``reward_extra_info``, where verl's reward function puts it: on the final output, which verl's worker
    copies to the session's other outputs (``outcome_on_every_output`` does that copy here)."""
    groups = {g: f"g{i}" for i, g in enumerate(dict.fromkeys(t.group_id for t in trajs))}
    sessions: dict = {}
    tokens = turn_tokens(trajs, seed)
    out = []
    for t, turns in zip(trajs, tokens):
        uid = groups[t.group_id]
        sid = sessions.setdefault(uid, [0])
        session, sid[0] = sid[0], sid[0] + 1
        outcome = {"success": bool(t.success), "score": float(t.score)}
        for i, (step, (prompt, response, mask)) in enumerate(zip(t.steps, turns)):
            last = i == len(t.steps) - 1
            extra = {"state_key": step.state, "next_state_key": _next_state(t, i), "anchor_obs": step.observation,
                     "rewards": step.reward, "is_action_valid": step.valid}
            if last or outcome_on_every_output:
                extra["reward_extra_info"] = dict(outcome)
            out.append({"key": f"{uid}_{session}_{i}", "uid": uid, "session_id": session, "prompt_ids": prompt,
                        "response_ids": response, "response_mask": mask, "extra_fields": extra,
                        "reward_score": float(t.score) if last else None})
    return out


def function_batch(outputs):
    """The DataProto verl's v1 _compute_advantage builds (plain uids, right-padded responses)."""
    width = max(len(o["response_ids"]) for o in outputs)
    mask = torch.tensor([o["response_mask"] + [0] * (width - len(o["response_mask"])) for o in outputs])
    rewards = torch.zeros(mask.shape, dtype=torch.float32)
    for row, o in enumerate(outputs):
        rewards[row, len(o["response_ids"]) - 1] = o["reward_score"] or 0.0
    data = DataProto.from_dict(tensors={"response_mask": mask, "token_level_rewards": rewards},
                               non_tensors={"uid": np.array([o["uid"] for o in outputs], dtype=object)})
    return data


def rows_of(outputs, estimator="rewardflow", padding=None):
    return verl_v1.rows_from_outputs([o["key"] for o in outputs], [o["uid"] for o in outputs],
                                     [o["extra_fields"] for o in outputs], padding=padding, estimator=estimator)


# --------------------------------------------------------------------------------------------------
# fast: verl's v1 advantage function on the rows
# --------------------------------------------------------------------------------------------------


def test_the_plugin_puts_creditflow_trainers_under_verls_trainer_names():
    from verl.trainer.ppo.v1.trainer_sync import PPOTrainerSync

    assert {"sync", "colocate_async", "separate_async"} <= set(TRAINER_REGISTRY)
    for mode, cls in TRAINER_REGISTRY.items():
        assert issubclass(cls, verl_v1.CreditflowAdvantage), mode
        assert cls.__mro__[2].__module__.startswith("verl.trainer.ppo.v1"), mode  # verl's own class underneath
    assert issubclass(get_trainer_cls("sync"), PPOTrainerSync)
    assert verl_v1.install() is TRAINER_REGISTRY and get_trainer_cls("sync").__mro__[2] is PPOTrainerSync  # once


def test_the_bridge_modules_register_nothing_on_import():
    """Only creditflow's verl.plugins modules register (verl's loader imports them and calls nothing): with the
    plugins off, importing the bridges leaves verl's registries as they are, and the explicit calls fill them."""
    code = ("from verl.trainer.ppo import core_algos; from verl.trainer.ppo.v1.trainer_base import TRAINER_REGISTRY;"
            "from creditflow.integrations import verl, verl_v1;"
            "assert 'rewardflow' not in core_algos.ADV_ESTIMATOR_REGISTRY;"
            "assert not issubclass(TRAINER_REGISTRY['sync'], verl_v1.CreditflowAdvantage);"
            "verl.register(); verl_v1.install();"
            "assert core_algos.ADV_ESTIMATOR_REGISTRY['rewardflow'] == verl.VerlEstimator('rewardflow');"
            "assert TRAINER_REGISTRY['sync'] is verl_v1.CreditflowPPOTrainerSync")
    env = {**os.environ, "VERL_USE_EXTERNAL_PLUGINS": "none"}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-2000:]


def test_the_v1_names_of_the_layout_keys_are_deprecated_aliases():
    with pytest.warns(DeprecationWarning, match="STATE_KEYS"):
        assert verl_v1.STATE_FIELDS is cf_verl.STATE_KEYS
    with pytest.warns(DeprecationWarning, match="SUCCESS_KEYS"):
        assert verl_v1.SUCCESS_FIELDS is cf_verl.SUCCESS_KEYS


@pytest.mark.parametrize("name", list(cf_verl.ESTIMATORS))
def test_verls_v1_advantage_function_equals_credit_score(trajs, name):
    outputs = v1_outputs(trajs)
    order = np.random.default_rng(1).permutation(len(outputs))  # the batch's order is verl's, not ours
    shuffled = [outputs[i] for i in order]
    rows = rows_of(shuffled, name)
    with cf_verl.attached(rows) as call:
        data = compute_advantage_for_multi_trajectories(function_batch(shuffled), [o["key"] for o in shuffled],
                                                        adv_estimator=name, config=CONFIG)
    got = row_advantages(data.batch["advantages"].numpy(), data.batch["response_mask"].numpy())
    np.testing.assert_array_equal(got, expected(trajs, name).astype(np.float32)[order])
    _, want = advantages(name, rows_from_uids(rows))
    assert set(call.metrics) == set(want)  # the estimator left its metrics on the call
    assert call_metrics(call)["groups/entropy"] > 0


def test_plain_uids_without_rows_say_what_to_do(trajs):
    outputs = v1_outputs(trajs)
    with pytest.raises(cf_verl.VerlLayoutError, match="use_v1"):
        compute_advantage_for_multi_trajectories(function_batch(outputs), [o["key"] for o in outputs],
                                                 adv_estimator="rewardflow", config=CONFIG)
    rows = rows_of(outputs)
    with pytest.raises(cf_verl.VerlLayoutError, match="carry no rows"), cf_verl.attached(rows[::-1]):
        compute_advantage_for_multi_trajectories(function_batch(outputs), [o["key"] for o in outputs],
                                                 adv_estimator="rewardflow", config=CONFIG)


def _drop(outputs, row, *fields):
    for field in fields:
        extra = outputs[row]["extra_fields"]
        (extra if field in extra else extra["reward_extra_info"]).pop(field)


@pytest.mark.parametrize("case, named", [
    ("state_key", "'state_key'"), ("rewards", "'rewards'"), ("success", "'success' (or 'won')"),
    ("no state anywhere", "'state_key' (or 'anchor_obs')")])
def test_a_missing_field_is_one_error_naming_it_and_the_output(trajs, case, named):
    outputs = copy.deepcopy(v1_outputs(trajs))
    if case == "no state anywhere":
        for row in range(len(outputs)):
            _drop(outputs, row, "state_key", "anchor_obs")
        bad = outputs[0]
    else:
        _drop(outputs, 5, case)
        bad = outputs[5]
    with pytest.raises(cf_verl.VerlLayoutError) as err:
        rows_of(outputs)
    message = str(err.value)
    assert f"no {named} in extra_fields" in message and repr(bad["key"]) in message and "\n" not in message


def test_outcome_and_score_come_from_extra_fields_or_reward_extra_info(trajs):
    outputs = v1_outputs(trajs)
    moved = copy.deepcopy(outputs)
    for o in moved:  # the agent loop's own: extra_fields["success"], ["score"]
        o["extra_fields"].update(o["extra_fields"].pop("reward_extra_info"))
    a, b = (rows_from_uids(rows_of(x, "creditflow_grpo")) for x in (outputs, moved))
    np.testing.assert_array_equal(a.success, b.success)
    assert a.scores.tolist() == b.scores.tolist() == [float(t.score) for t in trajs for _ in t.steps]


def test_parse_key():
    assert verl_v1.parse_key("5f3a-9c_3_12") == ("5f3a-9c", "5f3a-9c_3", 12)
    with pytest.raises(cf_verl.VerlLayoutError, match="session_id"):
        verl_v1.parse_key("no-index")


# --------------------------------------------------------------------------------------------------
# slow: verl's v1 pipeline with a TransferQueue, from the agent-loop worker to _compute_advantage
# --------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def v1(trajs):
    """Ray + TransferQueue; the trainer class verl's main_ppo would build for the example config; the batch
    written by verl's agent-loop worker, sampled by verl's ReplayBuffer, padded by verl, reordered."""
    import ray
    import transfer_queue as tq
    from hydra import compose, initialize_config_dir
    from verl.experimental.agent_loop.agent_loop import AgentLoopMetrics, AgentLoopOutput
    from verl.trainer.ppo.padding_utils import upsample_batch_to_divisible_size
    from verl.trainer.ppo.v1.agent_loop_tq import AgentLoopWorkerTQ

    # logical CPUs: the TransferQueue controller and its storage unit ask for one each
    ray.init(num_cpus=4, include_dashboard=False, log_to_driver=False, configure_logging=False)
    try:
        tq.init(OmegaConf.create({"backend": {"SimpleStorage": {"num_data_storage_units": 1}}}))
        with initialize_config_dir(config_dir=str(ROOT / "configs" / "verl"), version_base=None):
            cfg = compose(config_name="sokoban_rewardflow")
        assert cfg.trainer.use_v1 and cfg.trainer.v1.trainer_mode == "sync"  # verl's defaults
        trainer = get_trainer_cls(cfg.trainer.v1.trainer_mode)(config=cfg)

        # verl's worker, without the LLM servers it would hold: its TransferQueue write is what runs
        worker = object.__new__(AgentLoopWorkerTQ.__ray_actor_class__)
        worker.reward_loop_worker_handles, worker.distillation_enabled, worker.processor = None, False, None
        outputs = v1_outputs(trajs, outcome_on_every_output=False)
        sessions: dict = {}
        for o in outputs:
            sessions.setdefault((o["uid"], o["session_id"]), []).append(o)
        for (uid, session), turns in sessions.items():
            loop_outputs = [AgentLoopOutput(
                prompt_ids=o["prompt_ids"], response_ids=o["response_ids"], response_mask=o["response_mask"],
                reward_score=o["reward_score"], num_turns=2 * (i + 1), metrics=AgentLoopMetrics(),
                extra_fields={**o["extra_fields"], "min_global_steps": 1, "max_global_steps": 1})
                for i, o in enumerate(turns)]
            asyncio.run(worker._agent_loop_postprocess(loop_outputs, False, uid=uid, session_id=session,
                                                       global_steps=1, raw_prompt=[]))
        uids = sorted({o["uid"] for o in outputs})
        tq.kv_batch_put(keys=uids, partition_id="train",
                        tags=[{"is_prompt": True, "status": "finished", "global_steps": 1}] * len(uids))
        batch, _ = trainer.replay_buffer.sample(global_steps=1, partition_id="train", batch_size=len(uids))
        assert sorted(batch.keys) == sorted(o["key"] for o in outputs)
        batch = upsample_batch_to_divisible_size(batch, len(batch) + 3, eos_token_id=2)  # 3 padding rows
        assert sum(tag.get("is_padding", False) for tag in batch.tags) == 3
        batch.reorder(np.random.default_rng(2).permutation(len(batch)).tolist())  # as _balance_batch
        yield {"cfg": cfg, "knobs": OmegaConf.to_container(cfg.algorithm.creditflow), "trainer": trainer, "batch": batch, "outputs": {o["key"]: o for o in outputs},
               "order": {o["key"]: i for i, o in enumerate(outputs)}}
    finally:
        tq.close()
        ray.shutdown()


def run_v1(v1, name, trainer=None, knobs=None):
    """verl's v1 _compute_advantage with adv_estimator=name and algorithm.creditflow=knobs; per key:
    (advantages, response_mask, prompt length) read back from the TransferQueue, and the step metrics."""
    import transfer_queue as tq

    trainer = trainer or v1["trainer"]
    trainer.config.algorithm.adv_estimator = name
    trainer.config.algorithm.creditflow = knobs or {}
    metrics: dict = {}
    batch = trainer._compute_advantage(v1["batch"], metrics)
    got = tq.kv_batch_get(keys=batch.keys, partition_id=batch.partition_id,
                          select_fields=["advantages", "response_mask", "prompts"])
    per_key = {key: (adv.numpy(), mask.numpy(), len(prompt))
               for key, adv, mask, prompt in zip(batch.keys, got["advantages"], got["response_mask"], got["prompts"])}
    return per_key, metrics


@pytest.mark.slow
@pytest.mark.parametrize("name", list(cf_verl.ESTIMATORS))
def test_v1_trainer_puts_each_steps_advantage_on_exactly_its_model_tokens(v1, trajs, name):
    per_key, metrics = run_v1(v1, name)
    want = expected(trajs, name).astype(np.float32)
    for key, (adv, mask, prompt_len) in per_key.items():
        if key not in v1["outputs"]:  # verl's padding row: no response token, nothing
            assert not mask.any() and not adv.any()
            continue
        o = v1["outputs"][key]
        m = np.array(o["response_mask"])
        assert len(adv) == len(o["response_ids"]) and prompt_len == len(o["prompt_ids"])  # response-aligned
        np.testing.assert_array_equal(mask, m)
        np.testing.assert_array_equal(adv[m == MODEL], np.full((m == MODEL).sum(), want[v1["order"][key]]))
        assert not adv[m == ENV].any()  # the env's tokens inside the response: none
    assert metrics["groups/entropy"] > 0 and metrics["credit/groups"] == 4  # the step metrics have them


@pytest.mark.slow
def test_v1_trainer_reads_the_example_configs_knobs(v1, trajs):
    per_key, metrics = run_v1(v1, "rewardflow", knobs=v1["knobs"])
    want = expected(trajs, "rewardflow", **v1["knobs"]).astype(np.float32)
    got = np.zeros(len(want), dtype=np.float32)
    for key, (adv, mask, _) in per_key.items():
        if key in v1["order"]:
            got[v1["order"][key]] = adv[mask.astype(bool)][0]
    np.testing.assert_array_equal(got, want)
    assert metrics["credit/graph_nodes"] > 0 and 0 <= metrics["credit/reach_success_frac"] <= 1


@pytest.mark.slow
@pytest.mark.parametrize("name", ["rewardflow", "creditflow_grpo"])
def test_v1_trainer_no_step_trains_with_zero_advantage_unless_its_estimator_says_so(v1, trajs, name):
    per_key, _ = run_v1(v1, name)
    want = expected(trajs, name)
    got = np.zeros(len(want))
    for key, (adv, mask, _) in per_key.items():
        if key in v1["order"]:
            got[v1["order"][key]] = adv[mask.astype(bool)][0]
    np.testing.assert_array_equal(got == 0.0, want == 0.0)
    mixed = {t.group_id for t in trajs if t.success} & {t.group_id for t in trajs if not t.success}
    rows = np.array([t.group_id in mixed for t in trajs for _ in t.steps])
    assert rows.any() and (got[rows] != 0).all()


@pytest.mark.slow
def test_v1_trainer_other_estimators_are_verls_own(v1):
    """grpo (verl's v1 session-final GRPO) through creditflow's trainer class and through verl's own."""
    from verl.trainer.ppo.v1.trainer_sync import PPOTrainerSync

    ours, _ = run_v1(v1, "grpo")
    theirs, _ = run_v1(v1, "grpo", trainer=PPOTrainerSync(config=copy.deepcopy(v1["cfg"])))
    assert ours.keys() == theirs.keys()
    for key in ours:
        np.testing.assert_array_equal(ours[key][0], theirs[key][0])
    assert any(a.any() for a, _, _ in ours.values())
