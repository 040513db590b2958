"""creditflow's per-step credit inside the real TRL GRPOTrainer (1.16) on the tiny policy, on CPU.

Both ways TRL runs multi-turn episodes are exercised (benchmarks/trl_walk.py): a ``rollout_func`` that
returns ``env_mask`` / ``state_keys`` / ``success``, and an ``environment_factory`` whose ``move`` tool the
tiny policy calls (after a few seconds of SFT). Expected advantages are computed independently of the
integration: trajectories built from what the rollout_func returned (or what the environments recorded),
scored by ``creditflow.credit.score``, placed on the turns' tokens found by a plain loop over the mask.
"""

import importlib.util
import json
import os
import socket
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("trl", minversion="1.16.0")
# .venv-verl and .venv-skyrl have TRL 1.16 too, with their own transformers: run in the main env only
if importlib.util.find_spec("verl") is not None or importlib.util.find_spec("skyrl") is not None:
    pytest.skip("the TRL integration is tested in the main environment", allow_module_level=True)

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

import torch  # noqa: E402
from datasets import Dataset  # noqa: E402
from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: E402
from trl import GRPOConfig, GRPOTrainer  # noqa: E402

from benchmarks.trl_walk import WalkEnv, success_reward, tool_calling_policy, tool_tokenizer, walk_rollout_func  # noqa: E402
from creditflow import credit  # noqa: E402
from creditflow.errors import UserError  # noqa: E402
from creditflow.integrations import trl as cf_trl  # noqa: E402
from creditflow.integrations.trl import CreditGRPOTrainer, TRLCreditError  # noqa: E402
from creditflow.rollout.trajectory import Step, Trajectory  # noqa: E402

G = 4  # rollouts per group
ROOT = Path(__file__).resolve().parents[2]


def config(tmp_path, **overrides) -> GRPOConfig:
    values = dict(output_dir=str(tmp_path / "out"), per_device_train_batch_size=8, num_generations=G,
                  max_completion_length=64, max_steps=1, logging_steps=1, report_to="none", use_cpu=True,
                  save_strategy="no", learning_rate=1e-3, disable_tqdm=True, activation_checkpointing=False,
                  bf16=False, seed=0)
    values.update(overrides)
    return GRPOConfig(**values)


def dataset(prompts=("walk a", "walk b")) -> Dataset:
    return Dataset.from_dict({"prompt": [[{"role": "user", "content": p}] for p in prompts]})


def batch_of(ds: Dataset) -> list[dict]:
    """The generation batch TRL's RepeatSampler makes: each row ``G`` times in a row."""
    return [dict(row) for row in ds for _ in range(G)]


class Recording:
    """A rollout_func that keeps what it returned (the test's independent record of the batch)."""

    def __init__(self, **kwargs):
        self.inner = walk_rollout_func(**kwargs)
        self.out = None

    def __call__(self, prompts, trainer):
        self.out = self.inner(prompts, trainer)
        return self.out


def rollout_trainer(model_dir, tmp_path, estimator="rewardflow", knobs=None, rollout=None, reward=success_reward,
                    ds=None, **cfg) -> CreditGRPOTrainer:
    model = AutoModelForCausalLM.from_pretrained(str(model_dir))
    tok = AutoTokenizer.from_pretrained(str(model_dir))
    return CreditGRPOTrainer(model=model, reward_funcs=reward, args=config(tmp_path, **cfg),
                             train_dataset=ds or dataset(), processing_class=tok,
                             rollout_func=rollout or Recording(), estimator=estimator, credit_knobs=knobs)


def runs(mask) -> list[tuple[int, int]]:
    """[start, end) of each run of 1s, by a plain loop (independent of cf_trl.turn_spans)."""
    out, start = [], None
    for t, m in enumerate(list(mask) + [0]):
        if m and start is None:
            start = t
        elif not m and start is not None:
            out.append((start, t))
            start = None
    return out


