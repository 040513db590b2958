"""creditflow's estimators in SkyRL's step-wise training mode, with the real skyrl 0.4 (its skyrl-train extra) in
.venv-skyrl (make skyrl; Python 3.12).

What runs: SkyRL's typed config (SkyRLTrainConfig.from_cli_overrides, with creditflow's algorithm section) and
validate_cfg, its PromptDataset and dataloader (the trainer builds them), its RayPPOTrainer (creditflow's
subclass) with SkyRL's postprocess_generator_output, convert_to_training_input (with
pad_training_input_batch) and compute_advantages_and_returns. What does not: generation (an inference
engine: vLLM on GPUs) and the policy/critic/ref workers (FSDP/Megatron on GPUs). The generator's step-wise
output is built here from creditflow trajectories in the layout SkyRL's SkyRLGymGenerator emits, and the
worker dispatch, which convert_to_training_input asks only for its data-parallel size (get_lcm_dp_size), is an
object giving that size."""

import copy
import json
from types import SimpleNamespace

import numpy as np
import pytest

pytest.importorskip("skyrl.train.trainer")  # only in .venv-skyrl (make skyrl); elsewhere skipped

import torch  # noqa: E402
from skyrl.backends.skyrl_train.utils.ppo_utils import AdvantageEstimatorRegistry  # noqa: E402
from skyrl.train.generators.base import TrajectoryID  # noqa: E402
from skyrl.train.trainer import RayPPOTrainer  # noqa: E402
from skyrl.train.utils import validate_cfg  # noqa: E402
from tests.integrations.testlib import ENV, MODEL, expected, extra_estimator, turn_tokens  # noqa: E402,F401

from benchmarks.credit_speed import sokoban_batch  # noqa: E402
from creditflow.integrations import rows as cf_rows  # noqa: E402
from creditflow.integrations import skyrl as cf_skyrl  # noqa: E402

ROLLOUTS = 4
cf_skyrl.register()  # creditflow's estimators in SkyRL's registry, as skyrl_main does before validate_cfg


@pytest.fixture(scope="module")
def trajs():
    return sokoban_batch(tasks=4, rollouts=ROLLOUTS, steps=14, seed=5)


@pytest.fixture(scope="module")
def dataset_file(tmp_path_factory, trajs):
    """SkyRL's prompt format (a chat per line, env_class): one prompt per task."""
    path = tmp_path_factory.mktemp("skyrl") / "train.jsonl"
    tasks = list(dict.fromkeys(t.group_id for t in trajs))
    with open(path, "w") as f:
        for task in tasks:
            first = next(t for t in trajs if t.group_id == task).steps[0].observation
            f.write(json.dumps({"prompt": [{"role": "user", "content": first}], "env_class": "sokoban"}) + "\n")
    return path


def skyrl_cfg(model_dir, dataset_file, estimator="rewardflow", step_wise=True, **extra):
    from creditflow.integrations.skyrl_main import config_from_args

    overrides = [f"trainer.algorithm.advantage_estimator={estimator}",
                 f"generator.step_wise_trajectories={str(step_wise).lower()}",
                 f"trainer.policy.model.path={model_dir}", f"data.train_data=['{dataset_file}']",
                 "trainer.train_batch_size=4", "trainer.policy_mini_batch_size=4", "trainer.critic_mini_batch_size=4",
                 f"generator.n_samples_per_prompt={ROLLOUTS}", "trainer.placement.colocate_all=false",
                 "generator.batched=false", "trainer.logger=console", "trainer.eval_interval=-1",
                 # no vLLM engines to scrape metrics from (the scraper asks Ray), no dataloader processes
                 "generator.inference_engine.enable_ray_prometheus_stats=false", "data.dataloader.num_workers=0"]
    overrides += [f"{k}={v}" for k, v in extra.items()]
    return config_from_args(overrides)


@pytest.fixture(scope="module")
def tokenizer(tiny_model_dir):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    tok.padding_side = "left"
    if tok.pad_token is None:
        tok.pad_token, tok.pad_token_id = tok.eos_token, tok.eos_token_id
    return tok


