"""LoRA in the RL kernel: only the adapter trains, the base stays bit-identical and is the KL reference,
merged weights equal PEFT's merge, target modules are checked against the model, SFT merges its adapter."""

import copy

import numpy as np
import pytest
import torch

from creditflow.config import LoRAConfig, SFTConfig, build_config
from creditflow.envs import make
from creditflow.errors import UserError
from creditflow.policy import lora
from creditflow.policy.load import load_policy
from creditflow.policy.tiny import tiny_config
from creditflow.policy.validate import model_config
from creditflow.policy.prompts import PromptBuilder
from creditflow.rollout.expert import expert_trajectories
from creditflow.trainer.forward import Forward
from creditflow.trainer.rl import policy_update
from creditflow.trainer.sequences import Sample, window_rows
from creditflow.trainer.sft import demo_examples, train_sft
from creditflow.trainer.trl_runner import TRLOptions

SETTINGS = LoRAConfig(enabled=True, r=4, alpha=8)


def lora_policy(tiny_model_dir, settings=SETTINGS):
    model, tok = load_policy(tiny_model_dir, "cpu", "float32")
    torch.manual_seed(0)
    return lora.wrap(model, settings, base_dir=tiny_model_dir), tok


def rows(model, tok):
    """Four decisions with +-1 advantages; behaviour log-probs = the current policy's (ratio 1)."""
    prompt = tok("######\n#P_X_#")["input_ids"]
    responses = [(tok(f"<action>{a}</action>")["input_ids"], adv)
                 for a, adv in (("up", 1.0), ("down", -1.0), ("left", 1.0), ("right", -1.0))]
    samples = [Sample(prompt, resp, [0.0] * len(resp), adv) for resp, adv in responses]
    model.eval()
    for s, lp in zip(samples, Forward(tok.pad_token_id, 4096).logprobs(model, window_rows(samples))):
        s.old_logprobs = lp
    return window_rows(samples)


def update(model, tok, steps=2, lr=1e-2):
    cfg = build_config(None, [f"rl.lr={lr}", "rl.kl_coef=0"])
    optimizer = torch.optim.AdamW(lora.trainable_parameters(model), lr=lr)
    for _ in range(steps):
        policy_update(model, optimizer, rows(model, tok), cfg.rl,
                      Forward.from_sections(cfg.rl, cfg.rollout, cfg.policy, tok.pad_token_id),
                      np.random.default_rng(0))
    return optimizer


def test_an_rl_step_changes_only_the_adapter(tiny_model_dir):
    model, tok = lora_policy(tiny_model_dir)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    optimizer = update(model, tok)
    adapter = {n for n, p in model.named_parameters() if p.requires_grad}
    assert adapter and all(".lora_A." in n or ".lora_B." in n for n in adapter)
    held = [p for group in optimizer.param_groups for p in group["params"]]
    assert len(held) == len(adapter) and sum(p.numel() for p in held) < 0.25 * sum(p.numel() for p in before.values())
    changed = {n for n, p in model.named_parameters() if not torch.equal(p, before[n])}
    assert changed and changed <= adapter  # every base weight bit-identical
    assert any(".lora_B." in n for n in changed)


def test_the_kl_reference_is_the_base_model_with_the_adapter_off(tiny_model_dir):
    model, tok = lora_policy(tiny_model_dir)
    update(model, tok)
    base, _ = load_policy(tiny_model_dir, "cpu", "float32")
    batch = rows(model, tok)
    fwd = Forward(tok.pad_token_id, 4096)
    want = fwd.logprobs(base.eval(), batch)
    model.train()
    with lora.adapter_disabled(model) as ref:
        assert not ref.training
        got = fwd.logprobs(ref, batch)
    assert model.training  # mode restored, adapter back on
    assert got == want  # exactly: the same base weights, the same kernels
    trained = fwd.logprobs(model, batch)
    assert max(abs(a - b) for x, y in zip(trained, want) for a, b in zip(x, y)) > 1e-3


def test_merged_weights_equal_peft_merge_and_leave_the_base_alone(tiny_model_dir):
    model, tok = lora_policy(tiny_model_dir)
    update(model, tok)
    base = {n: t.clone() for n, t in model.get_base_model().state_dict().items()}
    merged = dict(lora.merged_weights(model))
    want = copy.deepcopy(model).merge_and_unload().state_dict()
    assert set(merged) == set(want) == set(load_policy(tiny_model_dir, "cpu")[0].state_dict())
    for name in want:
        torch.testing.assert_close(merged[name], want[name], rtol=0, atol=1e-6, msg=name)
    assert all(torch.equal(t, base[n]) for n, t in model.get_base_model().state_dict().items())
    plain = load_policy(tiny_model_dir, "cpu")[0].state_dict()
    assert any(not torch.equal(merged[n], plain[n]) for n in plain)  # the update is in there


def test_target_modules_are_checked_against_the_model(tiny_model_dir):
    config = model_config(tiny_model_dir)
    lora.check_targets(LoRAConfig(target_modules=["q_proj", "v_proj", "down_proj"]), config)
    lora.check_targets(LoRAConfig(target_modules="all-linear"), config)
    lora.check_targets(LoRAConfig(target_modules=["q_proj"]), tiny_config())
    with pytest.raises(UserError, match=r"no module 'qkv_proj' in the model \(its layers: .*q_proj"):
        lora.check_targets(LoRAConfig(target_modules=["q_proj", "qkv_proj"]), config)
    with pytest.raises(UserError, match="'self_attn' is a Qwen2Attention, not a layer LoRA can wrap"):
        lora.check_targets(LoRAConfig(target_modules=["self_attn"]), config)


def test_lora_sft_merges_its_adapter_into_the_model(tiny_model_dir, tmp_path):
    model, tok = load_policy(tiny_model_dir, "cpu", "float32")
    before = {n: t.clone() for n, t in model.state_dict().items()}
    examples = demo_examples(expert_trajectories(lambda: make("sokoban"), [1, 2, 3]), PromptBuilder("sokoban"))
    metrics = train_sft(model, tok, examples, SFTConfig(epochs=1, lr=1e-2, batch_size=2, max_length=512),
                        TRLOptions(tmp_path, lora=SETTINGS))
    assert metrics["sft/steps"] >= 3  # the first is warmup (learning rate 0)
    assert set(model.state_dict()) == set(before)  # a plain model again: no adapter left in it
    assert not any(isinstance(m, lora.LoraLayer) for m in model.modules())
    assert any(not torch.equal(model.state_dict()[n], before[n]) for n in before)