def expected(tok, estimator, knobs, prompt_ids, completion_ids, masks, keys, success, rewards, group=G):
    """(advantages per rollout per turn, spans) from credit.score on trajectories built from the raw batch,
    rollout i in group ``i // group``."""
    spans = [runs(m) for m in masks]
    trajs = []
    for i, ids in enumerate(completion_ids):
        obs = [tok.decode(prompt_ids[i])] + [tok.decode(ids[e:s]) for (_, e), (s, _) in zip(spans[i], spans[i][1:])]
        n = len(spans[i])
        steps = [Step(state=keys[i][k], observation=obs[k], action="", reward=rewards[i] if k == n - 1 else 0.0)
                 for k in range(n)]
        trajs.append(Trajectory(task_id=f"g{i // group}", group_id=f"g{i // group}", traj_id=str(i), steps=steps,
                                success=bool(success[i]), score=float(rewards[i])))
    scored = credit.score(trajs, estimator, **(knobs or {}))
    return [[s.advantage for s in t.steps] for t in scored], spans


def check_placement(advantages: torch.Tensor, loss_mask: torch.Tensor, step_adv, spans) -> None:
    """Each turn's advantage on exactly its tokens, all of them trained; 0 on every other position."""
    want = np.zeros(tuple(advantages.shape), dtype=np.float64)
    for row, (adv, row_spans) in enumerate(zip(step_adv, spans)):
        assert len(adv) == len(row_spans)
        for a, (s, e) in zip(adv, row_spans):
            want[row, s:e] = a
            assert bool(loss_mask[row, s:e].all()), "a turn's tokens must all be trained"
    np.testing.assert_allclose(advantages.double().numpy(), want, rtol=0, atol=1e-6)
    assert not bool(((advantages != 0) & (loss_mask == 0)).any()), "advantage on an env/tool or padding token"


def rollout_batch(trainer, ds=None):
    trainer.model.train()
    torch.manual_seed(0)
    return trainer._generate_and_score_completions(batch_of(ds or dataset()))


def expected_for_rollouts(trainer, estimator, knobs=None, group=G):
    out = trainer.rollout_func.out
    rewards = [float(s) for s in out["success"]]
    return expected(trainer.processing_class, estimator, knobs, out["prompt_ids"], out["completion_ids"],
                    out["env_mask"], out["state_keys"], out["success"], rewards, group)


def loss_mask(output) -> torch.Tensor:
    mask = output["completion_mask"]
    return mask * output["tool_mask"] if "tool_mask" in output else mask


# --------------------------------------------------------------------------------------------------
# the pure part
# --------------------------------------------------------------------------------------------------


def test_turn_spans_are_the_runs_of_assistant_tokens():
    assert cf_trl.turn_spans([1, 1, 0, 0, 1, 0, 1, 1], 8) == [(0, 2), (4, 5), (6, 8)]
    assert cf_trl.turn_spans([0, 1, 1, 0], 4) == [(1, 3)]
    assert cf_trl.turn_spans([1, 1, 0, 1, 1, 1], 4) == [(0, 2), (3, 4)]  # TRL pads tool_mask with 1 past the end
    assert cf_trl.turn_spans(None, 5) == [(0, 5)]
    assert cf_trl.turn_spans([0, 0], 2) == []


def test_place_advantages_puts_each_step_on_its_turn():
    out = cf_trl.place_advantages([np.array([0.5, -1.0]), np.array([2.0])], [[(0, 2), (3, 5)], [(1, 2)]], 6)
    np.testing.assert_array_equal(out, [[0.5, 0.5, 0, -1, -1, 0], [0, 2, 0, 0, 0, 0]])
    assert out.dtype == np.float32


@pytest.mark.parametrize("estimator", ["rewardflow", "gigpo", "graphgpo", "g2po", "gagpo", "grpo", "rloo"])
def test_rollout_credit_is_credit_score(estimator):
    """The arrays the trainer builds give credit.score's advantages for the same rollouts (hand-made batch)."""
    rollouts = [
        cf_trl.Rollout(spans=[(0, 2), (5, 6), (8, 9)], state_keys=["s0", "s1", "s2"], observations=["o0", "o1", "o2"],
                       success=True),
        cf_trl.Rollout(spans=[(0, 1), (3, 4)], state_keys=["s0", "s0"], observations=["o0", "o0"], success=False),
        cf_trl.Rollout(spans=[(0, 3)], state_keys=["s0"], observations=["o0"], success=False),
        cf_trl.Rollout(spans=[(0, 1), (2, 3)], state_keys=["s0", "s1"], observations=["o0", "o1"], success=True),
    ]
    rewards = np.array([1.0, 0.0, 0.0, 1.0])
    got, metrics = cf_trl.rollout_credit(estimator, {}, rollouts, rewards, 2)
    trajs = [Trajectory(task_id=f"g{i // 2}", group_id=f"g{i // 2}", traj_id=str(i), success=bool(r.success),
                        score=float(rewards[i]),
                        steps=[Step(state=k, observation=o, action="", reward=rewards[i] if j == len(r.spans) - 1 else 0.0)
                               for j, (k, o) in enumerate(zip(r.state_keys, r.observations))])
             for i, r in enumerate(rollouts)]
    want = [[s.advantage for s in t.steps] for t in credit.score(trajs, estimator)]
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=0, atol=1e-12)
    assert metrics["credit/groups"] == 2


