"""The lean decoder (policy.decode=lean) against the transformers model it reproduces: the same logits to float32
rounding, the same greedy outputs, the same seeded draws, on the tiny policy (Qwen2); SmolLM2 (LLaMA) in
tests/realmodel/test_smollm2_lean.py."""

import pytest
import torch

from creditflow.config import build_config
from creditflow.envs import make
from creditflow.errors import UserError
from creditflow.policy.backends.base import SamplingParams
from creditflow.policy.backends.factory import hf_backend
from creditflow.policy.backends.hf import HFBackend
from creditflow.policy.backends.lean import KVLayout, LeanCache, LeanDecoder, unsupported
from creditflow.policy.load import load_policy
from creditflow.policy.prompts import ChatTemplate, PromptBuilder


def window_prompts(tok, seeds, template="paper"):
    """First-turn window prompts of Sokoban levels ``seeds`` (they all start with the template's instruction)."""
    chat, pb, env = ChatTemplate(tok), PromptBuilder("sokoban", template=template), make("sokoban")
    out = []
    for seed in seeds:
        obs, info = env.reset(seed=seed)
        out.append(chat.encode(pb.chat(info["task"], [], obs, info["admissible_actions"])))
    return out


def lean_logits(model, prompts, steps):
    """The lean decoder's logits: the left-padded prompts in one pass, then ``steps`` fed tokens (B, V) each."""
    config = model.config
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    layout = KVLayout(config.num_hidden_layers, config.num_key_value_heads, head_dim, torch.float32, "cpu")
    cache = LeanCache(prompts, [None] * len(prompts), len(steps), layout, 0)
    forward, pos = cache.forward_with(LeanDecoder(model)), cache.pos
    out = [forward(cache.ids, pos, None)]
    for token in steps:
        pos = pos[:, -1:] + 1
        out.append(forward(torch.full((len(prompts), 1), token), pos, torch.ones(len(prompts), dtype=torch.bool)))
    return out


def test_lean_logits_equal_the_model_calls(tiny_model_dir):
    """Prompts of different lengths (left padding), then decode steps: every row's logits are the model's on
    that row alone, to float32 rounding."""
    model, tok = load_policy(tiny_model_dir, "cpu")
    prompts = window_prompts(tok, (0, 1, 2))
    prompts[1] = prompts[1][5:]  # shorter: padded
    steps = [7, 11, 13]
    got = lean_logits(model, prompts, steps)
    with torch.no_grad():
        for i, p in enumerate(prompts):
            want = model(torch.tensor([p + steps])).logits[0, len(p) - 1:].float()
            for k in range(len(steps) + 1):
                assert torch.allclose(got[k][i], want[k], atol=1e-5, rtol=1e-5), (i, k)


def test_lean_generation_equals_the_transformers_loop(tiny_model_dir):
    """Window prompts with repeats and a shared instruction (held once by the lean cache): greedy tokens and
    texts identical to the transformers call's, log-probs to float32 rounding; sampled with the same seed, the
    same tokens (the same draws from the torch RNG), reproducibly."""
    model, tok = load_policy(tiny_model_dir, "cpu")
    prompts = window_prompts(tok, (0, 1, 0, 2, 1, 0, 2, 2, 1, 0, 1, 2))  # 4 rows per prompt: held once per group
    hf, lean = HFBackend(model, tok, decode="hf"), HFBackend(model, tok, decode="lean")
    assert hf.lean is None and lean.lean is not None
    greedy = SamplingParams(max_new_tokens=8, temperature=0.0)
    for a, b in zip(hf.generate(prompts, greedy), lean.generate(prompts, greedy)):
        assert a.token_ids == b.token_ids and a.text == b.text
        assert a.logprobs == pytest.approx(b.logprobs, abs=1e-5)
    sampled = SamplingParams(max_new_tokens=8, temperature=1.0, top_p=0.9)
    runs = []
    for backend in (hf, lean, lean):
        torch.manual_seed(3)
        runs.append(backend.generate(prompts, sampled))
        runs[-1].append(torch.rand(1).item())  # the RNG is left where the transformers loop leaves it
    (want, *rest), (first, again) = runs[0], runs[1:]
    assert first[-1] == again[-1] == runs[0][-1]
    assert len({tuple(g.token_ids) for g in first[:-1]}) > 1
    for a, b, c in zip(runs[0][:-1], first[:-1], again[:-1]):
        assert a.token_ids == b.token_ids == c.token_ids and b.logprobs == c.logprobs
        assert a.logprobs == pytest.approx(b.logprobs, abs=1e-5)


def test_lean_groups_with_rows_that_have_nothing_cached_past_the_prefix(tiny_model_dir):
    """Four rows of one prompt (held once as their group) and a row whose prompt is the shared prefix and one
    token (it reads an empty group): the same greedy outputs as the transformers call."""
    model, tok = load_policy(tiny_model_dir, "cpu")
    prompt = window_prompts(tok, (0,))[0]
    prompts = [prompt] * 4 + [prompt[:40]]
    greedy = SamplingParams(max_new_tokens=5, temperature=0.0)
    lean = HFBackend(model, tok, decode="lean")
    cache = LeanCache(prompts, lean._prefill_distinct(prompts), 5, KVLayout(2, 1, 16, torch.float32, "cpu"), 0)
    assert cache.groups is not None and cache.group_of.tolist() == [0, 0, 0, 0, 1] and cache.shared == 39
    for a, b in zip(HFBackend(model, tok, decode="hf").generate(prompts, greedy), lean.generate(prompts, greedy)):
        assert a.token_ids == b.token_ids and a.logprobs == pytest.approx(b.logprobs, abs=1e-5)