def as_skyrl_sees_them(trajs):
    """The trajectories as SkyRL's rows describe them (creditflow_rows): the start state is the task's prompt,
    every later state the env's reply before the step; no recorded next state (the next step's, then the
    success node or a dead end); every action valid; the outcome is the last step's reward (success when
    above 0), as SkyRL's own GRPO reads it in step-wise mode."""
    out = copy.deepcopy(trajs)
    for t in out:
        t.steps[0].state = f"prompt of {t.group_id}"
        for s in t.steps:
            s.next_state, s.observation, s.valid = None, "", True
        t.final_state, t.score = "", t.steps[-1].reward
        t.success = t.score > 0
    return out


def make_trainer(cfg, tokenizer, dataset_file, cls=cf_skyrl.CreditflowRayPPOTrainer, dp_size=8):
    from skyrl.train.dataset import PromptDataset

    dataset = PromptDataset(datasets=[str(dataset_file)], tokenizer=tokenizer,
                            max_prompt_length=cfg.trainer.max_prompt_length, num_workers=1)
    trainer = cls(cfg=cfg, tracker=None, tokenizer=tokenizer, train_dataset=dataset, inference_engine_client=None,
                  generator=None)
    # the worker dispatch (FSDP workers on GPUs): convert_to_training_input reads its data-parallel size alone
    trainer.dispatch = SimpleNamespace(get_lcm_dp_size=lambda: dp_size)
    return trainer


def generator_output(trajs, step_wise=True, seed=0):
    """SkyRLGymGenerator's output for these trajectories: step-wise, one row per turn (prompt = the
    conversation so far; response = the model's tokens, loss mask 1, then the env's reply, loss mask 0; the
    step's env reward on its last model token); else one row per trajectory. Returns it, the uids (the
    instance id of each row) and, per row, (trajectory index, step or None, loss mask)."""
    tasks = {g: str(i) for i, g in enumerate(dict.fromkeys(t.group_id for t in trajs))}
    reps: dict = {}
    out = {k: [] for k in ("prompt_token_ids", "response_ids", "rewards", "loss_masks", "stop_reasons",
                           "trajectory_ids", "is_last_step")}
    where = []
    for k, (t, turns) in enumerate(zip(trajs, turn_tokens(trajs, seed))):
        uid = tasks[t.group_id]
        rep = reps.setdefault(uid, [0])
        tid, rep[0] = TrajectoryID(instance_id=uid, repetition_id=rep[0]), rep[0] + 1
        rows = []
        for i, (step, (prompt, response, mask)) in enumerate(zip(t.steps, turns)):
            reward = [0.0] * len(response)
            reward[max(j for j, m in enumerate(mask) if m == MODEL)] = float(step.reward)
            rows.append((prompt, response, reward, mask))
        if not step_wise:  # one row: the conversation after the prompt, env replies masked
            rows = [(rows[0][0], sum((r[1] for r in rows), []), sum((r[2] for r in rows), []),
                     sum((r[3] for r in rows), []))]
        for i, (prompt, response, reward, mask) in enumerate(rows):
            out["prompt_token_ids"].append(prompt)
            out["response_ids"].append(response)
            out["rewards"].append(reward)
            out["loss_masks"].append(mask)
            out["stop_reasons"].append("stop")
            out["trajectory_ids"].append(tid)
            out["is_last_step"].append(i == len(rows) - 1)
            where.append((k, i if step_wise else None, mask))
    out.update(rollout_metrics=None, rollout_logprobs=None)
    if not step_wise:
        out.pop("is_last_step")
    uids = [tid.instance_id for tid in out["trajectory_ids"]]
    return out, uids, where


def training_batch(trainer, trajs, step_wise=True):
    """SkyRL's own steps from the generator's output to the batch compute_advantages_and_returns takes."""
    out, uids, where = generator_output(trajs, step_wise)
    out, uids = trainer.postprocess_generator_output(out, uids)
    data = trainer.convert_to_training_input(out, uids)
    data["values"] = None  # fwd_logprobs_values_reward's output without a critic
    return data, where


