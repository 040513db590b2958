import math

import pytest
import torch

from creditflow.trainer.loss import (agg_loss, entropy_from_logits, entropy_term, kl_k3, kl_term, ppo_clip_objective,
                                   ppo_clip_terms, token_logprobs)


def test_ratio_one_gives_plain_policy_gradient():
    torch.manual_seed(0)
    logits = torch.randn(2, 3, 5, requires_grad=True)
    targets = torch.tensor([[1, 2, 3], [0, 4, 1]])
    adv = torch.tensor([[1.0, 1.0, 1.0], [-2.0, -2.0, -2.0]])
    logp = token_logprobs(logits, targets)
    loss, clipped = ppo_clip_terms(logp, logp.detach(), adv)
    loss.sum().backward()
    grad_ppo = logits.grad.clone()
    logits.grad = None
    (-(adv * token_logprobs(logits, targets))).sum().backward()
    torch.testing.assert_close(grad_ppo, logits.grad)
    assert clipped.sum() == 0


def test_clipping_engages_outside_trust_region():
    old = torch.log(torch.tensor([0.5, 0.5, 0.5, 0.5]))
    new = torch.log(torch.tensor([0.9, 0.9, 0.2, 0.2])).requires_grad_()  # ratios 1.8, 1.8, 0.4, 0.4
    adv = torch.tensor([1.0, -1.0, 1.0, -1.0])
    loss, clipped = ppo_clip_terms(new, old, adv, clip_low=0.2)
    # A>0 & r>1+eps: clipped at 1.2 (no gradient); A<0 & r>1+eps: unclipped -r*A = 1.8
    # A>0 & r<1-eps: unclipped -0.4; A<0 & r<1-eps: clipped at 0.8 => -(0.8 * -1) = 0.8
    torch.testing.assert_close(loss.detach(), torch.tensor([-1.2, 1.8, -0.4, 0.8]))
    assert clipped.tolist() == [1.0, 0.0, 0.0, 1.0]
    loss.sum().backward()
    assert new.grad[0] == 0 and new.grad[3] == 0 and new.grad[1] != 0 and new.grad[2] != 0


def test_asymmetric_clip():
    old = torch.zeros(1)
    new = torch.log(torch.tensor([1.25]))
    loss, _ = ppo_clip_terms(new, old, torch.tensor([1.0]), clip_low=0.2, clip_high=0.28)
    torch.testing.assert_close(loss, torch.tensor([-1.25]))


def test_k3_kl_is_zero_at_reference_and_positive_elsewhere():
    p = torch.log(torch.tensor([0.2, 0.5]))
    assert torch.allclose(kl_k3(p, p), torch.zeros(2))
    q = torch.log(torch.tensor([0.4, 0.1]))
    kl = kl_k3(p, q)
    ratio = torch.exp(q - p)
    torch.testing.assert_close(kl, ratio - torch.log(ratio) - 1)
    assert (kl > 0).all()


# -- components: agg_loss, ppo_clip_objective, kl_term, entropy_term (hand-computed) -----------------------

X = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
MASK = torch.tensor([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0]])
# row 0 is one of the 2 decisions of its trajectory (w = 1/2), row 1 the only one of its own (w = 1);
# row_weights = w_i / T_i (T_i = response tokens of row i)
ROW_W = torch.tensor([0.5 / 2, 1.0 / 1])


def test_agg_loss_token_mean():
    assert agg_loss(X, MASK, "token-mean").item() == pytest.approx((1 + 2 + 4) / 3)
    # a mini-batch of 6 tokens of which these 3 are one micro-batch
    assert agg_loss(X, MASK, "token-mean", n_tokens=6).item() == pytest.approx((1 + 2 + 4) / 6)


def test_agg_loss_seq_mean_token_mean():
    assert agg_loss(X, MASK, "seq-mean-token-mean").item() == pytest.approx(((1 + 2) / 2 + 4 / 1) / 2)
    assert agg_loss(X, MASK, "seq-mean-token-mean", n_seqs=5).item() == pytest.approx(((1 + 2) / 2 + 4) / 5)


def test_agg_loss_traj_mean():
    # (1/2 * mean(1, 2) + 1 * mean(4)) / (1/2 + 1)
    expected = (0.5 * 1.5 + 1.0 * 4.0) / 1.5
    assert agg_loss(X, MASK, "traj-mean", row_weights=ROW_W).item() == pytest.approx(expected)
    assert agg_loss(X, MASK, "traj-mean", row_weights=ROW_W, total_weight=1.5).item() == pytest.approx(expected)
    assert agg_loss(X, MASK, "traj-mean", row_weights=ROW_W, total_weight=3.0).item() == pytest.approx(expected / 2)
    with pytest.raises(ValueError, match="row_weights"):
        agg_loss(X, MASK, "traj-mean")
    with pytest.raises(ValueError, match="unknown mode"):
        agg_loss(X, MASK, "sum")


@pytest.mark.parametrize("mode", ["token-mean", "seq-mean-token-mean", "traj-mean"])
def test_agg_loss_micro_batches_add_up_to_the_mini_batch(mode):
    """With the mini-batch normalisers passed in, micro-batch losses (and gradients) sum to the whole's."""
    torch.manual_seed(0)
    x = torch.randn(5, 4, requires_grad=True)
    mask = torch.tensor([[1, 1, 1, 0], [1, 0, 0, 0], [1, 1, 0, 0], [1, 1, 1, 1], [1, 1, 0, 0]], dtype=torch.float32)
    row_w = torch.tensor([1 / 3, 1 / 2, 1 / 2, 1 / 4, 1 / 4]) / mask.sum(1)
    norms = dict(n_tokens=int(mask.sum()), n_seqs=5, total_weight=float((row_w * mask.sum(1)).sum()))
    whole = agg_loss(x, mask, mode, row_weights=row_w, **norms)
    (g_whole,) = torch.autograd.grad(whole, x)
    parts = sum(agg_loss(x[rows], mask[rows], mode, row_weights=row_w[rows], **norms)
                for rows in ([0, 3], [1, 2, 4]))
    (g_parts,) = torch.autograd.grad(parts, x)
    torch.testing.assert_close(parts, whole)
    torch.testing.assert_close(g_parts, g_whole)