def test_lean_prefix_cache_equals_the_transformers_loop(tiny_model_dir):
    """The conversation layout's prefix cache: turn 2 extends turn 1's sequences; the lean cache keeps the
    sequences (the shared prefix put back in front of each row) and the next turn feeds only the new tokens."""
    model, tok = load_policy(tiny_model_dir, "cpu")
    chat, pb, env = ChatTemplate(tok), PromptBuilder("sokoban", template="compact", history="conversation"), make("sokoban")
    prompts = []
    for seed in range(3):
        obs, info = env.reset(seed=seed)
        prompts.append(chat.encode(pb.chat(info["task"], [], obs, info["admissible_actions"])))
    greedy = SamplingParams(max_new_tokens=5, temperature=0.0)
    outs = []
    for decode in ("hf", "lean"):
        backend = HFBackend(model, tok, decode=decode)
        with backend.prefix_cache():
            first = backend.generate(prompts, greedy)
            follow = [p + g.token_ids + chat.continuation(g.token_ids, pb.next_turn(2, "#" * (3 + i), ["up"]))
                      for i, (p, g) in enumerate(zip(prompts, first))]
            lengths = {len(c.ids) for cs in backend._cache.values() for c in cs}
            outs.append((first, backend.generate(follow, greedy), lengths))
    (hf_first, hf_next, hf_len), (lean_first, lean_next, lean_len) = outs
    assert hf_len == lean_len
    for a, b in zip(hf_first + hf_next, lean_first + lean_next):
        assert a.token_ids == b.token_ids
        assert a.logprobs == pytest.approx(b.logprobs, abs=1e-5)


def test_lean_follows_the_weights(tiny_model_dir):
    """An optimizer step changes the weights in place: the lean decoder's fused copies follow."""
    model, tok = load_policy(tiny_model_dir, "cpu")
    prompts = window_prompts(tok, (0, 3))
    hf, lean = HFBackend(model, tok, decode="hf"), HFBackend(model, tok, decode="lean")
    greedy = SamplingParams(max_new_tokens=4, temperature=0.0)
    before = lean.generate(prompts, greedy)
    opt = torch.optim.SGD(model.parameters(), lr=1.0)
    model(torch.tensor([prompts[0]]), labels=torch.tensor([prompts[0]])).loss.backward()
    opt.step()
    after_lean, after_hf = lean.generate(prompts, greedy), hf.generate(prompts, greedy)
    assert [g.logprobs for g in after_lean] != [g.logprobs for g in before]
    for a, b in zip(after_hf, after_lean):
        assert a.token_ids == b.token_ids and a.logprobs == pytest.approx(b.logprobs, abs=1e-5)


def test_lean_under_bf16_autocast_is_close(tiny_model_dir):
    """policy.autocast=bf16: bf16 linear layers, float32 attention on CPU, as the transformers call runs."""
    model, tok = load_policy(tiny_model_dir, "cpu")
    prompts = window_prompts(tok, (0, 1))
    greedy = SamplingParams(max_new_tokens=6, temperature=0.0)
    hf = HFBackend(model, tok, decode="hf", autocast="bf16").generate(prompts, greedy)
    lean = HFBackend(model, tok, decode="lean", autocast="bf16").generate(prompts, greedy)
    for a, b in zip(hf, lean):
        n = next((k for k, (x, y) in enumerate(zip(a.token_ids, b.token_ids)) if x != y), len(a.token_ids))
        assert n >= 3  # bf16 rounding may part them later, never at once
        assert a.logprobs[:n] == pytest.approx(b.logprobs[:n], abs=0.05)


def test_decode_choice(tiny_model_dir, tmp_path):
    """auto: lean for Qwen2 / LLaMA with share_prefix, else hf; lean forced on a model it cannot run: one line."""
    model, tok = load_policy(tiny_model_dir, "cpu")
    assert HFBackend(model, tok).lean is not None
    assert HFBackend(model, tok, share_prefix=False).lean is None  # transformers' generate, the reference
    forced = HFBackend(model, tok, share_prefix=False, decode="lean")
    prompts, greedy = window_prompts(tok, (0, 1)), SamplingParams(max_new_tokens=4, temperature=0.0)
    for a, b in zip(HFBackend(model, tok, share_prefix=False).generate(prompts, greedy),
                    forced.generate(prompts, greedy)):  # every prompt in full through the lean loop
        assert a.token_ids == b.token_ids and a.logprobs == pytest.approx(b.logprobs, abs=1e-5)
    model.config.layer_types = ["sliding_attention"] + model.config.layer_types[1:]
    try:
        assert "sliding-window" in unsupported(model)
        assert HFBackend(model, tok).lean is None
        cfg = build_config(None, ["policy.decode=lean", f"out_dir={tmp_path}"])
        with pytest.raises(UserError, match="policy.decode=lean: .*sliding-window"):
            hf_backend(cfg.policy, model, tok)
    finally:
        model.config.layer_types = ["full_attention"] * len(model.config.layer_types)
    with pytest.raises(Exception, match="auto.*lean.*hf"):
        build_config(None, ["policy.decode=fast"])