# --------------------------------------------------------------------------------------------------
# one line for what cannot apply, a bad estimator or knob
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("option, value", [("scale_rewards", "batch"), ("scale_rewards", "none"),
                                           ("multi_objective_aggregation", "normalize_then_sum")])
def test_options_that_cannot_apply_say_so_in_one_line(tmp_path, tiny_model_dir, option, value):
    with pytest.raises(TRLCreditError) as err:
        CreditGRPOTrainer(model=str(tiny_model_dir), reward_funcs=success_reward,
                          args=config(tmp_path, **{option: value}), train_dataset=dataset())
    msg = str(err.value)
    assert "\n" not in msg and f"GRPOConfig.{option}={value!r} does not apply" in msg
    assert not (tmp_path / "out").exists()  # refused before TRL did any work


@pytest.mark.parametrize("kwargs, needle", [({"estimator": "ppo"}, "unknown estimator 'ppo'"),
                                            ({"credit_knobs": {"gamma": 2.0}}, "gamma"),
                                            ({"credit_knobs": {"nope": 1}}, "nope")])
def test_bad_estimator_or_knob_is_one_line(tmp_path, kwargs, needle):
    with pytest.raises(UserError) as err:
        CreditGRPOTrainer(model="unused", reward_funcs=success_reward, args=config(tmp_path), **kwargs)
    assert needle in str(err.value) and "\n" not in str(err.value)


# --------------------------------------------------------------------------------------------------
# a multi-turn TRL step with each estimator; per-token advantages = credit.score's, on exactly the turns
# --------------------------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("estimator, loss_type", [("rewardflow", "grpo"), ("gigpo", "dapo"), ("grpo", "dr_grpo"),
                                                  ("rloo", "bnpo")])
def test_multi_turn_training_step_runs_with_each_estimator(tmp_path, tiny_model_dir, estimator, loss_type):
    trainer = rollout_trainer(tiny_model_dir, tmp_path, estimator, loss_type=loss_type)
    before = [p.detach().clone() for p in trainer.model.parameters()]
    trainer.train()
    log = trainer.state.log_history[0]
    assert np.isfinite(log["loss"]) and log["credit/groups"] == 2
    assert {"groups/all_zero_frac", "groups/all_one_frac", "groups/entropy", "time/credit_ms"} <= set(log)
    if estimator == "rewardflow":
        assert {"credit/graph_nodes", "credit/reach_success_frac", "credit/pruned_frac"} <= set(log)
    if log["grad_norm"] > 0:  # some advantage was not 0: the update moved the policy
        assert any(not torch.equal(a, b) for a, b in zip(before, trainer.model.parameters()))


@pytest.mark.parametrize("estimator", credit.estimator_names())  # every registered estimator, one added included
def test_per_token_advantages_are_credit_score_on_each_turn(tmp_path, tiny_model_dir, estimator):
    """Issue 61 part 4: a step's advantage lands on exactly its own response tokens (never the prompt, which
    the advantages do not cover, nor env tokens or padding), and no step trains with zero advantage unless
    its estimator gives it 0."""
    trainer = rollout_trainer(tiny_model_dir, tmp_path, estimator)
    output = rollout_batch(trainer)
    step_adv, spans = expected_for_rollouts(trainer, estimator)
    assert output["advantages"].shape == output["completion_ids"].shape
    check_placement(output["advantages"], loss_mask(output), step_adv, spans)
    # the batch has multi-step rollouts, and for the state-based estimators steps of one rollout that differ
    multi = [a for a in step_adv if len(a) > 1]
    assert multi
    if "state" in credit.estimator_needs(estimator):
        assert any(len(set(np.round(a, 9))) > 1 for a in multi), "per-step credit gives the steps of a rollout apart"
    for adv, row_spans, row in zip(step_adv, spans, output["advantages"]):
        for a, (s, e) in zip(adv, row_spans):
            assert (float(row[s]) == 0.0) == (a == 0.0)  # zero on a turn only where the estimator says 0