# --------------------------------------------------------------------------------------------------
# registry and config
# --------------------------------------------------------------------------------------------------


def test_register_puts_every_estimator_in_skyrls_registry():
    import cloudpickle

    available = set(AdvantageEstimatorRegistry.list_available())
    assert set(cf_rows.ESTIMATORS) <= available and {"grpo", "rloo", "gae"} <= available
    fn = AdvantageEstimatorRegistry.get("rewardflow")
    assert fn == cf_skyrl.SkyRLEstimator("rewardflow") and fn.__name__ == "creditflow_rewardflow_advantage"
    assert cloudpickle.loads(cloudpickle.dumps(fn)) == fn  # SkyRL's registry actor rebuilds it by name
    assert AdvantageEstimatorRegistry.get("grpo").__module__ == "skyrl.backends.skyrl_train.utils.ppo_utils"
    cf_skyrl.register()  # idempotent
    assert AdvantageEstimatorRegistry.get("rewardflow") is fn


def test_an_estimator_registered_later_joins_skyrl_with_no_edit(extra_estimator):
    cf_skyrl.register()
    assert extra_estimator in cf_rows.ESTIMATORS
    assert AdvantageEstimatorRegistry.get(extra_estimator) == cf_skyrl.SkyRLEstimator(extra_estimator)


def test_skyrls_validate_cfg_accepts_the_names(tiny_model_dir, dataset_file):
    for name in cf_rows.ESTIMATORS:
        validate_cfg(skyrl_cfg(tiny_model_dir, dataset_file, name, **{"trainer.algorithm.creditflow.ddof": 0}))


# --------------------------------------------------------------------------------------------------
# SkyRL's trainer: step-wise rows -> per-step advantages on the model's tokens
# --------------------------------------------------------------------------------------------------


def token_advantages(data, where, trajs):
    """Per step (trajectory-major order): its advantage, checked to sit on exactly its loss-mask tokens."""
    adv = data["advantages"].numpy()
    offsets = np.cumsum([0] + [len(t.steps) for t in trajs])
    got = np.full(offsets[-1], np.nan)
    for row, (k, step, mask) in enumerate(where):
        m = np.array(mask)
        start = adv.shape[1] - len(m)  # SkyRL 0.4 right-aligns a response in the response slice
        values = adv[row, start:][m == MODEL]
        assert (values == values[0]).all()
        assert not adv[row, start:][m == ENV].any()  # the env's reply: none
        assert not adv[row, :start].any()  # the slice's positions before the response (prompt, padding): none
        got[offsets[k] + step] = values[0]
    assert not np.isnan(got).any()
    return got


@pytest.mark.parametrize("name", list(cf_rows.ESTIMATORS))
def test_each_steps_advantage_lands_on_exactly_its_model_tokens(tiny_model_dir, tokenizer, dataset_file, trajs, name):
    trainer = make_trainer(skyrl_cfg(tiny_model_dir, dataset_file, name), tokenizer, dataset_file)
    data, where = training_batch(trainer, trajs)
    pad = data.metadata["pad_size"]
    assert pad > 0  # SkyRL's pad_batch added rows: they must get nothing
    data = trainer.compute_advantages_and_returns(data)
    adv = data["advantages"]
    assert adv.shape == data["response_mask"].shape  # response-aligned: no prompt token has one
    assert not adv[len(where):].any()
    got = token_advantages(data, where, trajs)
    np.testing.assert_allclose(got, expected(as_skyrl_sees_them(trajs), name).astype(np.float32), rtol=1e-6,
                               atol=1e-7)
    assert trainer.all_metrics["groups/entropy"] > 0 and "loss/avg_raw_advantages" in trainer.all_metrics


