"""GraphGPO: Graph-based Group Policy Optimization (Cheng, He, Feng et al., ICML 2026; arXiv 2605.26684).

By the GiGPO authors. Per task group (all rollouts of one task):

1. Graph (§3.1): the group's rollouts merged into one state-transition graph. Nodes are canonical states
   (``state_fn``, ``state_key`` by default, as GiGPO's anchor states); every step is an edge *occurrence*
   s_t -> s_{t+1} of unit cost, repeated transitions stay repeated (they are credited once each). The last
   action of a successful rollout enters the goal: its s_{t+1} is a success terminal.
2. Distance to the goal (§3.2): d(s) = the shortest-path hop count from s to a success terminal over the
   whole graph (multi-source reverse BFS, i.e. reverse Dijkstra with unit costs), so a state on a failed
   rollout that another rollout continued to success gets a finite distance. A state from which no success
   is reachable gets d = (largest finite d in its group) + 1 (its group's "one step farther than anything
   that reaches the goal"). A group without any success has no goal: its graph term is 0.
3. Edge reward (Eq. 4): G(s_t, a_t) = R_succ * omega ** (d(s_{t+1}) + c), c = 1 the edge cost: the closer
   the transition lands to the goal, the larger its reward; omega in (0, 1).
4. Graph advantage (§3.3): G standardised among the edges that leave the same source state s_t
   (A_G = (G - mean) / (std + eps), sample std ``ddof=1``; a source with one edge, or with equal G, gets 0),
   so only *which way* the agent went from s_t is credited, not where s_t is.
5. Episode advantage: A_E = GRPO over the group's episode returns (``reward_source``, summed env reward by
   default as in verl-agent), the same standardisation.
6. A = beta_episode * A_E + beta_graph * A_G (both 1).

Invalid actions and self-loops (s_{t+1} = s_t) are edge occurrences like any other: they land where they
started, so from s_t they rank below any edge that makes progress, and the invalid-action penalty reaches
them through the episode return. Where the paper leaves a choice open (the unreachable distance, the ddof,
omega's value, the success reward), the values are those of the public GraphGPO reproduction's reference
recipe; docs/methods.md ("GraphGPO and G2PO") says what was chosen and why.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
from pydantic import Field

from creditflow.credit.batch import StepBatch
from creditflow.credit.graph import reverse_bfs, unique_edges
from creditflow.credit.groupnorm import grouped_normalize
from creditflow.credit.registry import Credit, Knobs, register_estimator
from creditflow.credit.returns import ReturnSource, batch_returns
from creditflow.credit.rewardflow import batch_success
from creditflow.credit.states import StateFn, intern_nodes, step_states


def goal_distances(n_nodes: int, src, dst, success_nodes, node_group,
                   n_groups: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """§3.2: hop distance of every node to its group's nearest success terminal, over the whole graph.

    Returns ``(dist, has_goal, reached)``: ``dist`` (N,) float, unreachable nodes of a group with a goal at
    (largest finite distance in the group) + 1; ``has_goal`` (n_groups,) bool; ``reached`` (N,) bool, a path
    to a success exists. Nodes of a group without a goal get NaN (no distance exists)."""
    hops = reverse_bfs(n_nodes, src, dst, success_nodes).astype(np.float64)  # -1: unreachable
    node_group = np.asarray(node_group, dtype=np.int64)
    has_goal = np.zeros(n_groups, dtype=bool)
    has_goal[node_group[np.asarray(success_nodes, dtype=np.int64)]] = True
    farthest = np.full(n_groups, -1.0)
    reached = hops >= 0
    np.maximum.at(farthest, node_group[reached], hops[reached])
    dist = np.where(reached, hops, farthest[node_group] + 1.0)
    dist[~has_goal[node_group]] = np.nan
    return dist, has_goal, reached


def edge_rewards(dist_next, omega: float = 0.1, success_reward: float = 10.0, cost: float = 1.0) -> np.ndarray:
    """Eq. 4: G(s_t, a_t) = R_succ * omega ** (d(s_{t+1}) + c) for every edge occurrence (NaN stays NaN)."""
    return success_reward * np.power(float(omega), np.asarray(dist_next, dtype=np.float64) + cost)


def graph_advantages(rewards, source_ids, active, eps: float = 1e-6, ddof: int = 1) -> np.ndarray:
    """§3.3: A_G = (G - mean) / (std + eps) among the edge occurrences leaving the same source state; 0 where
    ``active`` is False (a group without a goal)."""
    active = np.asarray(active, dtype=bool)
    out = np.zeros(np.asarray(rewards).shape, dtype=np.float64)
    if active.any():
        out[active] = grouped_normalize(np.asarray(rewards)[active], np.asarray(source_ids)[active],
                                        eps=eps, ddof=ddof)
    return out


@dataclass
class GoalGraph:
    """The per-group graphs of a batch and the distances GraphGPO reads (``creditflow graph`` draws them)."""

    n_nodes: int
    node_group: np.ndarray  # (N,) group index of each node
    node_keys: list  # canonical key of each node
    pre: np.ndarray  # (S,) node of s_t
    post: np.ndarray  # (S,) node of s_{t+1}
    edge_src: np.ndarray  # de-duplicated edges (every step's transition)
    edge_dst: np.ndarray
    success_nodes: np.ndarray
    dist: np.ndarray  # (N,) distance to the goal (NaN in a group without success)
    has_goal: np.ndarray  # (n_groups,)
    reached: np.ndarray  # (N,) a path to a success terminal exists
    display: dict


def build_goal_graph(batch: StepBatch, *, state_fn: str = "state_key", similarity: float = 0.9,
                     success_threshold: float | None = None) -> GoalGraph:
    """§3.1-3.2: nodes, edge occurrences, success terminals and d(s) for every group of ``batch``."""
    won = batch_success(batch, success_threshold)
    st = step_states(batch, state_fn, similarity=similarity, success=won.tolist())
    step_group = batch.traj_group[batch.step_traj]
    inverse, node_group, node_keys = intern_nodes((*st.pre, *st.post), np.concatenate((step_group, step_group)))
    n = batch.n_steps
    pre, post = inverse[:n], inverse[n:]
    edge_src, edge_dst = unique_edges(pre, post, np.ones(n, dtype=bool))
    has_steps = batch.lengths > 0
    last = (batch.traj_first + batch.lengths - 1)[has_steps & won]
    success_nodes = np.unique(post[last])
    dist, has_goal, reached = goal_distances(len(node_keys), edge_src, edge_dst, success_nodes, node_group,
                                    max(len(batch.group_names), 1))
    return GoalGraph(len(node_keys), node_group, node_keys, pre, post, edge_src, edge_dst, success_nodes, dist,
                     has_goal, reached, st.display)


class StateGraphKnobs(Knobs):
    """What the two graph estimators of one shape (``graphgpo``, ``g2po``) share: the state identity of their
    nodes and their standardisation."""

    eps: float = Field(1e-6, gt=0)
    """eps added to the std of the standardisations."""
    ddof: int = Field(1, ge=0, le=1)
    """Std of the standardisations: 1 = sample std (torch.std, verl-agent), 0 = population std."""
    state_fn: StateFn = "state_key"
    """State identity of the graph's nodes: state_key (exact state), observation, enriched or embedding."""
    similarity: float = Field(0.9, ge=-1, le=1)
    """Cosine similarity that merges states for state_fn=embedding."""


