"""GAGPO: Generalized Advantage Grouped Policy Optimization (Zhu, Yu, Yang, Liu, Hu, Chen, Zhang 2026; arXiv 2605.13217).

Critic-free GAE: a non-parametric value proxy built from the group's own rollouts replaces PPO's critic, and the
TD errors it gives are folded backward through time as in GAE (Schulman et al. 2016). Per task group (all
rollouts of one task), in the paper's three stages:

1. Rollout grouping (stage 1): steps of the group's rollouts taken in an identical environment state form one
   state group (canonical states, ``state_fn``, ``state_key`` by default, as GiGPO's anchor states).
2. Grouped value proxy and temporal advantage (stage 2):
   V(s) = the mean, over every visit of s in the group (every step taken from s, in any rollout), of the
   discounted return-to-go from that visit, G_t = sum_k gamma^k r_{t+k};
   delta_t = r_t + gamma * V(s_{t+1}) - V(s_t), with V(s_{t+1}) = 0 after a rollout's last step;
   A_t = sum_l (gamma * lam)^l delta_{t+l} = delta_t + gamma * lam * A_{t+1} (GAE), within each rollout.
3. Group-wise advantage normalisation (stage 3): A standardised over all steps of the task group,
   (A - mean) / (std + eps) (sample std ``ddof=1``; a group of one step, or of equal A, gives 0).
   ``alpha_traj`` > 0 adds a GRPO term over the group's returns (0 by default).

The paper's third ingredient, an action-level (per-turn, sequence-wide) importance ratio in the PPO update, is a
change to the loss, not to the credit: this kernel computes advantages only, and the trainer's token-level ratio
is unchanged (docs/methods.md, "GAGPO").

Source and its limits: only the abstract and third-party summaries of the paper could be read from this machine
(the arXiv HTML's method section, its hyperparameter table and appendix were not reachable, and no official
code was found), so the stages above are cited by the paper's stage names, not by equation numbers. Every choice
the summaries leave open is a knob; docs/methods.md ("GAGPO") says what was chosen and why:

- V of a state the group visits once is that visit's own return-to-go (the mean over one visit; no fallback),
  so on a step between two such states delta = 0: credit forms where rollouts share states and is carried
  backward from there by lam. With lam = 1, A_t = G_t - V(s_t) exactly (the TD errors telescope).
- A rollout's last step is terminal (nothing is bootstrapped after it), truncated or not: the value proxy's own
  returns stop there too.
- A state no step leaves (only a post-state) has V = 0.
- Normalisation over the task group's steps (``norm_over="group"``), or among the steps leaving one state
  (``"state"``); ``normalize`` = ``std`` (mean and std), ``mean`` (centre only) or ``none`` (raw GAE).
- gamma = lam = 0.95 (GiGPO's step discount in the same benchmarks; the usual GAE lambda).
- r_t = the env rewards (``reward_source="return"``), or for ``success``/``score`` that outcome on a rollout's
  last step and 0 before it. Invalid actions and self-loops are steps like the others: the env's penalty is in
  their r_t.
"""

from __future__ import annotations

import time
from typing import ClassVar, Literal

import numpy as np
from pydantic import Field

from creditflow.credit.batch import StepBatch
from creditflow.credit.g2po import group_state_values
from creditflow.credit.gigpo import discounted_returns, outcome_step_rewards
from creditflow.credit.graphgpo import StateGraphKnobs
from creditflow.credit.groupnorm import grouped_normalize
from creditflow.credit.registry import Credit, register_estimator
from creditflow.credit.returns import ReturnSource, batch_returns
from creditflow.credit.states import intern_nodes, step_states

GAGPONormalize = Literal["std", "mean", "none"]
NormOver = Literal["group", "state"]


def grouped_td_errors(rewards, values, pre, post, last, gamma: float = 0.95) -> np.ndarray:
    """Stage 2: delta_t = r_t + gamma * V(s_{t+1}) - V(s_t), with nothing bootstrapped after a rollout's last
    step (``last`` (S,) bool marks those rows)."""
    v = np.asarray(values, dtype=np.float64)
    boot = np.where(np.asarray(last, dtype=bool), 0.0, v[np.asarray(post, dtype=np.int64)])
    return np.asarray(rewards, dtype=np.float64) + gamma * boot - v[np.asarray(pre, dtype=np.int64)]


def gae(delta, lengths, gamma: float = 0.95, lam: float = 0.95) -> np.ndarray:
    """Stage 2: A_t = delta_t + gamma * lam * A_{t+1} within each rollout (steps laid end to end), i.e. the
    TD errors discounted by gamma * lam."""
    return discounted_returns(delta, lengths, gamma * lam)