def test_evaluation_groups_and_the_completions_table(tmp_path, tiny_model_dir):
    """In evaluation the groups are TRL's ``num_generations_eval``; the completions table's advantage column
    is each rollout's mean over its turns, its turns' own in ``turn_advantages``."""
    trainer = rollout_trainer(tiny_model_dir, tmp_path, num_generations_eval=2, log_completions=True)
    trainer.model.eval()
    torch.manual_seed(0)
    output = trainer._generate_and_score_completions([dict(row) for row in dataset() for _ in range(2)])
    step_adv, spans = expected_for_rollouts(trainer, "rewardflow", group=2)
    check_placement(output["advantages"], loss_mask(output), step_adv, spans)
    assert trainer._metrics["eval"]["credit/groups"] == [2]
    assert list(trainer._logs["advantages"]) == pytest.approx([float(np.mean(a)) for a in step_adv])
    assert [list(t) for t in trainer._logs["extra"]["turn_advantages"]] == [
        pytest.approx(list(a), abs=1e-4) for a in step_adv]


LOSS_SETTINGS = ([{"loss_type": t} for t in ("grpo", "bnpo", "dr_grpo", "dapo", "luspo", "cispo", "sapo", "vespo")]
                 + [{"off_policy_mask_threshold": 0.0}, {"importance_sampling_level": "sequence", "loss_type": "grpo"}])


def test_every_loss_variant_takes_the_per_turn_advantages(tmp_path, tiny_model_dir):
    """TRL's own _compute_loss with each loss type (and the off-policy mask, GSPO's sequence ratio) on one batch
    with (B, T) advantages: a finite loss whose gradient reaches the policy. The settings are the trainer
    attributes GRPOTrainer copies them to from its config."""
    trainer = rollout_trainer(tiny_model_dir, tmp_path)
    output = rollout_batch(trainer)
    assert bool(output["advantages"].any())
    trainer.current_gradient_accumulation_steps = 1  # what Trainer's loop sets before its first step
    defaults = {"loss_type": trainer.loss_type, "off_policy_mask_threshold": None, "importance_sampling_level": "token"}
    for setting in LOSS_SETTINGS:
        for name, value in {**defaults, **setting}.items():
            setattr(trainer, name, value)
        trainer.model.zero_grad()
        loss = trainer._compute_loss(trainer.model, output)
        loss.backward()
        assert torch.isfinite(loss), setting
        assert any(p.grad is not None and bool(p.grad.abs().sum() > 0) for p in trainer.model.parameters()), setting


@pytest.mark.slow
def test_padding_and_duplicated_prompts_change_nothing(tmp_path, tiny_model_dir):
    plain = rollout_trainer(tiny_model_dir, tmp_path / "a")
    padded = rollout_trainer(tiny_model_dir, tmp_path / "b", pad_to_multiple_of=32)
    a, b = rollout_batch(plain), rollout_batch(padded)
    width = a["advantages"].size(1)
    assert b["advantages"].size(1) % 32 == 0 and b["advantages"].size(1) >= width
    torch.testing.assert_close(b["advantages"][:, :width], a["advantages"], rtol=0, atol=0)
    assert not bool(b["advantages"][:, width:].any())
    # the same prompt twice in one batch: two groups, each scored as a group of its own
    twice = dataset(("walk a", "walk a"))
    dup = rollout_trainer(tiny_model_dir, tmp_path / "c", ds=twice)
    out = rollout_batch(dup, twice)
    step_adv, spans = expected_for_rollouts(dup, "rewardflow")  # groups by position: g0, g1
    check_placement(out["advantages"], loss_mask(out), step_adv, spans)
    rec = dup.rollout_func.out
    for g in range(2):  # and each group alone gives the same numbers
        rows = slice(g * G, (g + 1) * G)
        alone, _ = expected(dup.processing_class, "rewardflow", None, rec["prompt_ids"][rows],
                            rec["completion_ids"][rows], rec["env_mask"][rows], rec["state_keys"][rows],
                            rec["success"][rows], [float(s) for s in rec["success"][rows]])
        for x, y in zip(alone, step_adv[rows]):
            np.testing.assert_allclose(x, y, rtol=0, atol=1e-12)


