"""G2PO: Group-Graph Policy Optimization (Wang, Song, Zhang et al. 2026; arXiv 2606.22995).

Per task group (all rollouts of one task):

1. Graph (§3.1): identical observations of the group's rollouts are merged into one node (canonical states,
   ``state_fn``); each step is a transition s_t -> s_{t+1}, an edge of the graph. An action *is* its edge.
2. Group-aggregation state value (§3.2): V(s) = the mean, over every visit of s in the group (every step
   taken from s, in any rollout), of the return-to-go from that visit, G_t = sum_k gamma^k r_{t+k}. A
   state never left (an episode's last state) has V = 0: nothing follows it. Averaging over the visits of
   all rollouts is what lowers the variance and the trajectory dependence of a single rollout's G_t.
3. Edge TD error (§3.3): delta(s, s') = r + gamma * V(s') - V(s), averaged over the occurrences of the
   edge (they differ only where the env reward of the same transition differs).
4. Edge-centric advantage (§3.3): the TD errors standardised across all edges of the group's graph,
   A_e = (delta_e - mean) / (std + eps) (sample std ``ddof=1``; a graph of one edge, or of equal TD
   errors, gives 0). Every step gets its edge's advantage; ``alpha_traj`` > 0 adds a GRPO term over the
   group's returns (0 by default: the paper's estimator is the edge term alone).

r_t are the env rewards (``reward_source="return"``) or, for ``success``/``score``, that outcome on a
rollout's last step and 0 before it (a sparse-reward env's reward). Invalid actions and self-loops are
edges like the others: a self-loop's TD error is r + (gamma - 1) V(s), its penalty where the env gives one.
Where the paper leaves a choice open (gamma, edge vs step statistics, ddof) docs/methods.md says what was
chosen and why.
"""

from __future__ import annotations

import time
from typing import ClassVar, Literal

import numpy as np
from pydantic import Field

from creditflow.credit.batch import StepBatch
from creditflow.credit.gigpo import discounted_returns, outcome_step_rewards
from creditflow.credit.graphgpo import StateGraphKnobs
from creditflow.credit.groupnorm import grouped_normalize
from creditflow.credit.registry import Credit, register_estimator
from creditflow.credit.returns import ReturnSource, batch_returns
from creditflow.credit.states import intern_nodes, step_states

Standardize = Literal["edges", "steps"]


def group_state_values(step_returns, pre, n_nodes: int) -> np.ndarray:
    """§3.2: V(s) = mean return-to-go over every step taken from s (0 for a state no step leaves)."""
    pre = np.asarray(pre, dtype=np.int64)
    visits = np.bincount(pre, minlength=n_nodes)
    total = np.bincount(pre, weights=np.asarray(step_returns, dtype=np.float64), minlength=n_nodes)
    return np.divide(total, visits, out=np.zeros(n_nodes), where=visits > 0)


def td_errors(rewards, values, pre, post, gamma: float = 1.0) -> np.ndarray:
    """§3.3: delta_t = r_t + gamma * V(s_{t+1}) - V(s_t) per step."""
    v = np.asarray(values, dtype=np.float64)
    return np.asarray(rewards, dtype=np.float64) + gamma * v[np.asarray(post)] - v[np.asarray(pre)]


