"""The colocated vLLM backend: log-probs equal the HF model's, before and after a policy update.

A rollout from a stale policy is a silent failure: the trainer would compute its PPO ratio against the
log-probs of weights it no longer has. After a real update and ``sync_weights``, vLLM's log-probs of the
sequences it samples must equal the updated HF model's within TOL, and be far from the old weights'; the
same for a LoRA policy, whose merged weights the engine gets.
Runs in ``.venv-vllm`` (``make test``); one engine start for the module.
"""

import copy

import numpy as np
import pytest
import torch

pytest.importorskip("vllm")

import psutil  # noqa: E402  (a vLLM dependency)

from creditflow.config import LoRAConfig, build_config  # noqa: E402
from creditflow.policy import lora  # noqa: E402
from creditflow.policy.backends.base import SamplingParams  # noqa: E402
from creditflow.policy.backends.hf import HFBackend  # noqa: E402
from creditflow.policy.backends.vllm import VLLMBackend  # noqa: E402
from creditflow.policy.load import load_policy  # noqa: E402
from creditflow.trainer.mismatch import logprob_gap  # noqa: E402
from creditflow.trainer.forward import Forward  # noqa: E402
from creditflow.trainer.rl import policy_update  # noqa: E402
from creditflow.trainer.sequences import Sample, window_rows  # noqa: E402

pytestmark = pytest.mark.vllm

TOL = 1e-4  # float32 on CPU: the largest per-token |log pi_vLLM - log pi_HF| allowed (measured: ~2e-6)


@pytest.fixture(scope="module")
def engine(tiny_vllm_model_dir):
    model, tok = load_policy(tiny_vllm_model_dir, "cpu", "float32")
    backend = VLLMBackend(str(tiny_vllm_model_dir), tok, dtype="float32", seed=0, max_model_len=1024,
                          kv_cache_gib=0.25)
    yield model, tok, backend
    backend.close()
    assert not psutil.Process().children(recursive=True)  # no engine process left behind


def prompts(tok, n=8):
    return [tok.apply_chat_template([{"role": "user", "content": f"the box is at {i}, push it"}],
                                    add_generation_prompt=True, tokenize=True)["input_ids"] for i in range(n)]


def max_gap(model, prompt_ids, gens) -> tuple[float, float]:
    """Largest and mean per-token |HF - generation| log-prob difference over the sampled tokens."""
    samples = [Sample(p, g.token_ids, g.logprobs, 0.0) for p, g in zip(prompt_ids, gens)]
    model.eval()  # as the trainer measures it (policy_update leaves the model in training mode)
    hf = Forward(pad_id=0, token_budget=4096).logprobs(model, window_rows(samples))
    worst = max(abs(a - b) for s, lp in zip(samples, hf) for a, b in zip(s.old_logprobs, lp))
    return worst, logprob_gap([s.old_logprobs for s in samples], hf)


def test_sampled_logprobs_equal_the_hf_models(engine):
    model, tok, backend = engine
    ids = prompts(tok)
    gens = backend.generate(ids, SamplingParams(max_new_tokens=12, temperature=1.0))
    assert all(1 <= len(g.token_ids) <= 12 and len(g.logprobs) == len(g.token_ids) for g in gens)
    assert all(g.text == tok.decode([t for t in g.token_ids if t != tok.eos_token_id]) for g in gens)
    assert max_gap(model, ids, gens)[0] < TOL


def test_after_an_update_vllm_follows_the_new_weights(engine):
    model, tok, backend = engine
    before = copy.deepcopy(model)
    ids = prompts(tok)
    gens = backend.generate(ids, SamplingParams(max_new_tokens=12, temperature=1.0))
    samples = [Sample(p, g.token_ids, g.logprobs, 1.0 if i % 2 else -1.0) for i, (p, g) in enumerate(zip(ids, gens))]
    cfg = build_config(None, ["rl.lr=0.02", "rl.kl_coef=0"])
    policy_update(model, torch.optim.AdamW(model.parameters(), lr=cfg.rl.lr), window_rows(samples), cfg.rl,
                  Forward.from_sections(cfg.rl, cfg.rollout, cfg.policy, 0), np.random.default_rng(0))
    backend.sync_weights(model)

    after = backend.generate(ids, SamplingParams(max_new_tokens=12, temperature=1.0))
    worst, _ = max_gap(model, ids, after)
    assert worst < TOL  # vLLM samples from the updated policy, with its log-probs
    _, stale = max_gap(before, ids, after)
    assert stale > 100 * TOL  # and the update was large enough for a stale engine to show
    greedy = SamplingParams(max_new_tokens=12, temperature=0.0)
    want = HFBackend(model, tok).generate(ids, greedy)
    assert [g.token_ids for g in backend.generate(ids, greedy)] == [g.token_ids for g in want]


def test_after_a_lora_update_vllm_follows_the_new_adapter(engine, tiny_vllm_model_dir):
    _, tok, backend = engine
    base, _ = load_policy(tiny_vllm_model_dir, "cpu", "float32")
    plain = {name: t.clone() for name, t in base.state_dict().items()}
    torch.manual_seed(0)
    model = lora.wrap(base, LoRAConfig(enabled=True, r=4, alpha=8), base_dir=tiny_vllm_model_dir)
    backend.sync_weights(model)  # B = 0: the merged weights are the base's
    ids = prompts(tok)
    gens = backend.generate(ids, SamplingParams(max_new_tokens=12, temperature=1.0))
    assert max_gap(model, ids, gens)[0] < TOL
    samples = [Sample(p, g.token_ids, g.logprobs, 1.0 if i % 2 else -1.0) for i, (p, g) in enumerate(zip(ids, gens))]
    cfg = build_config(None, ["rl.lr=0.05", "rl.kl_coef=0"])
    optimizer = torch.optim.AdamW(lora.trainable_parameters(model), lr=cfg.rl.lr)
    fwd = Forward.from_sections(cfg.rl, cfg.rollout, cfg.policy, 0)
    policy_update(model, optimizer, window_rows(samples), cfg.rl, fwd, np.random.default_rng(0))
    backend.sync_weights(model)

    after = backend.generate(ids, SamplingParams(max_new_tokens=12, temperature=1.0))
    worst, _ = max_gap(model, ids, after)
    assert worst < TOL  # vLLM samples from base + the updated adapter, with its log-probs
    with lora.adapter_disabled(model) as before:
        _, stale = max_gap(before, ids, after)
    assert stale > 100 * TOL  # an engine that missed the adapter's update would show
    unchanged = {k.replace(".base_layer.", "."): t for k, t in model.get_base_model().state_dict().items()
                 if ".lora_" not in k}
    assert all(torch.equal(unchanged[k], plain[k]) for k in plain)  # merging for vLLM left the base alone