@pytest.mark.parametrize("knobs, trl_scale", [({"eps": 1e-4}, "group"), ({"normalize_std": False}, "none")])
def test_one_turn_episodes_reduce_to_trls_grpo(tmp_path, tiny_model_dir, knobs, trl_scale):
    """Without a rollout_func or tools every completion is one step: creditflow's GRPO (TRL's sample std,
    ``eps=1e-4``; ``normalize_std=false`` for ``scale_rewards="none"``) gives TRL's own advantages."""

    def length_reward(completions, **kwargs):
        return [float(len(c[0]["content"]) % 3) for c in completions]

    def build(cls, sub, cfg, **extra):
        model = AutoModelForCausalLM.from_pretrained(str(tiny_model_dir))
        tok = AutoTokenizer.from_pretrained(str(tiny_model_dir))
        return cls(model=model, reward_funcs=length_reward, processing_class=tok, train_dataset=dataset(),
                   args=config(tmp_path / sub, max_completion_length=6, **cfg), **extra)

    theirs = build(GRPOTrainer, "trl", {"scale_rewards": trl_scale})
    ours = build(CreditGRPOTrainer, "cf", {}, estimator="grpo", credit_knobs=knobs)
    a, b = rollout_batch(theirs), rollout_batch(ours)
    torch.testing.assert_close(a["completion_ids"], b["completion_ids"], rtol=0, atol=0)  # the same samples
    assert a["advantages"].dim() == 1 and bool(a["advantages"].abs().sum() > 0)
    want = a["advantages"][:, None] * b["completion_mask"]
    torch.testing.assert_close(b["advantages"], want.float(), rtol=0, atol=1e-6)