def edge_advantages(delta, pre, post, node_group, n_nodes: int, *, standardize: str = "edges",
                    eps: float = 1e-6, ddof: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """§3.3: TD errors standardised over the whole graph of each group. Returns ``(per-step advantage,
    per-step edge id)``. ``standardize="edges"``: each distinct edge counts once, with the mean TD error of its
    occurrences; ``"steps"``: each step counts once."""
    delta = np.asarray(delta, dtype=np.float64)
    pre = np.asarray(pre, dtype=np.int64)
    code = pre * max(n_nodes, 1) + np.asarray(post, dtype=np.int64)
    uniq, edge = np.unique(code, return_inverse=True)
    edge = edge.reshape(-1)
    if standardize == "steps":
        return grouped_normalize(delta, np.asarray(node_group)[pre], eps=eps, ddof=ddof), edge
    count = np.bincount(edge, minlength=uniq.size)
    edge_delta = np.bincount(edge, weights=delta, minlength=uniq.size) / np.maximum(count, 1)
    edge_group = np.asarray(node_group)[uniq // max(n_nodes, 1)]
    return grouped_normalize(edge_delta, edge_group, eps=eps, ddof=ddof)[edge], edge


class G2POKnobs(StateGraphKnobs):
    """Knobs of ``g2po`` (docs/methods.md, "GraphGPO and G2PO", says why each default)."""

    source: ClassVar[str] = "built from its abstract and summaries: every equation is creditflow's choice"

    gamma: float = Field(1.0, ge=0, le=1)
    """Discount gamma of the return-to-go (§3.2) and the TD error (§3.3), in [0, 1]."""
    standardize: Standardize = "edges"
    """Statistics of the global standardisation: over the graph's distinct edges (edge-centric) or its steps."""
    alpha_traj: float = Field(0.0, ge=0)
    """Weight of an added GRPO term over the group's returns; 0: the edge advantage alone."""
    reward_source: ReturnSource = "return"
    """r_t: return = the env rewards; score or success = that outcome on the last step, 0 before it."""


@register_estimator("g2po", knobs=G2POKnobs, needs={"state"})
def g2po(batch: StepBatch, knobs: G2POKnobs) -> Credit:
    """G2PO: ``process_reward`` V(s_t) (§3.2), ``step_reward`` the TD error delta_t (§3.3) and ``advantage``
    (the globally standardised edge TD error, plus ``alpha_traj`` times GRPO) per row."""
    t0 = time.perf_counter()
    st = step_states(batch, knobs.state_fn, similarity=knobs.similarity)
    step_group = batch.traj_group[batch.step_traj]
    inverse, node_group, node_keys = intern_nodes((*st.pre, *st.post), np.concatenate((step_group, step_group)))
    n = batch.n_steps
    pre, post = inverse[:n], inverse[n:]
    if knobs.reward_source == "return":
        rewards = batch.reward.astype(np.float64)
    else:
        rewards = outcome_step_rewards(batch_returns(batch, knobs.reward_source), batch.lengths)
    step_returns = discounted_returns(rewards, batch.lengths, knobs.gamma)
    values = group_state_values(step_returns, pre, len(node_keys))  # §3.2
    delta = td_errors(rewards, values, pre, post, knobs.gamma)  # §3.3
    advantage, edge = edge_advantages(delta, pre, post, node_group, len(node_keys), standardize=knobs.standardize,
                                      eps=knobs.eps, ddof=knobs.ddof)
    returns = batch_returns(batch, knobs.reward_source)
    if knobs.alpha_traj:
        advantage = advantage + knobs.alpha_traj * grouped_normalize(
            returns, batch.traj_group, eps=knobs.eps, ddof=knobs.ddof)[batch.step_traj]

    visits = np.bincount(pre, minlength=len(node_keys)) if n else np.zeros(0, dtype=np.int64)
    metrics = {
        "credit/groups": len(batch.group_names),
        "credit/graph_nodes": len(node_keys) / max(len(batch.group_names), 1),
        "credit/graph_edges": (int(edge.max()) + 1 if n else 0) / max(len(batch.group_names), 1),
        "credit/shared_state_frac": float((visits[pre] > 1).mean()) if n else 0.0,
        "credit/td_abs_mean": float(np.abs(delta).mean()) if n else 0.0,
        "credit/return_mean": float(returns.mean()) if returns.size else 0.0,
        "credit/time_ms": (time.perf_counter() - t0) * 1000.0,
    }
    return Credit(advantage=advantage, step_reward=delta, process_reward=values[pre], metrics=metrics)
