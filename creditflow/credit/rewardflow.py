"""RewardFlow (Feng et al. 2026, paper 003): state-graph reward propagation and synergistic advantages.

Per task group (all rollouts of one task):

1. Graph (§3.2, Eq. 2): nodes are canonical states f(s) (``states.py``), edges the kept transitions
   (``graph.bridge_transitions``: invalid / no-op / self-loop steps add no edge, App. B.2).
2. Propagation (Eq. 3): R(s) = gamma ** d(s), d the hop distance to the nearest success terminal by
   multi-source reverse BFS (``distance="min"``) or the App. D.4 mean distance (``distance="mean"``).
3. Action reward (Eq. 4): r~_t = R(s_{t+1}) - R(s_t) for every step, the last one included. A pruned
   step (invalid action or no-op) leaves the state where it was, so its potential difference is 0; its
   r~_t is its env reward, which already holds the invalid-action penalty: the penalty counts once, on
   that step, and the next valid step is credited from the state the agent was really in (the bridge),
   not from a spurious "Nothing happens" node.
4. Advantages: Eq. 5-7 state-wise: the (a, r~) pairs taken in the same (bridged) state form a group,
   A_action = (r~ - mu(s)) / (sigma(s) + eps) with sigma the sample std (``normalize="mean"``: no
   division); singletons give 0. Eq. 8: A_traj = (r - mean) / (std + eps) over the group's rollouts,
   r the success indicator by default (``reward_source``). Eq. 9: A = alpha_action * A_action +
   alpha_traj * A_traj, broadcast by the trainer to every response token of the step (Eq. 11).

The math lives in small NumPy functions (``action_rewards``, ``state_advantages``,
``trajectory_advantages``, ``combine_advantages``, plus ``graph.py``); :func:`build_flow` wires them to
trajectories and :func:`rewardflow` is the registered estimator. Its knobs are :class:`RewardFlowKnobs`,
which extends the graph knobs :class:`GraphKnobs` (also those of ``creditflow graph``).
"""

from __future__ import annotations

import itertools
import time
from dataclasses import dataclass, field
from typing import Any, ClassVar, Hashable, Literal, Optional, Sequence

import numpy as np
from pydantic import Field, model_validator

from creditflow.credit.batch import StepBatch, batch_from_trajectories
from creditflow.credit.graph import (
    GraphNodes,
    bellman_max,
    bridge_transitions,
    propagate,
    reverse_bfs,
    reverse_bfs_mean,
    unique_edges,
)
from creditflow.credit.groupnorm import grouped_normalize
from creditflow.credit.registry import Credit, Drawing, Knobs, register_estimator
from creditflow.credit.returns import batch_returns
from creditflow.credit.states import Embedder, StateFn, intern_nodes, step_states
from creditflow.rollout.trajectory import SuccessRule, Trajectory

Distance = Literal["min", "mean"]
NodeInit = Literal["success", "env_reward"]
RFNormalize = Literal["std", "mean"]
RFRewardSource = Literal["success", "score", "return"]
TrajStats = Literal["rollouts", "steps"]
Preset = Literal["paper", "official"]

# Defaults = the paper's values (Tab. 8 for RewardFlow on ALFWorld/WebShop/Sokoban/DeepResearch).
DEFAULT_GAMMA = 0.9  # Tab. 8 "decay weight gamma" 0.90
DEFAULT_MAX_HOPS = 1000  # Tab. 8 "max graph propagation iteration" 1000
DEFAULT_SIMILARITY = 0.9  # App. B.1: merge states whose cosine similarity exceeds 0.9
NOOP_FEEDBACK = "Nothing happens"  # App. B.2: ALFWorld's feedback to an action that changes nothing
# preset=official: the four places where the official trainer differs from the paper (docs/methods.md)
OFFICIAL = {"node_init": "env_reward", "normalize": "mean", "reward_source": "return", "traj_stats": "steps"}


# --------------------------------------------------------------------------------------------------
# Eq. 4-9 as NumPy functions
# --------------------------------------------------------------------------------------------------


def action_rewards(node_reward, anchor, post, kept, env_reward=None) -> np.ndarray:
    """Eq. 4: r~ = R(s_{t+1}) - R(s_t) along kept transitions (``anchor`` is the bridged s_t).

    Pruned steps (``kept`` False) get their ``env_reward`` (the invalid/no-op penalty), or 0 if None.
    """
    value = np.asarray(node_reward, dtype=np.float64)
    anchor = np.asarray(anchor, dtype=np.int64)
    post = np.asarray(post, dtype=np.int64)
    kept = np.asarray(kept, dtype=bool)
    shaped = value[post] - value[anchor]
    pruned = np.zeros(shaped.shape) if env_reward is None else np.asarray(env_reward, dtype=np.float64)
    return np.where(kept, shaped, pruned)