@pytest.mark.slow
def test_a_group_split_across_two_processes_is_scored_whole(tmp_path, tiny_model_dir):
    """Under ``accelerate launch`` (2 CPU processes, gloo) TRL splits a generation batch across the processes
    and gathers the rewards; the credit step gathers the rollouts likewise, so a group whose rollouts sit on
    both processes gets the advantages of credit.score on the whole group, each process its own rows."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    out = tmp_path / "ranks.json"
    cmd = [str(Path(sys.executable).with_name("accelerate")), "launch", "--config_file",
           str(ROOT / "configs" / "accelerate" / "ddp.yaml"), "--num_processes", "2", "--main_process_port", str(port),
           "-m", "tests.integrations.trl_two_processes", str(tiny_model_dir), str(out)]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false", "HF_HUB_OFFLINE": "1",
           "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    ranks = json.loads(out.read_text())
    assert [r["size"] for r in ranks] == [2, 2]
    rec = {k: [v for r in ranks for v in r["record"][k]] for k in ranks[0]["record"]}
    tok = AutoTokenizer.from_pretrained(str(tiny_model_dir))
    step_adv, spans = expected(tok, "rewardflow", None, rec["prompt_ids"], rec["completion_ids"], rec["env_mask"],
                               rec["state_keys"], rec["success"], [float(s) for s in rec["success"]])
    row = 0
    for r in ranks:
        adv = torch.tensor(r["advantages"])
        mask = torch.tensor(r["completion_mask"]) * torch.tensor(
            [m + [1] * (adv.size(1) - len(m)) for m in r["record"]["env_mask"]])
        check_placement(adv, mask, step_adv[row:row + len(adv)], spans[row:row + len(adv)])
        row += len(adv)
        assert r["metrics"]["credit/groups"] == 3  # every process scored the whole batch
    assert row == 12


# --------------------------------------------------------------------------------------------------
# environment_factory: TRL's tool loop, states from the environment
# --------------------------------------------------------------------------------------------------


class TracedWalk(WalkEnv):
    """WalkEnv that records its state after reset and after every move (the test's own record)."""

    def reset(self, **kwargs):
        text = super().reset(**kwargs)
        self.trace = [self.state_key()]
        return text

    def move(self, d: str) -> str:
        """Move one cell along the line.

        Args:
            d: r (right) or l (left)
        """
        out = super().move(d)
        self.trace.append(self.state_key())
        return out


@pytest.fixture(scope="module")
def tool_policy(tiny_model_dir, tmp_path_factory):
    return tool_calling_policy(tiny_model_dir, tmp_path_factory.mktemp("tool_policy"))


def env_trainer(model_dir, tmp_path, env=TracedWalk, estimator="rewardflow", **kwargs) -> CreditGRPOTrainer:
    extra = {k: kwargs.pop(k) for k in ("state_key_fn", "success_threshold", "reward_funcs") if k in kwargs}
    return CreditGRPOTrainer(model=AutoModelForCausalLM.from_pretrained(str(model_dir)),
                             processing_class=tool_tokenizer(model_dir), train_dataset=dataset(),
                             args=config(tmp_path, **{"max_completion_length": 200, "max_tool_calling_iterations": 2,
                                                      **kwargs}),
                             environment_factory=env, estimator=estimator, **extra)


@pytest.mark.slow
def test_environment_factory_turns_get_their_own_advantage(tmp_path, tool_policy):
    trainer = env_trainer(tool_policy, tmp_path)
    tools = [t.__name__ for t in trainer._env_tools[None]]
    assert tools == ["move"]  # state_key and success are read by creditflow, not offered to the model
    output = rollout_batch(trainer)
    prompt_ids, completion_ids, masks, _ = trainer._cf_gen
    envs = trainer.environments
    spans = [runs(m[:len(c)]) for m, c in zip(masks, completion_ids)]
    assert any(len(s) > 1 for s in spans), "the tool-calling policy played several turns"
    for env, s in zip(envs, spans):
        assert len(env.trace) - 1 in (len(s) - 1, len(s))  # one move per turn (the last turn's may be dropped)
    keys = [env.trace[:len(s)] for env, s in zip(envs, spans)]
    rewards = [float(env.reached) for env in envs]
    step_adv, spans2 = expected(trainer.processing_class, "rewardflow", None, prompt_ids, completion_ids,
                                [m[:len(c)] for m, c in zip(masks, completion_ids)], keys,
                                [env.reached for env in envs], rewards)
    assert spans2 == spans
    check_placement(output["advantages"], loss_mask(output), step_adv, spans)
    trainer.train()  # and a full TRL step (generation, tool loop, loss, update) runs
    log = trainer.state.log_history[0]
    assert np.isfinite(log["loss"]) and "credit/graph_nodes" in log and "groups/entropy" in log


# --------------------------------------------------------------------------------------------------
# a missing state key or outcome: one error naming the field and the rollout
# --------------------------------------------------------------------------------------------------


class NoKeyWalk(WalkEnv):
    def state_key(self):
        return None


class NoOutcomeWalk:
    """An environment with neither ``success`` nor ``state_key``: its observations are the states."""

    def reset(self, **kwargs):
        return " Start."

    def move(self, d: str) -> str:
        """Move.

        Args:
            d: r or l
        """
        return "moved"

    def get_reward(self) -> float:
        return 0.0


class Unscored:
    """An environment that owns no reward (its rollouts are scored by the reward functions alone)."""

    def reset(self, **kwargs):
        return " Start."

    def move(self, d: str) -> str:
        """Move.

        Args:
            d: r or l
        """
        return "moved"


@pytest.mark.parametrize("env, estimator, kwargs, needle", [
    (NoKeyWalk, "rewardflow", {}, "rollout 0 (group 0), turn 0: environment.state_key() returned None"),
    (WalkEnv, "rewardflow", {"state_key_fn": lambda env: None},
     "rollout 0 (group 0), turn 0: state_key_fn(environment) returned None"),
    (NoOutcomeWalk, "rewardflow", {}, "rollout 0 (group 0): no outcome 'success'"),
    (Unscored, "grpo", {"reward_funcs": lambda completions, **kw: [None] * len(completions)},
     "rollout 0 (group 0): no outcome: every reward function returned None"),
])
def test_missing_state_key_or_outcome_is_one_error(tmp_path, tiny_model_dir, env, estimator, kwargs, needle):
    trainer = env_trainer(tiny_model_dir, tmp_path, env=env, estimator=estimator, max_completion_length=8, **kwargs)
    with pytest.raises(TRLCreditError) as err:
        rollout_batch(trainer)
    assert needle in str(err.value) and "\n" not in str(err.value)


def test_an_outcome_from_the_threshold_or_the_environment_is_enough(tmp_path, tiny_model_dir):
    trainer = env_trainer(tiny_model_dir, tmp_path, env=NoOutcomeWalk, success_threshold=1.0, max_completion_length=8)
    out = rollout_batch(trainer)  # no 'success' anywhere, but reward >= 1.0 defines it; all 0 here: advantages 0
    assert not bool(out["advantages"].any())


@pytest.mark.parametrize("field, value, needle", [
    ("state_keys", lambda keys: keys[:-1] if len(keys) > 1 else [], "rollout_func's 'state_keys' needs one entry per turn"),
    ("state_keys", lambda keys: [None] * len(keys), "turn 0: rollout_func's 'state_keys' is None"),
    ("success", None, "no outcome 'success'"),
])
def test_rollout_func_fields_missing_is_one_error(tmp_path, tiny_model_dir, field, value, needle):
    inner = walk_rollout_func()

    def broken(prompts, trainer):
        out = inner(prompts, trainer)
        if value is None:
            del out[field]
        else:
            out[field] = [value(v) for v in out[field]]
        return out

    trainer = rollout_trainer(tiny_model_dir, tmp_path, rollout=broken,
                              reward=lambda completions, **kw: [0.0] * len(completions))
    with pytest.raises(TRLCreditError) as err:
        rollout_batch(trainer)
    assert needle in str(err.value) and "rollout 0 (group 0)" in str(err.value) and "\n" not in str(err.value)


def test_a_rollout_func_without_state_keys_warns_once_and_trl_deprecations_stay_quiet(tmp_path, tiny_model_dir):
    """Issue 74 part 6: a state-grouping estimator on observation texts says so once; TRL's own deprecation of
    ``is_gradient_checkpointing`` (three times a step) is not shown."""
    inner = walk_rollout_func()

    def no_keys(prompts, trainer):
        out = inner(prompts, trainer)
        del out["state_keys"]
        return out

    trainer = rollout_trainer(tiny_model_dir, tmp_path, rollout=no_keys,
                              reward=lambda completions, **kw: [0.0] * len(completions))
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        rollout_batch(trainer)
        rollout_batch(trainer)
    ours = [w for w in seen if "grouped by their observation text" in str(w.message)]
    assert len(ours) == 1 and "rewardflow: the rollout_func returned no 'state_keys'" in str(ours[0].message)
    with warnings.catch_warnings(record=True) as seen:  # the filters in force: the trainer's comes first
        rollout_batch(trainer)
    assert not [w for w in seen if "is_gradient_checkpointing" in str(w.message)]
    quiet = rollout_trainer(tiny_model_dir, tmp_path / "grpo", rollout=no_keys, estimator="grpo",
                            reward=lambda completions, **kw: [0.0] * len(completions))
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        rollout_batch(quiet)
    assert not [w for w in seen if "observation text" in str(w.message)]  # GRPO reads no state


# --------------------------------------------------------------------------------------------------
# issue 74 part 3: one class, both routes (CreditGRPOTrainer and `--env trl:module:Class`)
# --------------------------------------------------------------------------------------------------


class ReadsWalk(WalkEnv):
    """docs/trl.md's class shape, whose outcome is not its reward: success is ``success()``, a method; the reward
    is a constant; and an expert for ``creditflow sft``."""

    def reset(self, **kwargs):
        text = super().reset(**kwargs)
        self.pos = 1  # so that the state differs from the observation text
        return text

    def success(self) -> bool:
        return self.pos == 1

    def get_reward(self) -> float:
        return 0.25

    def expert_actions(self) -> list[str]:
        return ["move(d='r')"]


def test_one_class_reads_the_same_through_both_routes(tmp_path, tiny_model_dir):
    from creditflow.envs import make

    trainer = env_trainer(tiny_model_dir, tmp_path, env=ReadsWalk, max_completion_length=8)
    adapted = make(f"trl:{__name__}:ReadsWalk")
    # the tools: the same, with creditflow's reads (state_key, success, expert_actions) in neither
    assert [t.__name__ for t in trainer._env_tools[None]] == list(adapted._tools) == ["move"]
    assert [t.__name__ for t in trainer.tools] == ["move"]
    rollout_batch(trainer)  # one turn each (the untrained policy calls no tool)
    rollouts = trainer._local_rollouts()
    _, info = adapted.reset(seed=0)
    *_, end = adapted.step("no tool call")
    # the state: state_key() in both (not the observation text); the outcome: success in both (not the reward)
    assert {r.state_keys[0] for r in rollouts} == {info["state_key"]} == {"pos=1"}
    assert {r.success for r in rollouts} == {end["won"]} == {True}
    assert end["score"] == 0.25