@pytest.mark.parametrize("name", ["rewardflow", "creditflow_grpo"])
def test_no_step_trains_with_zero_advantage_unless_its_estimator_says_so(tiny_model_dir, tokenizer, dataset_file,
                                                                        trajs, name):
    trainer = make_trainer(skyrl_cfg(tiny_model_dir, dataset_file, name), tokenizer, dataset_file)
    data, where = training_batch(trainer, trajs)
    data = trainer.compute_advantages_and_returns(data)
    per_row = [data["advantages"][row][torch.tensor([0] * (data["loss_mask"].shape[1] - len(mask)) + mask).bool()]
               for row, (_, _, mask) in enumerate(where)]
    zero = np.array([bool((v == 0).all()) for v in per_row])
    graded = as_skyrl_sees_them(trajs)
    np.testing.assert_array_equal(zero, expected(graded, name) == 0.0)
    mixed = {t.group_id for t in graded if t.success} & {t.group_id for t in graded if not t.success}
    rows = np.array([t.group_id in mixed for t in graded for _ in t.steps])
    assert rows.any() and not zero[rows].any()  # a group with both outcomes: every step of every trajectory


def test_stock_skyrl_step_wise_gives_every_step_its_last_steps_advantage(tiny_model_dir, tokenizer, dataset_file,
                                                                         trajs):
    """What SkyRL 0.4 does with any estimator in step-wise mode: the estimator sees the last steps alone, and
    every step gets its trajectory's last-step scalar on its own response mask (the 0.3.1 copy of the last
    step's token row, which left an earlier step's tokens past the last step's length at 0, is gone: SkyRL PR
    #1507). So a per-step estimator gets one advantage per trajectory there (why creditflow's trainer takes
    over). creditflow's GRPO, with SkyRL's outcome and std convention, gives the same advantage on every model
    token of every step."""
    stock = make_trainer(skyrl_cfg(tiny_model_dir, dataset_file, "grpo"), tokenizer, dataset_file, cls=RayPPOTrainer)
    theirs = stock.compute_advantages_and_returns(training_batch(stock, trajs)[0])
    trainer = make_trainer(skyrl_cfg(tiny_model_dir, dataset_file, "creditflow_grpo",
                                     **{"trainer.algorithm.creditflow.reward_source": "score",
                                        "trainer.algorithm.creditflow.eps": 1e-6}), tokenizer, dataset_file)
    data, where = training_batch(trainer, trajs)
    ours = trainer.compute_advantages_and_returns(data)
    last_row = {k: row for row, (k, _, _) in enumerate(where)}  # each trajectory's last step
    for row, (k, _, mask) in enumerate(where):
        loss = ours["loss_mask"][row].bool()
        final = theirs["advantages"][last_row[k]][ours["loss_mask"][last_row[k]].bool()][0]
        np.testing.assert_allclose(theirs["advantages"][row][loss].numpy(), np.full(int(loss.sum()), final.item()),
                                   rtol=1e-6, atol=1e-7)  # SkyRL's: the last step's scalar on every step
        np.testing.assert_allclose(ours["advantages"][row][loss].numpy(), np.full(int(loss.sum()), final.item()),
                                   rtol=1e-5, atol=1e-6)
    # and SkyRL's grpo through creditflow's trainer class is SkyRL's own
    same = make_trainer(skyrl_cfg(tiny_model_dir, dataset_file, "grpo"), tokenizer, dataset_file)
    again = same.compute_advantages_and_returns(training_batch(same, trajs)[0])
    assert torch.equal(again["advantages"], theirs["advantages"])


def test_merged_step_wise_rows_are_refused_in_one_line(tiny_model_dir, tokenizer, dataset_file, trajs):
    """generator.merge_stepwise_output=true (SkyRL 0.4) merges a trajectory's turns into one row: creditflow's
    estimators say why they cannot run on it."""
    cfg = skyrl_cfg(tiny_model_dir, dataset_file, "rewardflow", **{"generator.merge_stepwise_output": "true"})
    trainer = make_trainer(cfg, tokenizer, dataset_file)
    with pytest.raises(cf_rows.LayoutError, match="merge_stepwise_output"):
        trainer.compute_advantages_and_returns(training_batch(trainer, trajs)[0])


