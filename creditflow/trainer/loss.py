"""The RL objective as components with tensor signatures (as verl's ``core_algos.py``): per-token terms,
then one aggregation.

Shapes: ``B`` rows by ``T`` positions, right-padded. A row is one policy decision (prompt + response, the
``window`` layout) or a whole trajectory (the ``conversation`` layout: the chat with every decision's
response in it). Position ``t`` holds the prediction of token ``t + 1``; ``mask`` (B, T) is 1 on the
policy's own sampled tokens and 0 on prompt, environment and padding positions, which never contribute.
The aggregation counts *decisions*, never rows, so one batch of decisions gets the same loss in either
layout.

The loss of one mini-batch is

    loss = agg_loss(ppo + kl + entropy, mask, mode)

with the per-token terms (each (B, T), each returning its loss contribution and token-mean stats):

- :func:`ppo_clip_objective`: -min(r A, clip(r, 1 - eps_low, 1 + eps_high) A), r = pi / pi_old
  (RewardFlow Eq. 11, PPO's clipped surrogate with a per-token ratio; DAPO's asymmetric clip);
- :func:`kl_term`: beta * k3(pi || pi_ref) (GRPO's KL penalty; verl's ``low_var_kl``);
- :func:`entropy_term`: -c * H(pi(. | s_t)) (an entropy bonus; with c = 0 entropy is only logged), with H
  from :func:`entropy_from_logits`.

Forward passes run per micro-batch while the normalisers belong to the whole mini-batch, so
:func:`agg_loss` and the stats take the mini-batch totals explicitly (``n_tokens``, ``n_seqs``,
``total_weight``): the micro-batch losses then sum to the mini-batch loss and their gradients accumulate
to its gradient. Left out, each defaults to the batch at hand (a plain masked mean).
"""

from __future__ import annotations

from typing import Literal

import torch

LossAgg = Literal["token-mean", "seq-mean-token-mean", "traj-mean"]
"""How per-token losses become one scalar (``rl.loss_agg``), see :func:`agg_loss`."""


