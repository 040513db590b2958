"""``policy.autocast=bf16``: float32 weights, bfloat16 forward passes in generation, log-probs and update."""

import numpy as np
import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from creditflow.config import build_config
from creditflow.errors import UserError
from creditflow.policy.backends.base import SamplingParams
from creditflow.policy.backends.hf import HFBackend
from creditflow.policy.load import (CPU_FLOAT32_SDPA, autocast_note, check_device_and_dtype, float32_attention_on_cpu,
                                    load_policy, mixed_precision)
from creditflow.trainer.forward import Forward
from creditflow.trainer.rl import policy_update
from creditflow.trainer.sequences import Sample, collate, window_rows


def test_config_keeps_float32_weights_under_autocast():
    assert build_config(None, ["policy.autocast=bf16"]).policy.weights_dtype == "float32"
    assert build_config(None, []).policy.weights_dtype == "auto"
    assert build_config(None, ["policy.autocast=bf16", "policy.dtype=fp32"]).policy.weights_dtype == "fp32"
    with pytest.raises(UserError, match="autocast=bf16 keeps float32 weights"):
        build_config(None, ["policy.autocast=bf16", "policy.dtype=bf16"])
    with pytest.raises(UserError, match="policy.autocast"):
        build_config(None, ["policy.autocast=fp8"])
    check_device_and_dtype("cpu", "float32", "bf16")  # CPU autocast is available


def test_bf16_on_a_cpu_without_native_bf16_gets_a_note(tmp_path, monkeypatch):
    """bf16 autocast on an x86 CPU with neither AVX-512 BF16 nor AMX is emulated (several times slower than
    float32): the run says so in one line; with native bf16, on another architecture or without autocast it
    says nothing."""
    import platform

    monkeypatch.setattr(platform, "machine", lambda: "x86_64")
    avx2, native = tmp_path / "avx2", tmp_path / "native"
    avx2.write_text("processor\t: 0\nflags\t\t: fpu sse2 avx avx2\n")
    native.write_text("processor\t: 0\nflags\t\t: fpu avx2 avx512f avx512_bf16\n")
    note = autocast_note("cpu", "bf16", str(avx2))
    assert note.startswith("note: policy.autocast=bf16") and "AVX-512 BF16" in note
    assert autocast_note("cpu", "bf16", str(native)) is None
    assert autocast_note("cpu", "none", str(avx2)) is None
    assert autocast_note("cpu", "bf16", str(tmp_path / "missing")) is None  # cannot tell: no note
    copy_note = autocast_note("cpu", "none", str(avx2), rollout_dtype="bf16")  # the bf16 rollout copy: the same
    assert copy_note.startswith("note: policy.rollout_dtype=bf16") and "(policy.rollout_dtype=same)" in copy_note
    assert autocast_note("cpu", "none", str(native), rollout_dtype="bf16") is None
    monkeypatch.setattr(platform, "machine", lambda: "aarch64")
    assert autocast_note("cpu", "bf16", str(avx2)) is None


@pytest.fixture(scope="module")
def policy(tiny_model_dir):
    return load_policy(tiny_model_dir, "cpu", "float32")


def _samples(tok):
    prompt = tok("######\n#P_X_#\nAction:")["input_ids"]
    up, left = tok("<action>up</action>")["input_ids"], tok("<action>left</action>")["input_ids"]
    return [Sample(prompt, up, [0.0] * len(up), 1.0), Sample(prompt[:-2], left, [0.0] * len(left), -1.0)]


def test_logits_are_float32_from_a_bf16_forward(policy):
    model, tok = policy
    b = collate(window_rows(_samples(tok)), tok.pad_token_id, "cpu")
    with torch.no_grad():
        full, targets = Forward(tok.pad_token_id, 4096).trained_logits(model, b)
        mixed, same_targets = Forward(tok.pad_token_id, 4096, autocast="bf16").trained_logits(model, b)
    assert mixed.dtype == torch.float32 and torch.equal(targets, same_targets)
    assert not torch.equal(full, mixed)  # the forward really ran in bf16 ...
    assert torch.allclose(full, mixed, atol=0.1, rtol=0.05)  # ... and stays close to float32
    assert all(p.dtype == torch.float32 for p in model.parameters())
    with mixed_precision(model, "bf16"):
        assert torch.get_autocast_dtype("cpu") == torch.bfloat16 and torch.is_autocast_enabled("cpu")
    assert not torch.is_autocast_enabled("cpu")


class _AttentionDtypes(TorchDispatchMode):
    """Records the dtypes of the queries, keys and values each attention kernel gets, after autocast's casts."""

    def __init__(self):
        super().__init__()
        self.seen: list[tuple[torch.dtype, ...]] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if "scaled_dot_product" in func.__name__ and "backward" not in func.__name__:
            self.seen.append(tuple(a.dtype for a in args[:3]))
        return func(*args, **(kwargs or {}))


def test_cpu_autocast_runs_linear_layers_in_bf16_and_attention_in_float32(tiny_model_dir):
    """On CPU the bf16 flash-attention kernel is slower than the float32 one; bf16 matmuls are faster."""
    model, _ = load_policy(tiny_model_dir, "cpu", "float32")
    ids = torch.arange(40)[None].repeat(2, 1) % model.config.vocab_size
    mask = torch.ones_like(ids)
    mask[1, :7] = 0  # a padded row: attention gets an explicit mask
    layers = model.config.num_hidden_layers
    with torch.no_grad():
        plain = model(input_ids=ids, attention_mask=mask).logits
        with _AttentionDtypes() as bare, torch.autocast("cpu", dtype=torch.bfloat16):
            model(input_ids=ids, attention_mask=mask)
        assert bare.seen == [(torch.bfloat16,) * 3] * layers  # what plain CPU autocast does
        projected = []
        model.model.layers[0].self_attn.q_proj.register_forward_hook(lambda m, i, o: projected.append(o.dtype))
        with _AttentionDtypes() as ours, mixed_precision(model, "bf16"):
            mixed = model(input_ids=ids, attention_mask=mask).logits
        assert projected == [torch.bfloat16]  # the linear layers ran in bf16 ...
        assert ours.seen == [(torch.float32,) * 3] * layers  # ... attention in float32
        assert torch.allclose(plain, mixed.float(), atol=0.1, rtol=0.05)
        # outside autocast the switched model is the plain one, bit for bit
        assert torch.equal(model(input_ids=ids, attention_mask=mask).logits, plain)