def test_an_unflagged_last_step_is_one_error(tiny_model_dir, tokenizer, dataset_file, trajs):
    """is_last_step is the only trajectory boundary SkyRL 0.4 keeps: a missing flag between two instances' rows
    is refused in one line instead of joining their steps into one trajectory."""
    trainer = make_trainer(skyrl_cfg(tiny_model_dir, dataset_file, "rewardflow"), tokenizer, dataset_file)
    data, where = training_batch(trainer, trajs)
    flags = list(data.metadata["is_last_step"])
    boundary = next(row for row, (k, _, _) in enumerate(where[:-1]) if where[row + 1][0] != k
                    and trajs[k].group_id != trajs[where[row + 1][0]].group_id)
    flags[boundary] = False
    data.metadata["is_last_step"] = flags
    with pytest.raises(cf_rows.LayoutError, match="no is_last_step between them"):
        trainer.compute_advantages_and_returns(data)


def test_without_creditflows_trainer_the_estimator_says_what_to_do(tiny_model_dir, tokenizer, dataset_file, trajs):
    stock = make_trainer(skyrl_cfg(tiny_model_dir, dataset_file, "rewardflow"), tokenizer, dataset_file,
                         cls=RayPPOTrainer)
    with pytest.raises(cf_rows.LayoutError, match="skyrl_main"):
        stock.compute_advantages_and_returns(training_batch(stock, trajs)[0])


def test_one_row_per_trajectory_reduces_to_skyrls_grpo(tiny_model_dir, tokenizer, dataset_file, trajs):
    """generator.step_wise_trajectories=false: one row per trajectory (its turns concatenated, the env's
    replies masked); creditflow_grpo with SkyRL's outcome and std convention is SkyRL's grpo, on the model's
    tokens."""
    knobs = {"trainer.algorithm.creditflow.reward_source": "score", "trainer.algorithm.creditflow.eps": 1e-6}
    ours = make_trainer(skyrl_cfg(tiny_model_dir, dataset_file, "creditflow_grpo", step_wise=False, **knobs),
                        tokenizer, dataset_file)
    data, where = training_batch(ours, trajs, step_wise=False)
    data = ours.compute_advantages_and_returns(data)
    stock = make_trainer(skyrl_cfg(tiny_model_dir, dataset_file, "grpo", step_wise=False), tokenizer, dataset_file,
                         cls=RayPPOTrainer)
    theirs = stock.compute_advantages_and_returns(training_batch(stock, trajs, step_wise=False)[0])
    n = len(where)
    assert n == len(trajs)
    loss = data["loss_mask"][:n].bool()
    np.testing.assert_allclose(data["advantages"][:n][loss].numpy(), theirs["advantages"][:n][loss].numpy(),
                               rtol=1e-5, atol=1e-6)
    assert not data["advantages"][:n][~loss].any()  # env replies inside the row: none (SkyRL's own puts them there)


def test_skyrl_main_builds_skyrls_experiment_with_creditflows_trainer(tiny_model_dir, dataset_file):
    """python -m creditflow.integrations.skyrl_main: SkyRL's BasePPOExp (tokenizer, dataset, no placement
    group without colocate_all) whose get_trainer returns creditflow's trainer."""
    from creditflow.integrations import skyrl_main

    cfg = skyrl_cfg(tiny_model_dir, dataset_file, "rewardflow")
    validate_cfg(cfg)
    exp = skyrl_main.CreditflowPPOExp(cfg)
    trainer = exp.get_trainer(cfg, None, exp.tokenizer, exp.train_dataset, exp.eval_dataset, None, None,
                              exp.colocate_pg)
    assert isinstance(trainer, cf_skyrl.CreditflowRayPPOTrainer) and isinstance(trainer, RayPPOTrainer)
    assert len(exp.train_dataset) == 4
    assert cfg.trainer.algorithm.creditflow == {} and skyrl_main.config_from_args(
        ["trainer.override_entrypoint=creditflow.integrations.skyrl_main",
         "trainer.algorithm.creditflow.gamma=0.5"]).trainer.algorithm.creditflow == {"gamma": 0.5}