def token_logprobs(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """log softmax(logits)[target] per position, computed in float32: (B, T, V), (B, T) -> (B, T)."""
    logp = torch.log_softmax(logits.float(), dim=-1)
    return logp.gather(-1, targets.unsqueeze(-1)).squeeze(-1)


def entropy_from_logits(logits: torch.Tensor) -> torch.Tensor:
    """Entropy H = -sum_v p_v log p_v of the next-token distribution, in float32: (B, T, V) -> (B, T)."""
    logp = torch.log_softmax(logits.float(), dim=-1)
    return -(logp.exp() * logp).sum(-1)


def agg_loss(per_token: torch.Tensor, mask: torch.Tensor, mode: LossAgg, *, n_tokens: int | float | None = None,
             n_seqs: int | None = None, row_weights: torch.Tensor | None = None,
             total_weight: float | None = None, seq_lengths: torch.Tensor | None = None) -> torch.Tensor:
    """Aggregate a per-token loss (B, T) under ``mask`` (B, T) into a scalar.

    ``token-mean``: every response token weighs the same,
        sum_{i,t} m_it x_it / n_tokens                         (n_tokens: all masked tokens; default mask.sum())
    ``seq-mean-token-mean``: a mean over each decision's tokens, then over decisions (every decision weighs
    the same),
        sum_{i,t} m_it x_it / T_it / n_seqs                     (n_seqs: decisions; default B)
    where ``seq_lengths`` (B, T) holds T_it, the token count of the decision position (i, t) belongs to
    (default: the row's mask sum, i.e. one decision per row);
    ``traj-mean``: per-token weights, normalised by their total (every trajectory weighs the same),
        sum_{i,t} m_it x_it row_weights_it / total_weight
    where ``row_weights`` (B,) or (B, T) is the weight of each token: w / T_d with w = 1 / (decisions in its
    trajectory) and T_d the token count of its decision. ``total_weight`` = sum of w over the mini-batch's
    decisions (its number of trajectories when they are whole in it; default: that sum over this batch).
    ``row_weights`` is required for ``traj-mean``.

    Micro-batching: pass the *mini-batch* ``n_tokens`` / ``n_seqs`` / ``total_weight``; the losses of
    micro-batches that partition a mini-batch then add up to the mini-batch loss.
    """
    if mode == "token-mean":
        weights = mask / (mask.sum() if n_tokens is None else n_tokens)
    elif mode == "seq-mean-token-mean":
        lengths = mask.sum(1, keepdim=True) if seq_lengths is None else seq_lengths
        weights = mask / lengths.clamp(min=1) / (mask.shape[0] if n_seqs is None else n_seqs)
    elif mode == "traj-mean":
        if row_weights is None:
            raise ValueError("agg_loss: traj-mean needs row_weights (weight of each token of a row)")
        per_position = row_weights if row_weights.dim() == 2 else row_weights[:, None]
        if total_weight is None:  # sum of w over the decisions = sum of w / T_d over their tokens
            total_weight = (per_position * mask).sum() if row_weights.dim() == 2 else (row_weights * mask.sum(1)).sum()
        weights = mask * per_position / total_weight
    else:
        raise ValueError(f"agg_loss: unknown mode {mode!r} (token-mean, seq-mean-token-mean, traj-mean)")
    return (per_token * weights).sum()


def _token_means(terms: dict[str, torch.Tensor], mask: torch.Tensor,
                 n_tokens: int | float | None) -> dict[str, torch.Tensor]:
    """Token-mean of each (B, T) term, without gradient (for logging)."""
    with torch.no_grad():
        return {k: agg_loss(v, mask, "token-mean", n_tokens=n_tokens) for k, v in terms.items()}


def ppo_clip_terms(logprobs: torch.Tensor, old_logprobs: torch.Tensor, advantages: torch.Tensor,
                   clip_low: float = 0.2, clip_high: float | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-token PPO-clip loss -min(r A, clip(r, 1-eps_low, 1+eps_high) A) and a clipped-flag tensor.

    All inputs and both outputs have one shape (B, T). With ratio r = 1 this is the plain policy-gradient
    loss -A * log pi (its gradient is -A * grad log pi).
    """
    clip_high = clip_low if clip_high is None else clip_high
    ratio = torch.exp(logprobs - old_logprobs)
    unclipped = ratio * advantages
    clipped = torch.clamp(ratio, 1.0 - clip_low, 1.0 + clip_high) * advantages
    loss = -torch.minimum(unclipped, clipped)
    was_clipped = (clipped < unclipped).float()
    return loss, was_clipped


def ppo_clip_objective(logprobs: torch.Tensor, old_logprobs: torch.Tensor, advantages: torch.Tensor,
                       mask: torch.Tensor, *, clip_low: float = 0.2, clip_high: float | None = None,
                       n_tokens: int | float | None = None) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """The clipped surrogate of RewardFlow Eq. 11 (PPO), per token; the minimised loss is its negative.

    ``logprobs`` (B, T): log pi_theta of the sampled tokens (with gradient); ``old_logprobs`` (B, T): the
    behaviour policy's; ``advantages`` (B, T): each decision's advantage broadcast to its tokens;
    ``clip_low`` / ``clip_high``: eps below / above 1 (``clip_high`` None = symmetric).

    Returns the per-token loss (B, T), to be summed with the other terms and aggregated by
    :func:`agg_loss`, and stats: scalar token-means over ``mask`` (normaliser ``n_tokens``, default
    mask.sum()) of ``pg_loss``, ``clip_frac`` (share of tokens whose clipped branch is active) and
    ``ratio``.
    """
    loss, was_clipped = ppo_clip_terms(logprobs, old_logprobs, advantages, clip_low, clip_high)
    with torch.no_grad():
        ratio = torch.exp(logprobs - old_logprobs)
    return loss, _token_means({"pg_loss": loss, "clip_frac": was_clipped, "ratio": ratio}, mask, n_tokens)


def kl_k3(logprobs: torch.Tensor, ref_logprobs: torch.Tensor) -> torch.Tensor:
    """Schulman's k3 estimator of KL(pi || pi_ref): exp(q - p) - (q - p) - 1 with p = log pi, q = log pi_ref.

    (B, T), (B, T) -> (B, T). Unbiased, always >= 0; the usual choice in GRPO / verl (``low_var_kl``)."""
    diff = ref_logprobs - logprobs
    return torch.exp(diff) - diff - 1.0


def kl_term(logprobs: torch.Tensor, ref_logprobs: torch.Tensor, mask: torch.Tensor, *, coef: float,
            n_tokens: int | float | None = None) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """KL penalty to the reference policy (GRPO's beta * D_KL, estimated per token by :func:`kl_k3`).

    Returns ``coef * k3`` (B, T) and the stat ``kl`` (token-mean of k3 over ``mask``). With ``coef`` 0 the
    reference is not read (it may be all zeros) and both are zeros.
    """
    kl = kl_k3(logprobs, ref_logprobs) if coef > 0 else torch.zeros_like(logprobs)
    return coef * kl, _token_means({"kl": kl}, mask, n_tokens)


def entropy_term(entropy: torch.Tensor, mask: torch.Tensor, *, coef: float,
                 n_tokens: int | float | None = None) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Entropy bonus: returns ``-coef * H`` (B, T) from ``entropy`` H (B, T) (:func:`entropy_from_logits`)
    and the stat ``entropy`` (token-mean of H over ``mask``).

    With ``coef`` 0 the term is zeros (compute H without gradient then: it is only logged).
    """
    stats = _token_means({"entropy": entropy}, mask, n_tokens)
    if coef == 0:
        return torch.zeros_like(entropy), stats
    return -coef * entropy, stats
