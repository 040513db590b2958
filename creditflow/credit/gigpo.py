"""GiGPO: Group-in-Group Policy Optimization (Feng et al., NeurIPS 2025; arXiv 2505.10978).

RewardFlow's closest baseline. Two levels of group-relative advantage, no graph:

- episode level (GiGPO Eq. 3): A_E = (R(tau) - mean) / F_norm over the rollouts of one task,
  R(tau) the summed env reward (``reward_source="return"``);
- step level: anchor-state groups (Eq. 6): steps of the same task group whose state is identical
  (canonical state ``state_fn``, ``state_key`` by default) form a group; each step carries its
  discounted return R_t = sum_k gamma^k r_{t+k} (Eq. 5, gamma = 0.95) and
  A_S = (R_t - mean) / F_norm (Eq. 7). The r_t are the env rewards under ``reward_source="return"``;
  under ``success`` or ``score`` they are that outcome on a trajectory's last step and 0 before it
  (``step_reward_source`` sets them apart from R(tau)), so both levels see the same reward, as in the
  paper's sparse-reward envs, where the env reward is the outcome at the end;
- A = A_E + w * A_S (Eq. 8, w = 1).

``normalize="mean_std"`` divides by the sample std + eps (F_norm = std, as GRPO; ``ddof=1`` as
``torch.std`` in verl-agent), ``"mean"`` only subtracts the mean (F_norm = 1, the paper's Dr.GRPO-style
variant; verl-agent's ``mean_norm``). Groups of one get 0 at both levels. Defaults: RewardFlow Tab. 8
(GiGPO rows: gamma 0.95, w 1). ``preset=official`` runs as verl-agent's trainer does: ``mean_norm`` (its
config default), the episode statistics taken across the group's steps, and its invalid-action penalty (0.1)
on the step returns and the rows' episode scores (checked against verl-agent's functions: docs/methods.md).
"""

from __future__ import annotations

import time
from typing import Any, ClassVar, Literal

import numpy as np
from pydantic import Field

from creditflow.credit.batch import StepBatch
from creditflow.credit.groupnorm import grouped_normalize
from creditflow.credit.registry import Credit, Knobs, register_estimator
from creditflow.credit.returns import ReturnSource, batch_returns
from creditflow.credit.rewardflow import Preset, TrajStats
from creditflow.credit.states import StateFn, intern_nodes, step_states

GiGPONormalize = Literal["mean_std", "mean"]
# verl-agent's trainer (algorithm.gigpo.mode: mean_norm; actor.invalid_action_penalty_coef: 0.1)
OFFICIAL = {"normalize": "mean", "traj_stats": "steps", "invalid_penalty": 0.1}


def discounted_returns(rewards, lengths, gamma: float = 0.95) -> np.ndarray:
    """GiGPO Eq. 5: R_t = r_t + gamma * R_{t+1} within each trajectory (steps laid end to end)."""
    r = np.asarray(rewards, dtype=np.float64)
    lengths = np.asarray(lengths, dtype=np.int64)
    if r.size == 0:
        return r.copy()
    first = np.cumsum(lengths) - lengths
    row = np.repeat(np.arange(lengths.size), lengths)
    col = np.arange(r.size) - first[row]
    grid = np.zeros((lengths.size, int(lengths.max())))
    grid[row, col] = r
    running = np.zeros(lengths.size)
    for t in range(grid.shape[1] - 1, -1, -1):  # zeros past a trajectory's end leave it unchanged
        running = grid[:, t] + gamma * running
        grid[:, t] = running
    return grid[row, col]


def outcome_step_rewards(outcomes, lengths) -> np.ndarray:
    """(S,) step rewards that carry each trajectory's outcome on its last step and 0 elsewhere: the r_t of
    Eq. 5 in a sparse-reward env (steps laid end to end, ``lengths`` steps per trajectory)."""
    lengths = np.asarray(lengths, dtype=np.int64)
    r = np.zeros(int(lengths.sum()))
    last = np.cumsum(lengths)[lengths > 0] - 1
    r[last] = np.asarray(outcomes, dtype=np.float64)[lengths > 0]
    return r


