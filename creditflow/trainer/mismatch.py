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

The functions here are plain arithmetic; the trainer's forward pass is
:func:`creditflow.trainer.rl.rollout_mismatch` (through :meth:`creditflow.trainer.forward.Forward.logprobs`).
"""

from __future__ import annotations

import math


def logprob_gap(rollout: list[list[float]], train: list[list[float]]) -> float:
    """Mean absolute per-token difference between rollout and trainer log-probs of the same tokens."""
    diffs = [abs(a - b) for ra, rb in zip(rollout, train) for a, b in zip(ra, rb)]
    return sum(diffs) / len(diffs) if diffs else 0.0


def tis_weights(rollout: list[float], train: list[float], cap: float) -> list[float]:
    """Per-token truncated importance weights min(pi_train / pi_rollout, cap)."""
    return [math.exp(min(b - a, math.log(cap))) for a, b in zip(rollout, train)]


def check_mismatch(samples, train: list[list[float]], tis_cap: float | None) -> dict:
    """The rollout/trainer gap of ``samples`` (decisions with behaviour ``old_logprobs``), given the trainer's
    log-probs ``train`` of the same tokens; with ``tis_cap`` set, also switch ``samples`` to TIS (see module
    doc): each sample's ``old_logprobs`` become the trainer's and its ``is_weights`` are set.
    ``creditflow.trainer.rl.rollout_mismatch`` computes ``train`` and calls this."""
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
