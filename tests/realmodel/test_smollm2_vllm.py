"""SmolLM2 (converted by `export --from-gguf`) in the colocated vLLM backend: it loads, answers as the HF model
does, its log-probs equal the HF model's, and it follows a weight update (LLaMA's weight names through
``sync_weights``). Runs in ``.venv-vllm`` (``make test``); one engine start."""

import copy

import pytest
import torch

pytest.importorskip("vllm")

from creditflow.policy.backends.base import SamplingParams  # noqa: E402
from creditflow.policy.backends.vllm import VLLMBackend  # noqa: E402
from creditflow.policy.load import load_policy  # noqa: E402
from creditflow.policy.backends.factory import chat_encoder  # noqa: E402
from creditflow.trainer.forward import Forward  # noqa: E402
from creditflow.trainer.sequences import Sample, window_rows  # noqa: E402

pytestmark = pytest.mark.vllm

TOL = 1e-4  # float32 on CPU: the largest per-token |log pi_vLLM - log pi_HF| allowed (measured: ~3e-5)


def gap(model, prompts, gens) -> float:
    samples = [Sample(p, g.token_ids, g.logprobs, 0.0) for p, g in zip(prompts, gens)]
    model.eval()
    hf = Forward(pad_id=model.config.pad_token_id or 0, token_budget=8192).logprobs(model, window_rows(samples))
    return max(abs(a - b) for s, lp in zip(samples, hf) for a, b in zip(s.old_logprobs, lp))


@pytest.mark.slow
def test_vllm_runs_smollm2_as_the_hf_model_does(smollm2_dir):
    model, tok = load_policy(smollm2_dir, "cpu", "float32")
    encode = chat_encoder(tok)
    prompts = [encode([{"role": "user", "content": q}]) for q in
               ("What is the capital of France?", "Name a colour of the sky.", "What is 2 + 2?")]
    backend = VLLMBackend(str(smollm2_dir), tok, dtype="float32", seed=0, max_model_len=512, kv_cache_gib=0.25)
    try:
        greedy = backend.generate(prompts, SamplingParams(max_new_tokens=10, temperature=0.0))
        assert "Paris" in greedy[0].text
        with torch.no_grad():
            hf = model.generate(torch.tensor([prompts[0]]), max_new_tokens=10, do_sample=False)[0, len(prompts[0]):]
        assert greedy[0].token_ids == hf.tolist()[:len(greedy[0].token_ids)]  # the same greedy answer
        sampled = backend.generate(prompts, SamplingParams(max_new_tokens=10, temperature=1.0))
        assert gap(model, prompts, sampled) < TOL
        old = copy.deepcopy(model)
        with torch.no_grad():  # a weight update: every projection of the last layer scaled
            for name, p in model.named_parameters():
                if ".29." in name and name.endswith("proj.weight"):
                    p.mul_(1.5)
        backend.sync_weights(model)
        after = backend.generate(prompts, SamplingParams(max_new_tokens=10, temperature=1.0))
        assert gap(model, prompts, after) < TOL  # the engine follows the new weights
        assert gap(old, prompts, after) > 100 * TOL  # which give other log-probs than the old ones
    finally:
        backend.close()
