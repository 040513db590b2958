"""The lean decoder on SmolLM2-135M-Instruct (LLaMA architecture: 30 layers, 9 query heads on 3 key/value heads,
tied embeddings, a 49k vocabulary): the same logits as the transformers model to float32 rounding, the same
greedy outputs and the same seeded draws (the tiny policy's tests: tests/policy/test_lean_decode.py)."""

import pytest
import torch

from creditflow.policy.backends.base import SamplingParams
from creditflow.policy.backends.factory import chat_encoder
from creditflow.policy.backends.hf import HFBackend
from creditflow.policy.load import load_policy
from tests.policy.test_lean_decode import lean_logits


@pytest.fixture(scope="module")
def smollm2(smollm2_dir):
    model, tok = load_policy(smollm2_dir, "cpu")
    encode = chat_encoder(tok)
    prompts = [encode([{"role": "user", "content": text}]) for text in
               ("Push the box onto the target. Reply with one action: up, down, left or right.",
                "What is 2 + 3?", "Name a colour.")]
    return model, tok, prompts


def test_smollm2_lean_logits_equal_the_model_calls(smollm2):
    model, _, prompts = smollm2
    steps = [28, 253]
    got = lean_logits(model, prompts, steps)
    with torch.no_grad():
        for i, p in enumerate(prompts):
            want = model(torch.tensor([p + steps])).logits[0, len(p) - 1:].float()
            for k in range(len(steps) + 1):
                assert torch.allclose(got[k][i], want[k], atol=1e-4, rtol=1e-4), (i, k, (got[k][i] - want[k]).abs().max())


def test_smollm2_lean_generation_equals_the_transformers_loop(smollm2):
    model, tok, prompts = smollm2
    hf, lean = HFBackend(model, tok, decode="hf"), HFBackend(model, tok)
    assert lean.lean is not None  # auto: SmolLM2 is a LLaMA
    greedy = SamplingParams(max_new_tokens=8, temperature=0.0)
    for a, b in zip(hf.generate(prompts, greedy), lean.generate(prompts, greedy)):
        assert a.token_ids == b.token_ids and a.text == b.text
        assert a.logprobs == pytest.approx(b.logprobs, abs=1e-4)
    sampled = SamplingParams(max_new_tokens=8, temperature=1.0)
    runs = []
    for backend in (hf, lean, lean):
        torch.manual_seed(11)
        runs.append([g.token_ids for g in backend.generate(prompts, sampled)])
    assert runs[0] == runs[1] == runs[2]
