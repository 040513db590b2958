"""The HF backend's prefix cache (conversation layout): the same generations as without it."""

import pytest
import torch

from creditflow.envs import make
from creditflow.policy.backends.base import SamplingParams
from creditflow.policy.backends.hf import HFBackend, _sample
from creditflow.policy.load import load_policy
from creditflow.policy.prompts import ChatTemplate, PromptBuilder


def test_prefix_cache_generates_what_full_prompts_generate(tiny_model_dir):
    model, tok = load_policy(tiny_model_dir, "cpu")
    backend, chat = HFBackend(model, tok), ChatTemplate(tok)
    pb = PromptBuilder("sokoban", template="compact", history="conversation")
    env = make("sokoban")
    prompts = []
    for seed in range(3):
        obs, info = env.reset(seed=seed)
        prompts.append(chat.encode(pb.chat(info["task"], [], obs, info["admissible_actions"])))
    greedy = SamplingParams(max_new_tokens=5, temperature=0.0)
    with backend.prefix_cache():
        first = backend.generate(prompts, greedy)
        assert backend._cache and sum(len(v) for v in backend._cache.values()) == 3
        follow = [p + g.token_ids + chat.continuation(g.token_ids, pb.next_turn(2, "#" * (3 + i), ["up"]))
                  for i, (p, g) in enumerate(zip(prompts, first))]
        follow[1] = prompts[1]  # a prompt with no cached prefix in the same batch
        cached = backend.generate(follow, greedy)
    assert backend._cache is None  # dropped with the block
    plain = HFBackend(model, tok, share_prefix=False)  # transformers' generate on the full prompts
    for want, got in ((plain.generate(prompts, greedy), first), (plain.generate(follow, greedy), cached)):
        for a, b in zip(want, got):
            assert a.token_ids == b.token_ids and a.text == b.text
            assert a.logprobs == pytest.approx(b.logprobs, abs=1e-4)


def test_sampling_respects_greedy_and_top_p():
    logits = torch.tensor([[0.0, 3.0, 1.0], [2.0, 0.0, 0.0]])
    assert _sample(logits, SamplingParams(temperature=0.0)).tolist() == [1, 0]
    torch.manual_seed(0)
    draws = torch.stack([_sample(logits, SamplingParams(temperature=1.0, top_p=0.5)) for _ in range(50)])
    assert (draws[:, 0] == 1).all() and (draws[:, 1] == 0).all()  # the nucleus is the top token only
    draws = torch.stack([_sample(logits, SamplingParams(temperature=1.0)) for _ in range(200)])
    assert set(draws[:, 0].tolist()) == {0, 1, 2}


def test_shared_prefill_generates_what_full_prompts_generate(tiny_model_dir):
    """``share_prefix``: window prompts with repeats and a common instruction, each distinct prompt and the
    shared prefix prefilled once; greedy output equals transformers' ``generate`` on the full prompts, and
    sampled responses carry the log-probs a full forward pass gives them."""
    model, tok = load_policy(tiny_model_dir, "cpu")
    chat, pb, env = ChatTemplate(tok), PromptBuilder("sokoban"), make("sokoban")
    prompts = []
    for seed in (0, 1, 0, 2, 1, 0):  # repeats, as a group's first turns
        obs, info = env.reset(seed=seed)
        prompts.append(chat.encode(pb.chat(info["task"], [], obs, info["admissible_actions"])))
    shared, plain = HFBackend(model, tok), HFBackend(model, tok, share_prefix=False)
    greedy = SamplingParams(max_new_tokens=6, temperature=0.0)
    for a, b in zip(plain.generate(prompts, greedy), shared.generate(prompts, greedy)):
        assert a.token_ids == b.token_ids and a.text == b.text
        assert a.logprobs == pytest.approx(b.logprobs, abs=1e-4)
    torch.manual_seed(0)
    sampled = shared.generate(prompts, SamplingParams(max_new_tokens=6, temperature=1.0))
    assert len({tuple(g.token_ids) for g in sampled}) > 1  # repeated prompts still draw independently
    for p, g in zip(prompts, sampled):
        with torch.no_grad():
            lp = torch.log_softmax(model(torch.tensor([p + g.token_ids])).logits[0, len(p) - 1:-1], -1)
        assert g.logprobs == pytest.approx(lp.gather(-1, torch.tensor(g.token_ids)[:, None])[:, 0].tolist(),
                                           abs=1e-4)


def test_sliding_window_models_sample_through_generate(tiny_model_dir):
    from creditflow.policy.backends.hf import _full_attention_only

    model, tok = load_policy(tiny_model_dir, "cpu")
    assert _full_attention_only(model) and HFBackend(model, tok).share_prefix
    model.config.layer_types = ["sliding_attention"] + model.config.layer_types[1:]
    try:
        assert not _full_attention_only(model) and not HFBackend(model, tok).share_prefix
    finally:
        model.config.layer_types = ["full_attention"] * len(model.config.layer_types)
