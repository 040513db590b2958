"""policy.rollout_dtype=bf16: the hf backend samples with a bfloat16 copy of the float32 weights, refreshed by
sync_weights after each update, while the trained module stays float32."""

import pytest
import torch

from creditflow.config import build_config
from creditflow.envs import make
from creditflow.policy.backends.base import SamplingParams
from creditflow.policy.backends.hf import HFBackend, rollout_copy
from creditflow.policy.load import load_policy
from creditflow.policy.prompts import ChatTemplate, PromptBuilder
from creditflow.recipes.train import run_train
from creditflow.trainer.metrics import read_metrics


def prompts(tok, seeds=range(4)):
    chat, pb, env = ChatTemplate(tok), PromptBuilder("sokoban", template="compact"), make("sokoban")
    out = []
    for seed in seeds:
        obs, info = env.reset(seed=seed)
        out.append(chat.encode(pb.chat(info["task"], [], obs, info["admissible_actions"])))
    return out


def generations(backend, batch, seed=0):
    torch.manual_seed(seed)
    return backend.generate(batch, SamplingParams(max_new_tokens=6, temperature=1.0))


@pytest.mark.parametrize("decode", ["hf", "lean"])
def test_the_copy_samples_as_the_model_cast_to_bf16_and_the_trained_model_is_untouched(tiny_model_dir, decode):
    model, tok = load_policy(tiny_model_dir, "cpu")
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    backend = HFBackend(model, tok, decode=decode, rollout_dtype="bf16")
    assert backend.copied and backend.model is not model
    assert {p.dtype for p in backend.model.parameters()} == {torch.bfloat16}
    assert all(not p.requires_grad for p in backend.model.parameters())
    # the rotary frequencies stay in float32: the positions are not rounded to bf16
    assert {b.dtype for b in backend.model.buffers() if b.is_floating_point()} == {torch.float32}
    cast = load_policy(tiny_model_dir, "cpu")[0]
    for p in cast.parameters():
        p.data = p.data.to(torch.bfloat16)
    batch = prompts(tok)
    got, want = generations(backend, batch), generations(HFBackend(cast, tok, decode=decode), batch)
    assert [g.token_ids for g in got] == [w.token_ids for w in want]
    assert [g.logprobs for g in got] == [w.logprobs for w in want]
    full = generations(HFBackend(model, tok, decode=decode), batch)
    assert [g.logprobs for g in got] != [f.logprobs for f in full]  # a bf16 policy's log-probs, not float32's
    assert all(p.dtype == torch.float32 and p.requires_grad for p in model.parameters())
    assert all(torch.equal(p, before[n]) for n, p in model.named_parameters())


def test_sync_weights_carries_an_update_into_the_copy(tiny_model_dir):
    model, tok = load_policy(tiny_model_dir, "cpu")
    backend, batch = HFBackend(model, tok, rollout_dtype="bf16"), prompts(tok)
    old = generations(backend, batch)
    with torch.no_grad():  # an "update": every weight moves
        for p in model.parameters():
            p.add_(0.05 * torch.randn_like(p))
    assert [g.logprobs for g in generations(backend, batch)] == [g.logprobs for g in old]  # stale until synced
    backend.sync_weights(model)
    for (name, mine), (_, theirs) in zip(backend.model.named_parameters(), model.named_parameters()):
        assert torch.equal(mine, theirs.to(torch.bfloat16)), name
    fresh = HFBackend(rollout_copy(model), tok)
    assert [g.logprobs for g in generations(backend, batch)] == [g.logprobs for g in generations(fresh, batch)]


def test_a_half_precision_model_is_sampled_as_it_is(tiny_model_dir):
    model, tok = load_policy(tiny_model_dir, "cpu", "bfloat16")
    backend = HFBackend(model, tok, rollout_dtype="bf16")
    assert not backend.copied and backend.model is model
    with pytest.raises(ValueError, match="rollout_dtype must be same or bf16"):
        HFBackend(model, tok, rollout_dtype="fp8")


def test_rollout_dtype_needs_the_hf_backend(tmp_path):
    with pytest.raises(ValueError, match="rollout_dtype=bf16 is a copy the hf backend samples with"):
        build_config(None, [f"out_dir={tmp_path}", "policy.rollout_dtype=bf16", "policy.backend=vllm"])


@pytest.mark.parametrize("lora", [False, True])
def test_a_run_with_a_bf16_copy_trains_float32_and_logs_the_gap(tmp_path, tiny_model_dir, lora):
    """Full fine-tuning and LoRA (the copy is of the adapted model; its adapters follow the updates)."""
    cfg = build_config(None, [f"out_dir={tmp_path / 'run'}", f"policy.model={tiny_model_dir}", "rl.steps=2",
                              f"policy.lora={str(lora).lower()}",
                              "rollout.tasks_per_step=2", "rollout.group_size=2", "rl.eval_episodes=2",
                              "rl.eval_every=1", "generation.max_new_tokens=6", "rollout.max_steps=3", "rl.lr=1e-2",
                              "rl.algo=rewardflow", "rl.kl_coef=0", "rl.entropy_coef=0.01",  # a gradient without successes
                              "policy.rollout_dtype=bf16", "rl.save_every=1"])
    out, trainer, _ = run_train(cfg, log=lambda *_: None)
    rows = read_metrics(out / "metrics.jsonl")
    gaps = [r["train/rollout_logprob_gap"] for r in rows[1:]]
    assert all(0 < g < 0.1 for g in gaps), gaps  # bf16 against float32: small, never zero
    assert all(r["train/update_skipped"] == 0.0 for r in rows[1:])
    backend = trainer.train_engine.backend
    start = {n.split("base_model.model.")[-1].replace(".base_layer", ""): p
             for n, p in load_policy(tiny_model_dir, "cpu")[0].named_parameters()}
    moved = [not torch.equal(start[n.split("base_model.model.")[-1].replace(".base_layer", "")], p)
             for n, p in trainer.model.named_parameters() if "lora_" not in n]
    assert any(moved) != lora  # full fine-tuning moved the weights; LoRA only its adapters
    assert backend is trainer.eval_engine.backend and backend.copied  # one copy, evaluated as trained
    assert {p.dtype for p in trainer.model.parameters()} == {torch.float32}
    for (name, mine), (_, theirs) in zip(backend.model.named_parameters(), trainer.model.named_parameters()):
        assert torch.equal(mine, theirs.detach().to(torch.bfloat16)), name  # synced after the last update
    saved, _ = load_policy(out / "checkpoints" / "step_000002", "cpu")  # a LoRA adapter loads merged
    assert {p.dtype for p in saved.parameters()} == {torch.float32}
