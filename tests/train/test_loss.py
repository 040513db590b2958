import torch

from creditflow.train.loss import kl_k3, ppo_clip_terms, token_logprobs


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
