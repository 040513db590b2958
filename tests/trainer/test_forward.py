"""How the policy runs on rows (trainer/forward.py): the LM head at the trained positions only, the layouts
scoring the same tokens the same, and the prefix-tree forward pass of ``policy.share_prefix``."""

import torch

from creditflow.config import build_config
from creditflow.policy.load import load_policy
from creditflow.trainer.forward import Forward, adjacent_lcp, prefix_levels, trained_hidden
from creditflow.trainer.loss import token_logprobs
from creditflow.trainer.sequences import collate, rows_from, window_rows
from tests.trainer.rollouts import conversation_rollout, window_rollout


def test_forward_from_sections_reads_the_runs_settings():
    cfg = build_config(None, ["rl.token_budget=512", "policy.autocast=bf16", "policy.share_prefix=false"])
    assert Forward.from_sections(cfg.rl, cfg.rollout, cfg.policy, pad_id=7) == \
        Forward(7, 512, pad=True, autocast="bf16", share_prefix=False)
    conv = build_config(None, ["rollout.history=conversation", "policy.template=compact"])
    assert Forward.from_sections(conv.rl, conv.rollout, conv.policy, pad_id=0).pad is False  # whole conversations


def test_layouts_score_the_same_tokens_the_same(tiny_model_dir):
    """Fixed batch: each decision scored in its own row (window rows) and all of a trajectory's decisions
    scored in one conversation row give the same per-token log-probs when the contexts are the same."""
    model, tok = load_policy(tiny_model_dir, "cpu")
    trajs = conversation_rollout(model, tok)
    conversation = rows_from(trajs, "conversation")
    window = window_rows([s for row in conversation for s in row.samples])
    with torch.no_grad():
        scored = {}
        for name, rows in (("window", window), ("conversation", conversation)):
            b = collate(rows, tok.pad_token_id, "cpu")
            logits, targets = Forward(tok.pad_token_id, 4096).trained_logits(model, b)
            scored[name] = token_logprobs(logits, targets)  # row-major: the same decision order in both
    torch.testing.assert_close(scored["conversation"], scored["window"], atol=1e-5, rtol=0)
    # and the behaviour log-probs of generation agree with the training forward
    behaviour = torch.tensor([x for row in conversation for s in row.samples for x in s.old_logprobs])
    torch.testing.assert_close(scored["conversation"], behaviour, atol=1e-4, rtol=0)


def test_prefix_levels_cut_the_prefix_tree_where_it_saves_most():
    """Four sorted rows of width 10: rows 1-2 and 3-4 share 6 tokens, rows 2-3 share 2. Level-by-level
    positions: [0, 2, 6, 10] computes 1*2 + 2*4 + 4*4 = 26, [0, 6, 10] 2*6 + 4*4 = 28, [0, 10] 4*10 = 40."""
    lcp = torch.tensor([6, 2, 6])
    assert prefix_levels(10, lcp, level_cost=0) == [0, 2, 6, 10]
    assert prefix_levels(10, lcp, level_cost=3) == [0, 6, 10]  # 26 + 9 > 28 + 6
    assert prefix_levels(10, lcp, level_cost=13) == [0, 10]  # 40 + 13 < 28 + 26
    assert prefix_levels(10, lcp, max_levels=2, level_cost=0) == [0, 6, 10]
    assert prefix_levels(10, lcp, max_levels=1, level_cost=0) == [0, 10]
    assert prefix_levels(10, torch.tensor([], dtype=torch.long)) == [0, 10]  # one distinct row


def test_shared_prefix_forward_gives_the_same_hidden_states_and_gradients(tiny_model_dir):
    model, tok = load_policy(tiny_model_dir, "cpu")
    rows = rows_from(window_rollout(model, tok), "window")
    rows.append(rows[0])  # an exact duplicate row
    b = collate(rows, tok.pad_token_id, "cpu")
    keep = b["mask"].bool()
    distinct = torch.unique(torch.where(b["attn"].bool(), b["ids"], -1), dim=0)
    cuts = prefix_levels(distinct.shape[1], adjacent_lcp(distinct))
    assert len(cuts) >= 3 and cuts[1] >= 16  # at least the instruction the template starts with is shared
    out = {}
    for share in (False, True):
        model.zero_grad()
        hidden = trained_hidden(model.get_decoder(), b["ids"], b["attn"], keep, share)
        weights = torch.linspace(-1, 1, hidden.numel()).reshape(hidden.shape)
        (hidden * weights).sum().backward()
        out[share] = hidden.detach(), torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])
    assert out[True][0].shape == (int(keep.sum()), model.config.hidden_size)
    torch.testing.assert_close(out[True][0], out[False][0], atol=1e-5, rtol=0)
    assert out[False][1].abs().max() > 1e-3
    # float32 rounding of sums in another order: relative to the gradient's size (max ~100 here)
    torch.testing.assert_close(out[True][1], out[False][1], atol=1e-6 * float(out[False][1].abs().max()), rtol=1e-4)


def test_prefix_tree_forward_is_exact_where_trained_tokens_are_shared(tiny_model_dir):
    """Rows that share prefixes of many lengths, with trained positions inside the shared spans (the
    conversation layout's group rows whose first turns agree), padding and a duplicate: the level-by-level
    forward gives every position's hidden state and the gradients of the row-by-row one."""
    model, _ = load_policy(tiny_model_dir, "cpu")
    g = torch.Generator().manual_seed(0)
    trunk = torch.randint(5, 300, (90,), generator=g)
    rows = []
    for split, length in [(90, 90), (60, 85), (60, 88), (30, 70), (30, 90), (5, 40), (60, 85)]:
        own = torch.randint(5, 300, (length,), generator=g)
        rows.append(torch.cat([trunk[:split], own[split:]]) if split < length else trunk[:length].clone())
    rows[-1] = rows[1].clone()  # a duplicate
    ids = torch.zeros(len(rows), 90, dtype=torch.long)
    attn = torch.zeros_like(ids)
    for i, r in enumerate(rows):
        ids[i, : len(r)], attn[i, : len(r)] = r, 1
    keep = attn[:, 1:].bool() & (torch.rand(attn[:, 1:].shape, generator=g) < 0.5)
    distinct = torch.unique(torch.where(attn.bool(), ids, -1), dim=0)
    assert len(prefix_levels(90, adjacent_lcp(distinct))) >= 4  # three levels or more
    out = {}
    for share in (False, True):
        model.zero_grad()
        hidden = trained_hidden(model.get_decoder(), ids, attn, keep, share)
        (hidden * torch.linspace(-1, 1, hidden.numel()).reshape(hidden.shape)).sum().backward()
        out[share] = hidden.detach(), torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])
    torch.testing.assert_close(out[True][0], out[False][0], atol=1e-5, rtol=0)
    assert out[False][1].abs().max() > 1e-3
    torch.testing.assert_close(out[True][1], out[False][1], atol=1e-6 * float(out[False][1].abs().max()), rtol=1e-4)
