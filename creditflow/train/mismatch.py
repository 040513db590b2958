"""The train/inference mismatch: the generation backend's log-probs against the trainer's, and TIS.

A rollout's behaviour log-probs come from the generation backend (HF ``generate``, vLLM, a server). The
trainer recomputes log pi(a|s) of the same tokens with its own forward pass and the same weights. The two
differ by kernel numerics (tiny), by precision (bf16 engines), or by a bug such as a stale engine that
missed a weight update (large). ``train/rollout_logprob_gap`` is the mean absolute per-token difference,
logged every step.

Truncated importance sampling (``rl.tis_cap`` = C; Yao et al. 2025, verl's ``tis_imp_ratio_cap``) corrects
what remains. The PPO ratio is taken against the trainer's log-probs pi_train, and every token's loss is
weighted by w = min(pi_train(a) / pi_rollout(a), C):

    loss_t = -w_t * min(r_t A, clip(r_t, 1 - eps, 1 + eps) A),    r_t = pi_theta(a_t) / pi_train(a_t)

Since w_t >= 0 it can be folded into the advantage (w A in both branches of the min), which is how the
trainer applies it (``Sample.is_weights``).
"""

from __future__ import annotations

import math

import torch

from creditflow.train.loss import token_logprobs


@torch.no_grad()
def trainer_logprobs(model, samples, pad_id: int, token_budget: int) -> list[list[float]]:
    """log pi(a|s) of every sample's response tokens under ``model``'s current weights (eval mode).

    ``samples`` have ``prompt_ids`` and ``response_ids``; rows are batched by length so that rows x padded
    length stays under ``token_budget``.
    """
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    out: list[list[float] | None] = [None] * len(samples)
    order = sorted(range(len(samples)), key=lambda i: len(samples[i].prompt_ids) + len(samples[i].response_ids))
    start = 0
    while start < len(order):
        width = len(samples[order[start]].prompt_ids) + len(samples[order[start]].response_ids)
        end = start + 1
        while end < len(order):
            longest = len(samples[order[end]].prompt_ids) + len(samples[order[end]].response_ids)
            if longest * (end - start + 1) > token_budget:
                break
            width, end = longest, end + 1
        rows = order[start:end]
        ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
        attn = torch.zeros((len(rows), width), dtype=torch.long)
        for r, i in enumerate(rows):
            seq = samples[i].prompt_ids + samples[i].response_ids
            ids[r, :len(seq)] = torch.tensor(seq)
            attn[r, :len(seq)] = 1
        ids, attn = ids.to(device), attn.to(device)
        logp = token_logprobs(model(input_ids=ids, attention_mask=attn).logits[:, :-1], ids[:, 1:])
        for r, i in enumerate(rows):
            lo = len(samples[i].prompt_ids) - 1  # position t predicts token t + 1
            out[i] = logp[r, lo: lo + len(samples[i].response_ids)].tolist()
        start = end
    if was_training:
        model.train()
    return out


def logprob_gap(rollout: list[list[float]], train: list[list[float]]) -> float:
    """Mean absolute per-token difference between rollout and trainer log-probs of the same tokens."""
    diffs = [abs(a - b) for ra, rb in zip(rollout, train) for a, b in zip(ra, rb)]
    return sum(diffs) / len(diffs) if diffs else 0.0


def tis_weights(rollout: list[float], train: list[float], cap: float) -> list[float]:
    """Per-token truncated importance weights min(pi_train / pi_rollout, cap)."""
    return [math.exp(min(b - a, math.log(cap))) for a, b in zip(rollout, train)]


def check_mismatch(model, samples, pad_id: int, token_budget: int, tis_cap: float | None) -> dict:
    """Log the rollout/trainer gap; with ``tis_cap`` set, also switch ``samples`` to TIS (see module doc).

    TIS rewrites each sample's ``old_logprobs`` to the trainer's and sets its ``is_weights``.
    """
    train = trainer_logprobs(model, samples, pad_id, token_budget)
    metrics = {"train/rollout_logprob_gap": logprob_gap([s.old_logprobs for s in samples], train)}
    if tis_cap is None:
        return metrics
    weights = []
    for s, lp in zip(samples, train):
        s.is_weights = tis_weights(s.old_logprobs, lp, tis_cap)
        s.old_logprobs = lp
        weights.extend(s.is_weights)
    if weights:
        metrics["train/tis_weight_mean"] = sum(weights) / len(weights)
        metrics["train/tis_capped_frac"] = sum(w >= tis_cap for w in weights) / len(weights)
    return metrics