def normalize_advantages(adv, groups, *, normalize: str = "std", eps: float = 1e-6, ddof: int = 1) -> np.ndarray:
    """Stage 3: the advantages standardised (``std``), centred (``mean``) or left as they are (``none``) within
    the integer ``groups`` (singleton groups get 0 unless ``none``)."""
    adv = np.asarray(adv, dtype=np.float64)
    if normalize == "none":
        return adv.copy()
    return grouped_normalize(adv, groups, divide_std=normalize == "std", eps=eps, ddof=ddof)


class GAGPOKnobs(StateGraphKnobs):
    """Knobs of ``gagpo`` (docs/methods.md, "GAGPO", says why each default)."""

    source: ClassVar[str] = "built from its abstract and summaries: every equation is creditflow's choice"

    gamma: float = Field(0.95, ge=0, le=1)
    """Discount gamma of the return-to-go behind V(s) and of the TD error (stage 2), in [0, 1]."""
    lam: float = Field(0.95, ge=0, le=1)
    """GAE lambda (stage 2), in [0, 1]: 0 = the one-step TD error, 1 = G_t - V(s_t)."""
    normalize: GAGPONormalize = "std"
    """Stage 3: std = (A - mean) / (std + eps), mean = A - mean, none = the raw GAE advantage."""
    norm_over: NormOver = "group"
    """Stage 3's groups: group = all steps of the task group; state = the steps leaving one state."""
    alpha_traj: float = Field(0.0, ge=0)
    """Weight of an added GRPO term over the group's returns; 0: the GAE advantage alone."""
    reward_source: ReturnSource = "return"
    """r_t: return = the env rewards; score or success = that outcome on the last step, 0 before it."""


@register_estimator("gagpo", knobs=GAGPOKnobs, needs={"state"})
def gagpo(batch: StepBatch, knobs: GAGPOKnobs) -> Credit:
    """GAGPO: ``process_reward`` V(s_t) (the grouped value proxy), ``step_reward`` the TD error delta_t and
    ``advantage`` (the group-normalised GAE advantage, plus ``alpha_traj`` times GRPO) per row."""
    t0 = time.perf_counter()
    st = step_states(batch, knobs.state_fn, similarity=knobs.similarity)
    step_group = batch.traj_group[batch.step_traj]
    # stage 1: one node per (task group, canonical state)
    inverse, node_group, node_keys = intern_nodes((*st.pre, *st.post), np.concatenate((step_group, step_group)))
    n = batch.n_steps
    pre, post = inverse[:n], inverse[n:]
    if knobs.reward_source == "return":
        rewards = batch.reward.astype(np.float64)
    else:
        rewards = outcome_step_rewards(batch_returns(batch, knobs.reward_source), batch.lengths)
    step_returns = discounted_returns(rewards, batch.lengths, knobs.gamma)  # G_t
    values = group_state_values(step_returns, pre, len(node_keys))  # stage 2: V(s) = mean G_t over visits of s
    last = np.zeros(n, dtype=bool)
    last[(batch.traj_first + batch.lengths - 1)[batch.lengths > 0]] = True
    delta = grouped_td_errors(rewards, values, pre, post, last, knobs.gamma)  # stage 2: TD error
    raw = gae(delta, batch.lengths, knobs.gamma, knobs.lam)  # stage 2: GAE
    groups = step_group if knobs.norm_over == "group" else pre
    advantage = normalize_advantages(raw, groups, normalize=knobs.normalize, eps=knobs.eps,
                                     ddof=knobs.ddof)  # stage 3
    returns = batch_returns(batch, knobs.reward_source)
    if knobs.alpha_traj:
        advantage = advantage + knobs.alpha_traj * grouped_normalize(
            returns, batch.traj_group, eps=knobs.eps, ddof=knobs.ddof)[batch.step_traj]

    visits = np.bincount(pre, minlength=len(node_keys)) if n else np.zeros(0, dtype=np.int64)
    metrics = {
        "credit/groups": len(batch.group_names),
        "credit/graph_nodes": len(node_keys) / max(len(batch.group_names), 1),
        "credit/shared_state_frac": float((visits[pre] > 1).mean()) if n else 0.0,
        "credit/td_abs_mean": float(np.abs(delta).mean()) if n else 0.0,
        "credit/gae_abs_mean": float(np.abs(raw).mean()) if n else 0.0,
        "credit/return_mean": float(returns.mean()) if returns.size else 0.0,
        "credit/time_ms": (time.perf_counter() - t0) * 1000.0,
    }
    return Credit(advantage=advantage, step_reward=delta, process_reward=values[pre], metrics=metrics)