def state_advantages(step_rewards, state_ids, normalize: str = "std", eps: float = 1e-6,
                     ddof: int = 1) -> np.ndarray:
    """Eq. 5-7: A_action = (r~ - mu(s)) / sigma(s) within each state group (sigma = sample std + eps)."""
    return grouped_normalize(step_rewards, state_ids, divide_std=normalize == "std", eps=eps, ddof=ddof)


def trajectory_advantages(returns, group_ids, normalize: str = "std", eps: float = 1e-6,
                          ddof: int = 1) -> np.ndarray:
    """Eq. 8: A_traj = (r - mean) / (std + eps) over the rollouts of each task group."""
    return grouped_normalize(returns, group_ids, divide_std=normalize == "std", eps=eps, ddof=ddof)


def step_trajectory_advantages(returns, traj_group, step_traj, traj_stats: str = "rollouts", **norm) -> np.ndarray:
    """Eq. 8 per step: statistics over the group's rollouts (``traj_stats="rollouts"``, the paper) or over
    all its steps, each rollout counted once per step (``"steps"``, the official trainer: long rollouts
    weigh more)."""
    returns, traj_group, step_traj = (np.asarray(a) for a in (returns, traj_group, step_traj))
    if traj_stats == "steps":
        return trajectory_advantages(returns[step_traj], traj_group[step_traj], **norm)
    return trajectory_advantages(returns, traj_group, **norm)[step_traj]


def entering_rewards(n_nodes: int, anchor, post, kept, reward, step_start) -> np.ndarray:
    """Start values of the official propagation: every node gets the env reward of the step that entered it,
    at its first appearance in a kept transition (batch order); a trajectory's first state was entered with
    0. (10 * won on ALFWorld/WebShop, Sokoban's shaped reward; nodes in no kept transition: 0.)"""
    anchor, post, reward, step_start = (np.asarray(a) for a in (anchor, post, reward, step_start))
    rows = np.flatnonzero(np.asarray(kept, dtype=bool))
    entered_with = np.where(rows > step_start[rows], reward[rows - 1], 0.0)  # the step before entered s_t
    nodes = np.column_stack((anchor[rows], post[rows])).ravel()  # s_t, s_{t+1}, s_t', ... in batch order
    values = np.column_stack((entered_with, reward[rows])).ravel()
    init = np.zeros(n_nodes, dtype=np.float64)
    first_nodes, first = np.unique(nodes.astype(np.int64), return_index=True)
    init[first_nodes] = values[first]
    return init


def combine_advantages(a_action, a_traj, alpha_action: float = 1.0, alpha_traj: float = 1.0) -> np.ndarray:
    """Eq. 9: A = alpha_action * A_action + alpha_traj * A_traj."""
    return alpha_action * np.asarray(a_action, dtype=np.float64) + alpha_traj * np.asarray(a_traj, np.float64)


def is_success(traj: Trajectory, success_threshold: float | None = None) -> bool:
    """Success terminal (Eq. 3 sources): the run's :class:`SuccessRule` (``success``, or ``score >=
    success_threshold`` for graded data scored outside a run)."""
    return SuccessRule(success_threshold).of(traj)


def batch_success(batch: StepBatch, success_threshold: float | None = None) -> np.ndarray:
    """(T,) :func:`is_success` of every trajectory of ``batch``."""
    if success_threshold is None:
        return batch.success.copy()
    return batch.success | (batch.score >= success_threshold)


# --------------------------------------------------------------------------------------------------
# trajectories -> graph -> rewards
# --------------------------------------------------------------------------------------------------