def gigpo_advantages(returns, group_ids, step_returns, anchor_ids, step_traj, knobs: GiGPOKnobs,
                     row_penalty=0.0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """GiGPO Eq. 3, 7, 8 with ``knobs``' ``step_weight``, ``normalize``, ``eps``, ``ddof`` and ``traj_stats``:
    returns ``(A, A_E per step, A_S)``. ``traj_stats="steps"``: Eq. 3's statistics over the group's steps
    (verl-agent's ``compute_mean_std_cross_steps``) instead of its rollouts, each row's episode score less its
    ``row_penalty`` (verl-agent's invalid-action penalty)."""
    norm = {"divide_std": knobs.normalize == "mean_std", "eps": knobs.eps, "ddof": knobs.ddof}
    step_traj = np.asarray(step_traj)
    if knobs.traj_stats == "steps":
        a_episode = grouped_normalize(np.asarray(returns)[step_traj] - row_penalty,
                                      np.asarray(group_ids)[step_traj], **norm)
    else:
        a_episode = grouped_normalize(returns, group_ids, **norm)[step_traj]  # Eq. 3
    a_step = grouped_normalize(step_returns, anchor_ids, **norm)  # Eq. 7
    return a_episode + knobs.step_weight * a_step, a_episode, a_step  # Eq. 8


class GiGPOKnobs(Knobs):
    """Knobs of ``gigpo`` (defaults: RewardFlow Tab. 8, GiGPO rows)."""

    source: ClassVar[str] = "GiGPO paper Eq. 3, 5-8; preset=official checked against verl-agent's code"

    gamma: float = Field(0.95, ge=0, le=1)
    """Discount gamma of the step return R_t (GiGPO Eq. 5), in [0, 1]; Tab. 8: 0.95."""
    step_weight: float = Field(1.0, ge=0)
    """Weight w of the step advantage in A = A_E + w * A_S (GiGPO Eq. 8); Tab. 8: 1."""
    normalize: GiGPONormalize = "mean_std"
    """F_norm of Eq. 3 and 7: mean_std divides by the sample std + eps, mean only subtracts the mean."""
    eps: float = Field(1e-6, gt=0)
    """eps added to the std in Eq. 3 and 7; verl-agent: 1e-6."""
    ddof: int = Field(1, ge=0, le=1)
    """Std of Eq. 3 and 7: 1 = sample std (torch.std in verl-agent), 0 = population std."""
    traj_stats: TrajStats = "rollouts"
    """Eq. 3 statistics over the group's rollouts (paper) or over all its steps (verl-agent's trainer)."""
    invalid_penalty: float = Field(0.0, ge=0)
    """Subtracted from an invalid step's step return (Eq. 5) and, with traj_stats=steps, from its row's episode
    score: verl-agent's apply_invalid_action_penalty (invalid_action_penalty_coef 0.1 in its trainer and run
    scripts). The paper has none: 0, and the rollouts' own rewards carry any penalty."""
    preset: Preset = "paper"
    """paper: the knobs as set. official: as verl-agent's trainer ran, i.e. normalize=mean, traj_stats=steps and
    invalid_penalty=0.1 unless given."""
    reward_source: ReturnSource = "return"
    """R(tau) of Eq. 3: return (summed env reward, the paper), score or success (0/1)."""
    step_reward_source: ReturnSource | None = None
    """r_t of Eq. 5: return = the env rewards; score or success = that outcome on the last step, 0 before it.
    None (default): as reward_source, so success trains both levels on success alone."""
    state_fn: StateFn = "state_key"
    """Anchor-state identity (Eq. 6): state_key (exact state, the paper), observation, enriched or embedding."""
    similarity: float = Field(0.9, ge=-1, le=1)
    """Cosine similarity that merges states for state_fn=embedding (RewardFlow App. B.1: 0.9)."""

    presets: ClassVar[dict[str, dict[str, Any]]] = {"official": OFFICIAL}


@register_estimator("gigpo", knobs=GiGPOKnobs, needs={"state"})
def gigpo(batch: StepBatch, knobs: GiGPOKnobs) -> Credit:
    """GiGPO: ``process_reward`` (discounted return R_t from the step, Eq. 5), ``step_reward`` (the r_t of
    Eq. 5: the env reward, or the outcome on the last step) and ``advantage`` (Eq. 8) per row. Metrics are
    batch totals or means over anchor groups; ``credit/time_ms`` is the wall time of this call."""
    t0 = time.perf_counter()
    knobs = knobs.resolved()
    traj_group = batch.traj_group
    st = step_states(batch, knobs.state_fn, similarity=knobs.similarity)
    step_traj = batch.step_traj
    anchor, _, _ = intern_nodes(st.pre, traj_group[step_traj])  # Eq. 6: anchor states per task group

    returns = batch_returns(batch, knobs.reward_source)
    step_source = knobs.step_reward_source or knobs.reward_source
    if step_source == "return":
        rewards = batch.reward
    else:  # the outcome at the end, nothing before it (a sparse-reward env's r_t)
        rewards = outcome_step_rewards(batch_returns(batch, step_source), batch.lengths)
    step_returns = discounted_returns(rewards, batch.lengths, knobs.gamma)  # Eq. 5
    penalty = knobs.invalid_penalty * ~batch.valid.astype(bool) if knobs.invalid_penalty and batch.n_steps else 0.0
    step_returns = step_returns - penalty  # verl-agent's apply_invalid_action_penalty on the step returns
    advantage, _, _ = gigpo_advantages(returns, traj_group, step_returns, anchor, step_traj, knobs,
                                       row_penalty=penalty)

    sizes = np.bincount(anchor) if anchor.size else np.zeros(0, dtype=np.int64)
    n_groups = max(len(batch.group_names), 1)
    per_group = np.bincount(traj_group, minlength=n_groups)
    spread = grouped_normalize(returns, traj_group, divide_std=False) if returns.size else returns
    moving = np.bincount(traj_group, weights=np.abs(spread), minlength=n_groups) > 0
    degenerate = int(((per_group > 1) & ~moving).sum())
    metrics = {
        "credit/groups": len(batch.group_names),
        "credit/degenerate_group_frac": degenerate / n_groups,
        "credit/return_mean": float(returns.mean()) if returns.size else 0.0,
        "credit/anchor_groups": int(sizes.size),
        "credit/anchor_group_size": float(sizes.mean()) if sizes.size else 0.0,
        "credit/singleton_state_frac": float((sizes[anchor] == 1).mean()) if anchor.size else 0.0,
        "credit/time_ms": (time.perf_counter() - t0) * 1000.0,
    }
    return Credit(advantage=advantage, step_reward=rewards.copy(), process_reward=step_returns, metrics=metrics)
