"""GraphGPO: Graph-based Group Policy Optimization (Cheng, He, Feng et al., ICML 2026; arXiv 2605.26684).

By the GiGPO authors; their official code is verl-agent's ``recipe/GraphGPO`` (upstream commit 234a913, PR
#256). ``preset=official`` (the default) computes what that recipe computes (its ``core_graph.py``, the
``gather_rollout_data`` of ``rollout_loop.py``, ``apply_invalid_action_penalty`` and ``fit`` of
``graphgpo_ray_trainer.py``, the normalisations of ``gigpo/core_gigpo.py``); ``preset=reproduction`` is the
reading creditflow followed before that code was reachable (the abstract, summaries and a third-party
reproduction). Per task group (all rollouts of one task):

1. Graph (§3.1): the group's rollouts merged into one state-transition graph. Nodes are canonical states
   (``state_fn``, ``state_key`` by default: the recipe's ``anchor_obs``); every step is an edge occurrence
   s_t -> s_{t+1} of unit cost. The last step of a successful rollout enters the goal: official, one shared
   ``success`` node per group (the recipe writes ``next_obs = 'success'``; success = episode score > 0, the
   summed env reward by default, ``success_from=episode_score``); reproduction, that rollout's final state.
2. Distance to the goal (§3.2): d(s) = shortest hop count from s to the goal over the whole graph (the recipe's
   reverse Dijkstra at unit cost = reverse BFS), so a state on a failed rollout that another rollout continued
   to success gets a finite distance. A state with no path gets (largest finite d in its group) + 1. Official:
   the goal node counts (d = 0) even where no rollout reached it, so in an all-fail group every state has
   d = 1; reproduction: a group without success has no distance and no graph term.
3. Edge return (Eq. 4): G(s_t, a_t) = R_succ * omega ** (d(s_{t+1}) + c) (official: 10 * gamma ** d(s'), c = 0,
   the recipe's ``10 * gamma ** (d(s') + w - 1)`` with w = 1; reproduction: c = 1); ``normalize_distance``:
   R_succ * omega ** (d(s') - d(s) + 1). The recipe's ``algorithm.gamma`` is omega: 0.1 in its config, 0.1 on
   ALFWorld, 0.2 on WebShop and 0.8 on Sokoban in its run scripts.
4. Invalid actions (``apply_invalid_action_penalty``): ``invalid_penalty`` (0.1) is subtracted from an invalid
   step's G *and* from that row's episode score, so an invalid action is the worst way out of its state.
5. Graph advantage (§3.3): G standardised among the edge occurrences that leave the same source state s_t
   (``step_norm_reward`` over ``build_step_group``: (G - mean) / (std + eps), sample std; ``normalize=mean``,
   the recipe's ``mean_norm``, only subtracts the mean); a source with one edge gets 0.
6. Episode advantage: the episode score (``reward_source``, the summed env reward by default, minus the row's
   invalid penalty) normalised within the task group over all its step rows (``episode_stats=steps``, the
   recipe's ``compute_mean_std_cross_steps``) or over one value per rollout (``rollouts``, reproduction).
7. A = beta_episode * A_E + beta_graph * A_G (both 1).

Where creditflow keeps its own rule: a task group with a single row gets episode advantage 0 (the recipe
divides its score by 1 + eps there), and a group of equal values gets exactly 0 (float32 rounding can leave
a residue of order 1e-7 / eps in the recipe). docs/methods.md ("GraphGPO") lists each choice and the check
against the recipe's own functions.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

import numpy as np
from pydantic import Field

from creditflow.credit.batch import StepBatch, batch_from_trajectories
from creditflow.credit.graph import GraphNodes, reverse_bfs, unique_edges
from creditflow.credit.groupnorm import grouped_normalize
from creditflow.credit.registry import Credit, Drawing, Knobs, register_estimator
from creditflow.credit.returns import ReturnSource, batch_returns
from creditflow.credit.rewardflow import TrajStats, batch_success
from creditflow.credit.states import SUCCESS_KEY, StateFn, intern_nodes, step_states
from creditflow.rollout.trajectory import Trajectory

Goal = Literal["sink", "final_state"]
SuccessFrom = Literal["episode_score", "outcome"]
GraphGPOPreset = Literal["official", "reproduction"]
# the reading before the official recipe was reachable (issue 72); the field defaults are the recipe's
REPRODUCTION = {"distance_offset": 1.0, "invalid_penalty": 0.0, "goal": "final_state", "success_from": "outcome",
                "episode_stats": "rollouts"}


def goal_distances(n_nodes: int, src, dst, success_nodes, node_group, n_groups: int,
                   goal: str = "sink") -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """§3.2: hop distance of every node to its group's goal, over the whole graph.

    Returns ``(dist, has_goal, reached)``: ``dist`` (N,) float, a node with no path at (largest finite
    distance in its group) + 1; ``has_goal`` (n_groups,) bool, a rollout of the group succeeded; ``reached``
    (N,) bool, a path to the goal exists. ``goal="sink"`` (the recipe): the goal node counts at distance 0
    even in a group no rollout reached it from, so there every node gets 1; ``"final_state"``: nodes of a group
    without success get NaN (no distance exists)."""
    hops = reverse_bfs(n_nodes, src, dst, success_nodes).astype(np.float64)  # -1: unreachable
    node_group = np.asarray(node_group, dtype=np.int64)
    has_goal = np.zeros(n_groups, dtype=bool)
    has_goal[node_group[np.asarray(success_nodes, dtype=np.int64)]] = True
    farthest = np.full(n_groups, 0.0 if goal == "sink" else -1.0)
    reached = hops >= 0
    np.maximum.at(farthest, node_group[reached], hops[reached])
    dist = np.where(reached, hops, farthest[node_group] + 1.0)
    if goal != "sink":
        dist[~has_goal[node_group]] = np.nan
    return dist, has_goal, reached


def edge_rewards(dist_next, omega: float = 0.1, success_reward: float = 10.0, cost: float = 0.0,
                 dist_pre=None) -> np.ndarray:
    """Eq. 4: G(s_t, a_t) = R_succ * omega ** (d(s_{t+1}) + cost) for every edge occurrence; with ``dist_pre``
    (the recipe's ``normalize_distance``) R_succ * omega ** (d(s_{t+1}) - d(s_t) + 1). NaN stays NaN."""
    exponent = np.asarray(dist_next, dtype=np.float64)
    exponent = exponent + cost if dist_pre is None else exponent - np.asarray(dist_pre, dtype=np.float64) + 1.0
    return success_reward * np.power(float(omega), exponent)


def graph_advantages(rewards, source_ids, active, *, divide_std: bool = True, eps: float = 1e-6,
                     ddof: int = 1) -> np.ndarray:
    """§3.3: A_G = (G - mean) / (std + eps) (or G - mean) among the edge occurrences leaving the same source
    state; 0 where ``active`` is False (a group without a goal under ``goal=final_state``)."""
    active = np.asarray(active, dtype=bool)
    out = np.zeros(np.asarray(rewards).shape, dtype=np.float64)
    if active.any():
        out[active] = grouped_normalize(np.asarray(rewards)[active], np.asarray(source_ids)[active],
                                        divide_std=divide_std, eps=eps, ddof=ddof)
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
    dist: np.ndarray  # (N,) distance to the goal (NaN in a group without success under goal=final_state)
    has_goal: np.ndarray  # (n_groups,) a rollout of the group succeeded
    reached: np.ndarray  # (N,) a path to the goal exists
    display: dict


def graph_success(batch: StepBatch, knobs: "GraphGPOKnobs") -> np.ndarray:
    """(T,) which rollouts reach the goal: episode score (``reward_source``) > 0, the recipe's
    ``episode_rewards > 0`` (``success_from=episode_score``), or the recorded outcome (``success_threshold``
    applied)."""
    if knobs.success_from == "episode_score":
        return batch_returns(batch, knobs.reward_source) > 0
    return batch_success(batch, knobs.success_threshold)


def build_goal_graph(batch: StepBatch, *, state_fn: str = "state_key", similarity: float = 0.9,
                     won: np.ndarray | None = None, goal: str = "sink") -> GoalGraph:
    """§3.1-3.2: nodes, edge occurrences, the goal and d(s) for every group of ``batch``; ``won`` (T,) marks the
    rollouts whose last step enters the goal (default: the recorded success)."""
    won = batch.success.copy() if won is None else np.asarray(won, dtype=bool)
    st = step_states(batch, state_fn, similarity=similarity, success=won.tolist())
    step_group = batch.traj_group[batch.step_traj]
    has_steps = batch.lengths > 0
    last = (batch.traj_first + batch.lengths - 1)[has_steps & won]
    post_keys = list(st.post)
    if goal == "sink":  # the recipe: the last step of a successful rollout enters the group's one success node
        for j in last.tolist():
            post_keys[j] = SUCCESS_KEY
    inverse, node_group, node_keys = intern_nodes((*st.pre, *post_keys), np.concatenate((step_group, step_group)))
    n = batch.n_steps
    pre, post = inverse[:n], inverse[n:]
    edge_src, edge_dst = unique_edges(pre, post, np.ones(n, dtype=bool))
    success_nodes = np.unique(post[last])
    dist, has_goal, reached = goal_distances(len(node_keys), edge_src, edge_dst, success_nodes, node_group,
                                             max(len(batch.group_names), 1), goal)
    display = dict(st.display)
    if goal == "sink":
        display.setdefault(SUCCESS_KEY, "success")
    return GoalGraph(len(node_keys), node_group, node_keys, pre, post, edge_src, edge_dst, success_nodes, dist,
                     has_goal, reached, display)


def episode_advantages(batch: StepBatch, scores: np.ndarray, row_penalty: np.ndarray, *, stats: str,
                       divide_std: bool, eps: float, ddof: int) -> np.ndarray:
    """(S,) A_E: the episode score of each row (its rollout's score minus the row's invalid penalty)
    normalised in its task group, over all the group's step rows (``stats=steps``, the recipe's
    ``episode_norm_reward(compute_mean_std_cross_steps=True)``) or over one score per rollout (``rollouts``;
    the per-row penalty then reaches the graph term only)."""
    if stats == "steps":
        step_group = batch.traj_group[batch.step_traj]
        return grouped_normalize(scores[batch.step_traj] - row_penalty, step_group, divide_std=divide_std,
                                 eps=eps, ddof=ddof)
    return grouped_normalize(scores, batch.traj_group, divide_std=divide_std, eps=eps, ddof=ddof)[batch.step_traj]


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
    """Knobs of ``graphgpo`` (defaults: the official recipe, verl-agent ``recipe/GraphGPO``; docs/methods.md)."""

    source: ClassVar[str] = "preset=official, the default, checked against the authors' verl-agent recipe"

    preset: GraphGPOPreset = "official"
    """official: as the authors' recipe computes (the defaults). reproduction: creditflow's reading before the
    recipe was reachable: distance_offset=1, invalid_penalty=0, goal=final_state, success_from=outcome,
    episode_stats=rollouts unless given."""
    omega: float = Field(0.1, gt=0, lt=1)
    """omega of the edge return R_succ * omega ** (d(s') + c) (Eq. 4; the recipe's algorithm.gamma: 0.1 in its
    config and ALFWorld script, 0.2 WebShop, 0.8 Sokoban)."""
    success_reward: float = Field(10.0, gt=0)
    """R_succ of Eq. 4 (the recipe's 10)."""
    distance_offset: float = Field(0.0, ge=0)
    """c in omega ** (d(s') + c): 0 in the recipe (10 * gamma ** (d + w - 1), w = 1), 1 in the reproduction."""
    normalize_distance: bool = False
    """The recipe's normalize_distance: the edge return R_succ * omega ** (d(s') - d(s) + 1) instead."""
    normalize: Literal["mean_std", "mean"] = "mean_std"
    """Both standardisations: mean_std divides by the sample std + eps (the recipe's mean_std_norm), mean only
    subtracts the mean (mean_norm)."""
    invalid_penalty: float = Field(0.1, ge=0)
    """Subtracted from an invalid step's edge return and from its row's episode score (the recipe's
    invalid_action_penalty_coef, 0.1); on top of any penalty already in the recorded rewards."""
    goal: Goal = "sink"
    """sink: a successful rollout's last step enters one success node per group, and a group without success
    still has it (every state at d = 1, so only the invalid penalty moves A_G); final_state: the rollout's
    final state is the goal and a group without success has no graph term."""
    success_from: SuccessFrom = "episode_score"
    """Which rollouts reach the goal: episode_score = the reward_source value > 0 (the recipe's
    episode_rewards > 0, summed env reward); outcome = the recorded success (or score >= success_threshold)."""
    episode_stats: TrajStats = "steps"
    """A_E's mean and std over all step rows of the task group (steps, the recipe's cross-steps statistics) or
    over one score per rollout (rollouts)."""
    beta_episode: float = Field(1.0, ge=0)
    """Weight of the episode-level advantage A_E (the recipe's episode_advantage_w)."""
    beta_graph: float = Field(1.0, ge=0)
    """Weight of the graph advantage A_G (the recipe's step_advantage_w)."""
    reward_source: ReturnSource = "return"
    """Episode score of A_E: return (summed env reward, the recipe), score or success (0/1)."""
    success_threshold: float | None = None
    """With success_from=outcome: success = won, or score >= this when set (graded envs); none: won only."""

    presets: ClassVar[dict[str, dict[str, Any]]] = {"reproduction": REPRODUCTION}


def graph_nodes(group: list[Trajectory], knobs: GraphGPOKnobs | None) -> GraphNodes:
    """GraphGPO's graph of one group, to draw: every step is an edge; node value omega ** d(s) (1 at the goal, its
    Eq. 4 reward scaled by R_succ * omega), 0 where no success is reachable."""
    knobs = (knobs or GraphGPOKnobs()).resolved()
    batch = batch_from_trajectories(group)
    won = graph_success(batch, knobs)
    g = build_goal_graph(batch, state_fn=knobs.state_fn, similarity=knobs.similarity, won=won, goal=knobs.goal)
    dist = np.where(g.reached, np.nan_to_num(g.dist), -1.0)
    value = np.where(g.reached, np.power(knobs.omega, np.nan_to_num(g.dist)), 0.0)
    starts = g.pre[batch.traj_first[batch.lengths > 0]]
    return GraphNodes(g.pre, g.post, np.ones(batch.n_steps, dtype=bool), g.node_keys, g.display, value, dist,
                      g.success_nodes, np.unique(starts), np.ones(g.n_nodes, dtype=bool), int(won.sum()))


@register_estimator("graphgpo", knobs=GraphGPOKnobs, needs={"state", "success"},
                    draws=Drawing("GraphGPO", "omega^d(s), every step an edge", GraphGPOKnobs, graph_nodes))
def graphgpo(batch: StepBatch, knobs: GraphGPOKnobs) -> Credit:
    """GraphGPO: ``process_reward`` d(s_t) (the graph distance of the state the step leaves; -1 in a group
    without a distance), ``step_reward`` G (Eq. 4, after the invalid penalty; 0 where there is no graph term)
    and ``advantage`` per row."""
    t0 = time.perf_counter()
    knobs = knobs.resolved()
    won = graph_success(batch, knobs)
    g = build_goal_graph(batch, state_fn=knobs.state_fn, similarity=knobs.similarity, won=won, goal=knobs.goal)
    active = ~np.isnan(g.dist[g.pre]) if batch.n_steps else np.zeros(0, dtype=bool)
    dist_pre, dist_post = np.nan_to_num(g.dist[g.pre]), np.nan_to_num(g.dist[g.post])
    penalty = knobs.invalid_penalty * ~batch.valid.astype(bool) if batch.n_steps else np.zeros(0)
    reward = edge_rewards(dist_post, knobs.omega, knobs.success_reward, knobs.distance_offset,
                          dist_pre if knobs.normalize_distance else None)  # Eq. 4
    reward = np.where(active, reward - penalty, 0.0)  # apply_invalid_action_penalty on step_rewards
    divide_std = knobs.normalize == "mean_std"
    a_graph = graph_advantages(reward, g.pre, active, divide_std=divide_std, eps=knobs.eps, ddof=knobs.ddof)
    returns = batch_returns(batch, knobs.reward_source)
    a_episode = episode_advantages(batch, returns, penalty, stats=knobs.episode_stats, divide_std=divide_std,
                                   eps=knobs.eps, ddof=knobs.ddof)
    advantage = knobs.beta_episode * a_episode + knobs.beta_graph * a_graph

    progress = active & (dist_post < dist_pre)
    won_step = batch.success[batch.step_traj]
    n_groups = max(len(batch.group_names), 1)
    metrics = {
        "credit/groups": len(batch.group_names),
        "credit/success_group_frac": float(g.has_goal.mean()) if len(batch.group_names) else 0.0,
        "credit/graph_nodes": g.n_nodes / n_groups,
        "credit/reach_success_frac": float(g.reached[g.pre].mean()) if batch.n_steps else 0.0,
        # the paper's motivating statistic (Fig. 1): progress steps in failed / successful rollouts
        "credit/progress_in_failed_frac": float(progress[~won_step].mean()) if (~won_step).any() else 0.0,
        "credit/no_progress_in_success_frac": float((~progress[won_step]).mean()) if won_step.any() else 0.0,
        "credit/return_mean": float(returns.mean()) if returns.size else 0.0,
        "credit/time_ms": (time.perf_counter() - t0) * 1000.0,
    }
    return Credit(advantage=advantage, step_reward=reward, process_reward=np.where(active, dist_pre, -1.0),
                  metrics=metrics)