@dataclass
class Flow:
    """Everything RewardFlow computes for a batch (all groups at once, disjoint graphs)."""

    batch: StepBatch  # the rows (one per step, trajectory after trajectory)
    group_ids: list[str]  # distinct group ids, in order of first appearance
    traj_group: np.ndarray  # (n_traj,) group index of each trajectory
    traj_success: np.ndarray  # (n_traj,) bool
    step_traj: np.ndarray  # (S,) trajectory index of each step
    n_nodes: int
    node_group: np.ndarray  # (N,) group index of each node (node ids are contiguous per group)
    node_keys: list[Hashable]  # canonical key of each node
    pre: np.ndarray  # (S,) node of s_t as recorded
    post: np.ndarray  # (S,) node of s_{t+1}
    anchor: np.ndarray  # (S,) node the step is credited from (s_t, bridged over pruned steps)
    kept: np.ndarray  # (S,) bool: the step adds the edge anchor -> post
    edge_src: np.ndarray
    edge_dst: np.ndarray
    start_nodes: np.ndarray
    success_nodes: np.ndarray
    in_graph: np.ndarray  # (N,) bool: node is a graph node (start, edge end, success terminal)
    dist: np.ndarray  # (N,) hop distance to success (min: int, -1 unreachable; mean: float, NaN)
    node_reward: np.ndarray  # (N,) R(s), Eq. 3 (node_init=env_reward: the official Bellman-max values)
    step_reward: np.ndarray  # (S,) r~_t, Eq. 4
    display: dict = field(default_factory=dict)

    @property
    def process_reward(self) -> np.ndarray:
        """R(s_t) per step (of the state the step is credited from)."""
        return self.node_reward[self.anchor]


def build_flow(data: StepBatch | Sequence[Trajectory], knobs: GraphKnobs | None = None,
               embedder: Embedder | None = None) -> Flow:
    """Build the state graphs of all groups in a batch (or in trajectories) and propagate rewards (Eq. 2-4), with
    the graph ``knobs`` (:class:`GraphKnobs`, or ``rewardflow``'s, which hold them; default: the defaults).

    ``node_init="success"``: R(s) = gamma ** d(s) (Eq. 3, ``distance`` min or mean). ``"env_reward"``: the
    official trainer's values, Bellman-max sweeps (``max_hops`` of them) from :func:`entering_rewards`.
    """
    k = knobs if knobs is not None else GraphKnobs()
    gamma, distance, state_fn, similarity = k.gamma, k.distance, k.state_fn, k.similarity
    success_threshold, prune, noop_feedback, max_hops, node_init = (k.success_threshold, k.prune, k.noop_feedback,
                                                                    k.max_hops, k.node_init)
    batch = data if isinstance(data, StepBatch) else batch_from_trajectories(data)
    traj_group = batch.traj_group
    won = batch_success(batch, success_threshold)
    st = step_states(batch, state_fn, similarity=similarity, success=won.tolist(), embedder=embedder)
    n_steps = batch.n_steps
    lengths = batch.lengths
    step_traj = batch.step_traj
    traj_first = batch.traj_first
    step_start = traj_first[step_traj]

    # intern canonical keys per group (node ids contiguous per group)
    step_group = traj_group[step_traj]
    inverse, node_group, node_keys = intern_nodes((*st.pre, *st.post), np.concatenate((step_group, step_group)))
    n_nodes = len(node_keys)
    pre, post = inverse[:n_steps], inverse[n_steps:]

    # §3.2 / App. B.2: noisy transitions
    noisy = ~batch.valid
    if noop_feedback:
        noisy |= np.fromiter(map(str.__contains__, st.after, itertools.repeat(noop_feedback)), dtype=bool,
                             count=n_steps)
    anchor, kept = bridge_transitions(pre, post, step_start, noisy, prune=prune)
    edge_src, edge_dst = unique_edges(anchor, post, kept)

    has_steps = lengths > 0
    last_step = (traj_first + lengths - 1)[has_steps]
    start_nodes = np.unique(pre[traj_first[has_steps]])
    success_nodes = np.unique(post[last_step[won[has_steps]]])
    in_graph = np.zeros(n_nodes, dtype=bool)
    for part in (start_nodes, success_nodes, anchor, edge_src, edge_dst):
        in_graph[part] = True

    # Eq. 3 (min) / App. D.4 (mean)
    if distance == "min":
        dist = reverse_bfs(n_nodes, edge_src, edge_dst, success_nodes, max_hops=max_hops)
    else:
        dist = reverse_bfs_mean(n_nodes, edge_src, edge_dst, success_nodes, node_group, max_hops=max_hops)
    if node_init == "env_reward":  # the official trainer: sweeps from the entering env rewards
        init = entering_rewards(n_nodes, anchor, post, kept, batch.reward, step_start)
        node_reward = bellman_max(init, edge_src, edge_dst, gamma, max_hops)
    else:
        node_reward = propagate(dist, gamma)

    # Eq. 4, pruned steps credited with their own env reward (the penalty, once)
    env_reward = batch.reward if prune else None
    step_reward = action_rewards(node_reward, anchor, post, kept, env_reward)

    return Flow(
        batch=batch, group_ids=batch.group_names, traj_group=traj_group, traj_success=won,
        step_traj=step_traj, n_nodes=n_nodes,
        node_group=node_group, node_keys=node_keys, pre=pre, post=post, anchor=anchor, kept=kept,
        edge_src=edge_src, edge_dst=edge_dst, start_nodes=start_nodes, success_nodes=success_nodes,
        in_graph=in_graph, dist=dist, node_reward=node_reward, step_reward=step_reward, display=st.display,
    )


