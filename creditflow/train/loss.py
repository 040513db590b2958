"""Policy-gradient losses over response tokens: PPO-clip surrogate, k3 KL to a reference, entropy.

All functions take per-token tensors of shape (batch, tokens) and a 0/1 ``mask`` selecting the policy's
own response tokens; prompt and padding positions never contribute.
"""

from __future__ import annotations

import torch


def token_logprobs(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """log softmax(logits)[target] per position, computed in float32."""
    logp = torch.log_softmax(logits.float(), dim=-1)
    return logp.gather(-1, targets.unsqueeze(-1)).squeeze(-1)


def entropy_from_logits(logits: torch.Tensor) -> torch.Tensor:
    logp = torch.log_softmax(logits.float(), dim=-1)
    return -(logp.exp() * logp).sum(-1)


def masked_sum(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return (x * mask).sum()


def ppo_clip_terms(logprobs: torch.Tensor, old_logprobs: torch.Tensor, advantages: torch.Tensor,
                   clip_low: float = 0.2, clip_high: float | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-token PPO-clip loss -min(r A, clip(r, 1-eps_low, 1+eps_high) A) and a clipped-flag tensor.

    With ratio r = 1 this is the plain policy-gradient loss -A * log pi (its gradient is -A * grad log pi).
    """
    clip_high = clip_low if clip_high is None else clip_high
    ratio = torch.exp(logprobs - old_logprobs)
    unclipped = ratio * advantages
    clipped = torch.clamp(ratio, 1.0 - clip_low, 1.0 + clip_high) * advantages
    loss = -torch.minimum(unclipped, clipped)
    was_clipped = (clipped < unclipped).float()
    return loss, was_clipped


def kl_k3(logprobs: torch.Tensor, ref_logprobs: torch.Tensor) -> torch.Tensor:
    """Schulman's k3 estimator of KL(pi || pi_ref): exp(q - p) - (q - p) - 1 with p = log pi, q = log pi_ref.

    Unbiased, always >= 0; the usual choice in GRPO / verl (``low_var_kl``)."""
    diff = ref_logprobs - logprobs
    return torch.exp(diff) - diff - 1.0