def test_float32_attention_reaches_a_lora_models_base(tiny_model_dir):
    from peft import LoraConfig, get_peft_model

    model, _ = load_policy(tiny_model_dir, "cpu", "float32")
    lora = get_peft_model(model, LoraConfig(r=2, target_modules=["q_proj", "v_proj"]))
    with mixed_precision(lora, "bf16"):
        pass
    assert lora.get_base_model().config._attn_implementation == CPU_FLOAT32_SDPA
    float32_attention_on_cpu(torch.nn.Linear(2, 2))  # not a transformers model: left alone


def test_generation_logprobs_match_the_trainers_under_autocast(policy):
    """The behaviour log-probs of a bf16 generation are what the trainer's bf16 forward gives the same tokens."""
    model, tok = policy
    prompts = [s.prompt_ids for s in _samples(tok)]
    greedy = SamplingParams(max_new_tokens=6, temperature=0.0)
    gens = HFBackend(model, tok, autocast="bf16").generate(prompts, greedy)
    samples = [Sample(p, g.token_ids, g.logprobs, 1.0) for p, g in zip(prompts, gens)]
    mixed = Forward(tok.pad_token_id, 4096, autocast="bf16").logprobs(model, window_rows(samples))
    full = Forward(tok.pad_token_id, 4096).logprobs(model, window_rows(samples))
    for s, a, f in zip(samples, mixed, full):
        assert s.old_logprobs == pytest.approx(a, abs=0.02)
        assert a == pytest.approx(f, abs=0.1)
    with HFBackend(model, tok, autocast="bf16").prefix_cache() as cached:  # the prefix-cached loop, too
        again = cached.generate(prompts, greedy)
    for g, h in zip(gens, again):
        assert g.token_ids == h.token_ids and g.logprobs == pytest.approx(h.logprobs, abs=0.02)


def test_bf16_update_moves_float32_weights_like_the_float32_update(tiny_model_dir):
    """Same batch, same seed: the mixed-precision step goes the way the float32 step goes."""
    cfg = build_config(None, ["rl.lr=1e-3", "rl.kl_coef=0"])
    deltas = {}
    for mode in ("none", "bf16"):
        model, tok = load_policy(tiny_model_dir, "cpu", "float32")
        samples = _samples(tok)
        for s, lp in zip(samples, Forward(tok.pad_token_id, 4096, autocast=mode).logprobs(model, window_rows(samples))):
            s.old_logprobs = lp
        before = [p.detach().clone() for p in model.parameters()]
        cfg.policy.autocast = mode
        stats = policy_update(model, torch.optim.AdamW(model.parameters(), lr=1e-3), window_rows(samples), cfg.rl,
                              Forward.from_sections(cfg.rl, cfg.rollout, cfg.policy, tok.pad_token_id),
                              np.random.default_rng(0))
        assert stats["train/ratio"] == pytest.approx(1.0, abs=1e-3)
        assert all(p.dtype == torch.float32 for p in model.parameters())
        deltas[mode] = torch.cat([(p.detach() - b).flatten() for p, b in zip(model.parameters(), before)])
    cos = torch.nn.functional.cosine_similarity(deltas["none"], deltas["bf16"], dim=0)
    assert cos > 0.9 and deltas["bf16"].abs().sum() > 0


def test_train_recipe_runs_with_autocast(tmp_path, tiny_model_dir):
    from creditflow.recipes.train import run_train

    cfg = build_config(None, [f"out_dir={tmp_path / 'run'}", f"policy.model={tiny_model_dir}", "rl.steps=1",
                              "policy.autocast=bf16", "rollout.history=conversation", "policy.template=compact",
                              "rl.kl_coef=0.01", "rollout.tasks_per_step=2", "rollout.group_size=2",
                              "rl.eval_episodes=2", "generation.max_new_tokens=6", "rollout.max_steps=3",
                              "tensorboard=false", "rl.logprob_gap=true"])
    _, trainer, last = run_train(cfg, log=lambda *_: None)
    assert np.isfinite(last["train/loss"]) and last["train/kl"] >= 0
    assert last["train/rollout_logprob_gap"] < 0.02  # generation and update agree in bf16
    assert trainer.train_engine.backend.autocast == "bf16"
    assert all(p.dtype == torch.float32 for p in trainer.model.parameters())


def test_run_check_prints_the_bf16_note_once(monkeypatch, capsys):
    """Every command's pre-flight check (check_run) prints the note on stderr, once per process."""
    from creditflow.recipes import checks

    monkeypatch.setattr(checks, "autocast_note", lambda device, autocast, rollout_dtype="same": f"note: {autocast} is emulated here")
    monkeypatch.setattr(checks, "_NOTED", set())
    cfg = build_config(None, ["policy.autocast=bf16", "policy.device=cpu"])
    checks.check_run(cfg)
    checks.check_run(cfg)
    assert capsys.readouterr().err.count("note: bf16 is emulated here") == 1