def flow_metrics(flow: Flow) -> dict:
    """Graph statistics, averaged over groups (``credit/pruned_frac`` and ``credit/singleton_state_frac``
    are fractions of all steps in the batch)."""
    n_groups = max(len(flow.group_ids), 1)
    gcount = lambda idx: np.bincount(idx, minlength=n_groups).astype(np.float64)  # noqa: E731
    nodes = gcount(flow.node_group[flow.in_graph])
    reach = gcount(flow.node_group[flow.in_graph & (flow.dist >= 0)])  # NaN (mean, unreachable) is False
    edges = gcount(flow.node_group[flow.edge_src])
    lengths = flow.batch.lengths.astype(np.float64)
    visits = np.bincount(flow.traj_group, weights=np.where(lengths > 0, lengths + 1, 0), minlength=n_groups)
    with np.errstate(invalid="ignore", divide="ignore"):
        ratio = np.where(visits > 0, nodes / visits, 0.0)
        reach_frac = np.where(nodes > 0, reach / nodes, 0.0)
    n_steps = max(flow.batch.n_steps, 1)
    success_groups = np.zeros(n_groups, dtype=bool)
    success_groups[flow.node_group[flow.success_nodes]] = True
    return {
        "credit/groups": len(flow.group_ids),
        "credit/graph_nodes": float(nodes.mean()) if len(flow.group_ids) else 0.0,
        "credit/graph_edges": float(edges.mean()) if len(flow.group_ids) else 0.0,
        "credit/unique_state_ratio": float(ratio.mean()) if len(flow.group_ids) else 0.0,
        "credit/reach_success_frac": float(reach_frac.mean()) if len(flow.group_ids) else 0.0,
        "credit/success_group_frac": float(success_groups.mean()) if len(flow.group_ids) else 0.0,
        "credit/pruned_frac": float((~flow.kept).sum() / n_steps),
    }


# --------------------------------------------------------------------------------------------------
# the estimator
# --------------------------------------------------------------------------------------------------


class GraphKnobs(Knobs):
    """Knobs of the state graph and its rewards (Eq. 2-4): :func:`build_flow`, ``creditflow graph``."""

    gamma: float = Field(DEFAULT_GAMMA, gt=0, le=1)
    """Decay gamma of Eq. 3, R(s) = gamma ** d(s), in (0, 1]; Tab. 8: 0.90."""
    distance: Distance = "min"
    """Hop distance d(s) to success: min (Eq. 3, nearest success) or mean (App. D.4)."""
    state_fn: StateFn = "state_key"
    """State normaliser f(s) of Sec. 3.2: state_key, observation, enriched or embedding (App. B.1)."""
    similarity: float = Field(DEFAULT_SIMILARITY, ge=-1, le=1)
    """Cosine similarity that merges states into one super-node for state_fn=embedding; App. B.1: 0.9."""
    success_threshold: Optional[float] = None
    """Success terminal = won, or score >= this when set (graded envs); none: won only."""
    prune: bool = True
    """Noisy-transition pruning: invalid, no-op and self-loop steps add no edge (Sec. 3.2, App. B.2; Tab. 5)."""
    noop_feedback: str = NOOP_FEEDBACK
    """Observation text that marks a no-op action (App. B.2, ALFWorld); '' disables."""
    max_hops: int = Field(DEFAULT_MAX_HOPS, ge=0)
    """Nodes farther than this from success count as unreachable; Tab. 8 max propagation iteration: 1000."""
    node_init: NodeInit = "success"
    """R(s) before propagation: success (Eq. 3: 1 on success terminals, 0 elsewhere, R = gamma ** d) or
    env_reward (official trainer: the env reward of the step that entered s, then max_hops Bellman-max sweeps)."""

    @model_validator(mode="after")
    def _distance_needs_success_init(self):
        if self.resolved().node_init == "env_reward" and self.distance != "min":
            raise ValueError("distance=mean needs node_init=success (App. D.4 averages hops to success terminals)")
        return self