@pytest.mark.parametrize("mode", ["token-mean", "seq-mean-token-mean", "traj-mean"])
def test_agg_loss_counts_decisions_not_rows(mode):
    """The conversation layout puts several decisions in one row: with per-position decision lengths and
    weights the aggregate equals that of one row per decision (the window layout)."""
    torch.manual_seed(0)
    x = torch.randn(3, 4)
    one_per_row = torch.tensor([[1, 1, 0, 0], [0, 0, 1, 0], [1, 1, 1, 0]], dtype=torch.float32)
    w = torch.tensor([1 / 2, 1 / 2, 1.0])  # rows 0, 1: the 2 decisions of one trajectory; row 2: a trajectory
    lengths = one_per_row.sum(1)
    norms = dict(n_tokens=6, n_seqs=3, total_weight=2.0)
    window = agg_loss(x, one_per_row, mode, row_weights=w / lengths, **norms)
    # the same decisions with rows 0 and 1 merged into one conversation row: tokens at 0, 1 and 2
    merged = torch.stack([x[0].where(one_per_row[0].bool(), x[1]), x[2]])
    mask = torch.tensor([[1, 1, 1, 0], [1, 1, 1, 0]], dtype=torch.float32)
    seq_len = torch.tensor([[2, 2, 1, 0], [3, 3, 3, 0]], dtype=torch.float32)
    row_w = torch.tensor([[1 / 4, 1 / 4, 1 / 2, 0], [1 / 3, 1 / 3, 1 / 3, 0]])
    conversation = agg_loss(merged, mask, mode, row_weights=row_w, seq_lengths=seq_len, **norms)
    torch.testing.assert_close(conversation, window)


def test_ppo_clip_objective_loss_and_stats():
    old = torch.log(torch.tensor([[0.5, 0.5, 0.5, 0.5, 0.5]]))
    new = torch.log(torch.tensor([[0.9, 0.9, 0.2, 0.2, 0.9]])).requires_grad_()  # ratios 1.8 1.8 0.4 0.4 (1.8)
    adv = torch.tensor([[1.0, -1.0, 1.0, -1.0, 0.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0, 1.0, 0.0]])  # the last position is padding
    loss, stats = ppo_clip_objective(new, old, adv, mask, clip_low=0.2, clip_high=0.2)
    torch.testing.assert_close(loss.detach(), torch.tensor([[-1.2, 1.8, -0.4, 0.8, 0.0]]))
    assert loss.requires_grad and set(stats) == {"pg_loss", "clip_frac", "ratio"}
    assert stats["pg_loss"].item() == pytest.approx((-1.2 + 1.8 - 0.4 + 0.8) / 4)
    assert stats["clip_frac"].item() == pytest.approx(2 / 4)
    assert stats["ratio"].item() == pytest.approx((1.8 + 1.8 + 0.4 + 0.4) / 4)
    assert not any(v.requires_grad for v in stats.values())
    _, half = ppo_clip_objective(new, old, adv, mask, clip_low=0.2, n_tokens=8)  # a mini-batch of 8 tokens
    assert half["ratio"].item() == pytest.approx(1.1 / 2)
    # asymmetric clip: eps_high 0.9 lets ratio 1.8 with A = +1 through (-1.8 instead of -1.2)
    loss_high, stats_high = ppo_clip_objective(new, old, adv, mask, clip_low=0.2, clip_high=0.9)
    assert loss_high[0, 0].item() == pytest.approx(-1.8) and stats_high["clip_frac"].item() == pytest.approx(1 / 4)


def test_kl_term_and_entropy_term():
    p = torch.log(torch.tensor([[0.2, 0.5, 0.3]]))
    q = torch.log(torch.tensor([[0.4, 0.1, 0.3]]))
    mask = torch.tensor([[1.0, 1.0, 0.0]])
    term, stats = kl_term(p, q, mask, coef=0.1)
    k3 = kl_k3(p, q)
    torch.testing.assert_close(term, 0.1 * k3)
    assert stats["kl"].item() == pytest.approx((k3[0, 0] + k3[0, 1]).item() / 2)
    term0, stats0 = kl_term(p, torch.zeros_like(p), mask, coef=0.0)  # coef 0: the reference is not read
    assert not term0.any() and stats0["kl"].item() == 0.0

    logits = torch.zeros(1, 3, 4, requires_grad=True)  # uniform over 4 tokens: H = log 4
    term, stats = entropy_term(entropy_from_logits(logits), mask, coef=0.5)
    torch.testing.assert_close(term.detach(), torch.full((1, 3), -0.5 * math.log(4)))
    assert term.requires_grad and stats["entropy"].item() == pytest.approx(math.log(4))
    with torch.no_grad():
        entropy = entropy_from_logits(logits)
    term0, stats0 = entropy_term(entropy, mask, coef=0.0)  # only logged
    assert not term0.any() and not term0.requires_grad and stats0["entropy"].item() == pytest.approx(math.log(4))