class GraphGPOKnobs(StateGraphKnobs):
    """Knobs of ``graphgpo`` (defaults: the GraphGPO reproduction's reference recipe, docs/methods.md)."""

    omega: float = Field(0.1, gt=0, lt=1)
    """Base omega of the edge reward R_succ * omega ** (d(s') + 1) (Eq. 4), in (0, 1)."""
    success_reward: float = Field(10.0, gt=0)
    """R_succ of Eq. 4 (10, verl-agent's success reward); it only matters against eps."""
    beta_episode: float = Field(1.0, ge=0)
    """Weight of the episode-level advantage A_E."""
    beta_graph: float = Field(1.0, ge=0)
    """Weight of the graph advantage A_G."""
    reward_source: ReturnSource = "return"
    """Episode return of A_E: return (summed env reward, verl-agent), score or success (0/1)."""
    success_threshold: float | None = None
    """Success terminal = won, or score >= this when set (graded envs); none: won only."""


@register_estimator("graphgpo", knobs=GraphGPOKnobs, needs={"state", "success"})
def graphgpo(batch: StepBatch, knobs: GraphGPOKnobs) -> Credit:
    """GraphGPO: ``process_reward`` d(s_t) (the graph distance of the state the step leaves; NaN-free: -1 in a
    group without success), ``step_reward`` G (Eq. 4; 0 in a group without success) and ``advantage`` per row."""
    t0 = time.perf_counter()
    g = build_goal_graph(batch, state_fn=knobs.state_fn, similarity=knobs.similarity,
                         success_threshold=knobs.success_threshold)
    step_group = batch.traj_group[batch.step_traj]
    active = g.has_goal[step_group] if batch.n_steps else np.zeros(0, dtype=bool)
    reward = np.where(active, edge_rewards(np.nan_to_num(g.dist[g.post]), knobs.omega, knobs.success_reward), 0.0)
    a_graph = graph_advantages(reward, g.pre, active, eps=knobs.eps, ddof=knobs.ddof)  # §3.3
    returns = batch_returns(batch, knobs.reward_source)
    a_episode = grouped_normalize(returns, batch.traj_group, eps=knobs.eps, ddof=knobs.ddof)[batch.step_traj]
    advantage = knobs.beta_episode * a_episode + knobs.beta_graph * a_graph

    dist_pre = g.dist[g.pre] if batch.n_steps else np.zeros(0)
    progress = active & (np.nan_to_num(g.dist[g.post]) < np.nan_to_num(dist_pre))
    won_step = batch.success[batch.step_traj]
    metrics = {
        "credit/groups": len(batch.group_names),
        "credit/success_group_frac": float(g.has_goal.mean()) if len(batch.group_names) else 0.0,
        "credit/graph_nodes": g.n_nodes / max(len(batch.group_names), 1),
        "credit/reach_success_frac": float(g.reached[g.pre].mean()) if batch.n_steps else 0.0,
        # the paper's motivating statistic (Fig. 1): progress steps in failed / successful rollouts
        "credit/progress_in_failed_frac": float(progress[~won_step].mean()) if (~won_step).any() else 0.0,
        "credit/no_progress_in_success_frac": float((~progress[won_step]).mean()) if won_step.any() else 0.0,
        "credit/return_mean": float(returns.mean()) if returns.size else 0.0,
        "credit/time_ms": (time.perf_counter() - t0) * 1000.0,
    }
    return Credit(advantage=advantage, step_reward=reward, process_reward=np.where(active, dist_pre, -1.0),
                  metrics=metrics)