class RewardFlowKnobs(GraphKnobs):
    """Knobs of ``rewardflow``: the graph knobs plus the advantages (Eq. 5-9)."""

    source: ClassVar[str] = 'RewardFlow paper Eq. 2-11; preset=official as its official trainer'

    alpha_action: float = Field(1.0, ge=0)
    """Weight alpha_action of the state-wise advantage in Eq. 9; Tab. 8: 1.0."""
    alpha_traj: float = Field(1.0, ge=0)
    """Weight alpha_traj of the trajectory advantage in Eq. 9; Tab. 8: 1.0."""
    normalize: RFNormalize = "std"
    """std: divide by the std + eps (Eq. 6, 8); mean: subtract the mean only (official mean_norm)."""
    eps: float = Field(1e-6, gt=0)
    """eps added to the std in Eq. 6 and 8; official code: 1e-6."""
    ddof: int = Field(1, ge=0, le=1)
    """Std of Eq. 6 and 8: 1 = sample std (Eq. 6 "sample standard deviation"; torch.std, verl), 0 = population."""
    reward_source: RFRewardSource = "success"
    """r of Eq. 8: success (paper, r in {0, 1}), score, or return (summed env reward; the official trainer)."""
    traj_stats: TrajStats = "rollouts"
    """Eq. 8 statistics over the group's rollouts (paper) or over all its steps (official: long rollouts weigh more)."""
    preset: Preset = "paper"
    """paper: the knobs above as set. official: as the official trainer ran, i.e. node_init=env_reward,
    normalize=mean, reward_source=return, traj_stats=steps unless given (docs/methods.md, App. C.4)."""

    presets: ClassVar[dict[str, dict[str, Any]]] = {"official": OFFICIAL}


def graph_nodes(group: list[Trajectory], knobs: GraphKnobs | None) -> GraphNodes:
    """RewardFlow's graph of one group, to draw: kept transitions are edges; node value R(s) = gamma ** d."""
    flow = build_flow(group, knobs or GraphKnobs())
    return GraphNodes(flow.anchor, flow.post, flow.kept, flow.node_keys, flow.display, flow.node_reward,
                      flow.dist.astype(np.float64), flow.success_nodes, flow.start_nodes, flow.in_graph,
                      int(flow.traj_success.sum()))


@register_estimator("rewardflow", knobs=RewardFlowKnobs, needs={"state", "success"},
                    draws=Drawing("RewardFlow", "R(s) = gamma^d, kept transitions", GraphKnobs, graph_nodes))
def rewardflow(batch: StepBatch, knobs: RewardFlowKnobs) -> Credit:
    """RewardFlow (paper 003, Eq. 2-9): ``process_reward`` R(s_t), ``step_reward`` r~_t and ``advantage``
    per row. Returns graph metrics (means over groups) and ``credit/time_ms`` (wall time of this call for
    the whole batch)."""
    t0 = time.perf_counter()
    knobs = knobs.resolved()
    flow = build_flow(batch, knobs)
    norm = {"normalize": knobs.normalize, "eps": knobs.eps, "ddof": knobs.ddof}
    # Eq. 5-7: state-wise groups keyed by the node the step is credited from (graph nodes are per group)
    a_action = state_advantages(flow.step_reward, flow.anchor, **norm)
    # Eq. 8: r = success indicator (paper), or the score / summed env reward
    if knobs.reward_source == "success":
        returns = flow.traj_success.astype(np.float64)
    else:
        returns = batch_returns(batch, knobs.reward_source)
    a_traj = step_trajectory_advantages(returns, flow.traj_group, flow.step_traj, knobs.traj_stats, **norm)
    advantage = combine_advantages(a_action, a_traj, knobs.alpha_action, knobs.alpha_traj)  # Eq. 9

    metrics = flow_metrics(flow)
    counts = np.bincount(flow.anchor, minlength=flow.n_nodes)
    metrics["credit/singleton_state_frac"] = float((counts[flow.anchor] == 1).mean()) if batch.n_steps else 0.0
    metrics["credit/return_mean"] = float(returns.mean()) if returns.size else 0.0
    metrics["credit/time_ms"] = (time.perf_counter() - t0) * 1000.0
    return Credit(advantage=advantage, step_reward=flow.step_reward, process_reward=flow.process_reward,
                  metrics=metrics)
