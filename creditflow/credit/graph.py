"""State graphs over one task group's rollouts, and reward propagation on them (RewardFlow §3.2, §4.1).

Pure NumPy on integer node ids (the string -> id interning and the state normalisers f live in
``states.py`` / ``rewardflow.py``). Many groups are handled at once as one disjoint graph: node ids of
different groups never share an edge, so a single multi-source BFS serves the whole batch.

- :class:`GraphNodes` - one group's graph as ``creditflow graph`` draws it (what a graph estimator's
  ``Drawing.nodes`` returns).
- :func:`bridge_transitions` - noisy-transition pruning (§3.2, App. B.2): invalid actions, no-op
  feedback ("Nothing happens") and self-loops add no edge; the next kept transition starts from the
  last state reached by a kept transition (the "bridge").
- :func:`unique_edges` - the edge set T of Eq. 2 (directed, de-duplicated ``(src, dst)`` pairs).
- :func:`reverse_bfs` - multi-source reverse BFS from the success terminals: d(s) of Eq. 3 (``min``).
- :func:`reverse_bfs_mean` - App. D.4 variant: mean hop distance over the success terminals reachable
  from s.
- :func:`propagate` - Eq. 3: R(s) = gamma ** d(s), 0 where no success is reachable.
- :func:`bellman_max` - the official propagation: synchronous Bellman-max sweeps
  V(u) <- max(V(u), gamma * max_{u->v} V(v)) from any start values. The official trainer starts each
  node from the env reward of the step that entered it (``node_init="env_reward"``, the ``official``
  preset), not from 1/0.
- :func:`value_iteration` - the same sweeps started from 1 on the success terminals and 0 elsewhere (the
  paper's Eq. 3 reading), used to check that BFS gives the same values.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

_EMPTY = np.zeros(0, dtype=np.int64)


@dataclass
class GraphNodes:
    """What a drawing needs from an estimator's graph of one group (``registry.Drawing``, ``draw.py``): per step,
    the node it is drawn from and to and whether it adds an edge; per node, its key, value and distance; the
    success and start nodes."""

    src: np.ndarray
    dst: np.ndarray
    kept: np.ndarray
    keys: list
    display: dict
    value: np.ndarray
    dist: np.ndarray
    success_nodes: np.ndarray
    start_nodes: np.ndarray
    in_graph: np.ndarray
    successes: int  # successful rollouts (the success rule, with success_threshold where set)


# --------------------------------------------------------------------------------------------------
# pruning + bridging (§3.2, App. B.2)
# --------------------------------------------------------------------------------------------------


def bridge_transitions(pre, post, step_start, noisy, prune: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """Return ``(anchor, kept)`` for the steps of many trajectories laid end to end.

    ``pre[i]``/``post[i]`` are the node ids before/after step i, ``step_start[i]`` the index of the
    first step of i's trajectory, ``noisy[i]`` True for steps flagged invalid or with no-op feedback.

    A step is *kept* (adds the edge ``anchor[i] -> post[i]``) unless it is noisy, leaves the state
    unchanged (``post == pre``) or comes back to the state it is bridged from (``post == anchor``).
    ``anchor[i]`` is ``pre[i]`` after a kept step (or at the start of a trajectory); after a run of
    pruned steps it is the state where that run began: the next valid transition is bridged from the
    last valid state, as App. B.2 prescribes for "Nothing happens" states.
    With ``prune=False`` every step is kept as recorded (the "w/o noisy transition pruning" ablation of
    Tab. 5); self-loops are harmless to the BFS.
    """
    pre = np.asarray(pre, dtype=np.int64)
    post = np.asarray(post, dtype=np.int64)
    n = pre.size
    if not prune:
        return pre.copy(), np.ones(n, dtype=bool)
    step_start = np.asarray(step_start, dtype=np.int64)
    noisy = np.asarray(noisy, dtype=bool)
    kept = ~noisy & (post != pre)
    anchor = _anchors(pre, kept, step_start)
    bad = kept & (post == anchor)  # a self-loop relative to the bridged state (only inside pruned runs)
    if bad.any():
        kept = kept.copy()
        for start in np.unique(step_start[bad]):
            _bridge_sequential(pre, post, noisy, kept, anchor, int(start), step_start)
    return anchor, kept


def _anchors(pre: np.ndarray, kept: np.ndarray, step_start: np.ndarray) -> np.ndarray:
    """anchor[i] = pre[k], k = 1 + (last kept step before i in the same trajectory), else its start."""
    n = pre.size
    if n == 0:
        return pre.copy()
    last_kept = np.maximum.accumulate(np.where(kept, np.arange(n), -1))
    prev = np.empty(n, dtype=np.int64)
    prev[0] = -1
    prev[1:] = last_kept[:-1]
    k = np.maximum(prev + 1, step_start)
    return pre[k]


def _bridge_sequential(pre, post, noisy, kept, anchor, start: int, step_start) -> None:
    """Exact left-to-right pass over one trajectory (used only where the vectorised pass is unsure)."""
    i = start
    n = pre.size
    prev_kept = True
    while i < n and step_start[i] == start:
        a = pre[i] if prev_kept else anchor[i - 1]
        anchor[i] = a
        k = (not noisy[i]) and post[i] != pre[i] and post[i] != a
        kept[i] = k
        prev_kept = k
        i += 1


def unique_edges(anchor, post, kept) -> tuple[np.ndarray, np.ndarray]:
    """Eq. 2: the set T of observed kept transitions as de-duplicated ``(src, dst)`` node pairs."""
    src = np.asarray(anchor, dtype=np.int64)[kept]
    dst = np.asarray(post, dtype=np.int64)[kept]
    if src.size == 0:
        return _EMPTY, _EMPTY
    hi = int(max(src.max(), dst.max())) + 1
    pairs = np.unique(src * hi + dst)
    return pairs // hi, pairs % hi


# --------------------------------------------------------------------------------------------------
# propagation (Eq. 3, App. D.4)
# --------------------------------------------------------------------------------------------------


def reverse_csr(n_nodes: int, src, dst) -> tuple[np.ndarray, np.ndarray]:
    """CSR of the reversed graph: ``indices[indptr[v]:indptr[v+1]]`` are the u with an edge u -> v."""
    src = np.asarray(src, dtype=np.int64)
    dst = np.asarray(dst, dtype=np.int64)
    order = np.argsort(dst, kind="stable")
    indptr = np.zeros(n_nodes + 1, dtype=np.int64)
    np.cumsum(np.bincount(dst, minlength=n_nodes), out=indptr[1:])
    return indptr, src[order]


def _expand(indptr: np.ndarray, indices: np.ndarray, frontier: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """All reverse neighbours of ``frontier`` nodes, and the frontier position each one came from."""
    starts = indptr[frontier]
    counts = indptr[frontier + 1] - starts
    total = int(counts.sum())
    if total == 0:
        return _EMPTY, _EMPTY
    owner = np.repeat(np.arange(frontier.size), counts)
    pos = (starts - (np.cumsum(counts) - counts))[owner] + np.arange(total)
    return indices[pos], owner


def reverse_bfs(n_nodes: int, src, dst, sources, max_hops: int | None = None) -> np.ndarray:
    """Eq. 3: hop distance from every node to its nearest source along edges (-1: unreachable).

    Multi-source BFS on the reversed graph, one vectorised frontier per level. ``max_hops`` caps the
    search (nodes farther away count as unreachable), mirroring a propagation run for that many sweeps.
    """
    dist = np.full(n_nodes, -1, dtype=np.int64)
    frontier = np.unique(np.asarray(sources, dtype=np.int64))
    if frontier.size == 0:
        return dist
    dist[frontier] = 0
    indptr, indices = reverse_csr(n_nodes, src, dst)
    d = 0
    while frontier.size and (max_hops is None or d < max_hops):
        nb, _ = _expand(indptr, indices, frontier)
        nb = nb[dist[nb] < 0]
        if nb.size == 0:
            break
        frontier = np.unique(nb)
        d += 1
        dist[frontier] = d
    return dist


def reverse_bfs_mean(n_nodes: int, src, dst, sources, node_group=None,
                     max_hops: int | None = None) -> np.ndarray:
    """App. D.4: mean hop distance from each node to the success sources it can reach (NaN: none).

    The paper writes d(s) = 1/|S_succ| * sum over s* of dist(s -> s*); a source that s cannot reach
    would make every such mean infinite, so the mean runs over the *reachable* sources (the "routes" the
    appendix discusses). Sources keep d = 0 (Eq. 3 convention). One multi-label BFS runs all sources at
    once over (source, node) pairs; ``node_group`` (one id per node) restricts each source's pairs to
    its own group so the work stays linear in the batch.
    """
    sources = np.unique(np.asarray(sources, dtype=np.int64))
    mean = np.full(n_nodes, np.nan)
    if sources.size == 0:
        return mean
    group = np.zeros(n_nodes, dtype=np.int64) if node_group is None else np.asarray(node_group, np.int64)
    sizes = np.bincount(group)
    gstart = np.concatenate(([0], np.cumsum(sizes)[:-1]))
    order = np.argsort(group, kind="stable")
    local = np.empty(n_nodes, dtype=np.int64)
    local[order] = np.arange(n_nodes) - gstart[group[order]]
    sg = group[sources]
    base = np.concatenate(([0], np.cumsum(sizes[sg])[:-1]))
    seen = np.zeros(int(sizes[sg].sum()), dtype=bool)
    indptr, indices = reverse_csr(n_nodes, src, dst)
    fk = np.arange(sources.size)
    fnode = sources
    seen[base[fk] + local[fnode]] = True
    reached_nodes = [fnode]
    reached_dist = [np.zeros(fnode.size)]
    d = 0
    while fk.size and (max_hops is None or d < max_hops):
        nb, owner = _expand(indptr, indices, fnode)
        if nb.size == 0:
            break
        nk = fk[owner]
        pair = base[nk] + local[nb]
        fresh = ~seen[pair]
        pair, nk, nb = pair[fresh], nk[fresh], nb[fresh]
        if pair.size == 0:
            break
        pair, first = np.unique(pair, return_index=True)
        fk, fnode = nk[first], nb[first]
        seen[pair] = True
        d += 1
        reached_nodes.append(fnode)
        reached_dist.append(np.full(fnode.size, float(d)))
    nodes = np.concatenate(reached_nodes)
    total = np.bincount(nodes, weights=np.concatenate(reached_dist), minlength=n_nodes)
    count = np.bincount(nodes, minlength=n_nodes)
    hit = count > 0
    mean[hit] = total[hit] / count[hit]
    mean[sources] = 0.0  # d(s*) = 0 for success states (Eq. 3)
    return mean


def propagate(dist, gamma: float) -> np.ndarray:
    """Eq. 3: R(s) = gamma ** d(s); unreachable (d < 0 or NaN) gives 0."""
    d = np.asarray(dist, dtype=np.float64)
    ok = d >= 0  # False for -1 and NaN
    out = np.zeros(d.shape, dtype=np.float64)
    out[ok] = np.power(float(gamma), d[ok])
    return out


def bellman_max(init, src, dst, gamma: float, sweeps: int = 1000) -> np.ndarray:
    """Synchronous Bellman-max sweeps from ``V = init``: ``sweeps`` times (the official ``max_iter``),
    V(u) <- max(V(u), gamma * max_{u->v} V(v)), every node updated from the previous sweep's values.

    Exactly the official loop, computed sparsely: a node can only change when one of its successors
    changed in the previous sweep, so each sweep touches only the predecessors of the nodes that moved
    (a fixed point ends the loop early). Start values may be negative (an entering step cost): such a node
    keeps its value unless a successor offers more, as in the official code.
    """
    value = np.asarray(init, dtype=np.float64).copy()
    n_nodes = value.size
    indptr, indices = reverse_csr(n_nodes, src, dst)
    forward_ptr, forward = reverse_csr(n_nodes, dst, src)  # successors of u: forward[forward_ptr[u]:...]
    changed = np.unique(np.asarray(dst, dtype=np.int64))  # sweep 1: any node with a successor may move
    for _ in range(sweeps):
        if changed.size == 0:
            break
        preds, _ = _expand(indptr, indices, changed)
        todo = np.unique(preds)
        if todo.size == 0:
            break
        succ, owner = _expand(forward_ptr, forward, todo)
        best = np.full(todo.size, -np.inf)
        np.maximum.at(best, owner, gamma * value[succ])
        new = np.maximum(value[todo], best)
        moved = new != value[todo]
        value[todo[moved]] = new[moved]
        changed = todo[moved]
    return value


def value_iteration(n_nodes: int, src, dst, sources, gamma: float, sweeps: int = 1000) -> np.ndarray:
    """Bellman-max sweeps (:func:`bellman_max`) from V0 = 1 on ``sources`` and 0 elsewhere: equal to the
    BFS propagation of Eq. 3 (App. C.4). The official trainer starts nodes from env rewards instead."""
    init = np.zeros(n_nodes, dtype=np.float64)
    init[np.asarray(sources, dtype=np.int64)] = 1.0
    return bellman_max(init, src, dst, gamma, sweeps)
