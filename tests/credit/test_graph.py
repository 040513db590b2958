"""State-graph primitives on hand-built graphs with known distances (RewardFlow Eq. 2-3, App. B.2, D.4)."""

import numpy as np
import pytest

from creditflow.credit.graph import (
    bridge_transitions,
    propagate,
    reverse_bfs,
    reverse_bfs_mean,
    unique_edges,
    value_iteration,
)

A, B, C, D, E, S, S2 = range(7)


def edges(*pairs):
    return np.array([p[0] for p in pairs]), np.array([p[1] for p in pairs])


def test_cycle_and_chain_distances():
    # A <-> B (cycle), B -> C -> S, D -> E dead end
    src, dst = edges((A, B), (B, A), (B, C), (C, S), (D, E))
    dist = reverse_bfs(7, src, dst, [S])
    assert dist.tolist() == [3, 2, 1, -1, -1, 0, -1]
    r = propagate(dist, 0.9)
    assert r == pytest.approx([0.9**3, 0.9**2, 0.9, 0, 0, 1, 0])


def test_several_success_nodes_take_the_nearest():
    # A -> S (1 hop); A -> B -> C -> S2; B -> S2? no: C -> S2 only
    src, dst = edges((A, S), (A, B), (B, C), (C, S2))
    dist = reverse_bfs(7, src, dst, [S, S2])
    assert dist[[A, B, C, S, S2]].tolist() == [1, 2, 1, 0, 0]
    assert dist[[D, E]].tolist() == [-1, -1]  # isolated: unreachable => R = 0
    assert propagate(dist, 0.5)[[D, E]].tolist() == [0.0, 0.0]


def test_no_success_means_all_zero():
    src, dst = edges((A, B), (B, C))
    dist = reverse_bfs(7, src, dst, [])
    assert (dist == -1).all() and (propagate(dist, 0.9) == 0).all()


def test_max_hops_truncates_like_that_many_sweeps():
    src, dst = edges((A, B), (B, C), (C, S))
    assert reverse_bfs(7, src, dst, [S], max_hops=2)[[A, B, C]].tolist() == [-1, 2, 1]
    vi = value_iteration(7, src, dst, [S], 0.9, sweeps=2)
    assert propagate(reverse_bfs(7, src, dst, [S], max_hops=2), 0.9) == pytest.approx(vi)


@pytest.mark.parametrize("seed", range(12))
def test_bfs_equals_value_iteration_on_random_graphs(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(5, 60))
    m = int(rng.integers(0, 3 * n))
    src, dst = rng.integers(0, n, m), rng.integers(0, n, m)
    sources = rng.choice(n, size=int(rng.integers(1, 4)), replace=False)
    gamma = float(rng.uniform(0.5, 1.0))
    bfs = propagate(reverse_bfs(n, src, dst, sources), gamma)
    vi = value_iteration(n, src, dst, sources, gamma, sweeps=n + 1)
    assert bfs == pytest.approx(vi, abs=1e-12)


def test_mean_distance_over_reachable_success_nodes():
    # A -> S (1), A -> B -> S2 (2): mean 1.5; B reaches only S2 (1); C reaches nothing
    src, dst = edges((A, S), (A, B), (B, S2), (C, D))
    mean = reverse_bfs_mean(7, src, dst, [S, S2])
    assert mean[A] == pytest.approx(1.5) and mean[B] == pytest.approx(1.0)
    assert mean[S] == 0 and mean[S2] == 0
    assert np.isnan(mean[C]) and np.isnan(mean[D])
    r = propagate(mean, 0.9)
    assert r[A] == pytest.approx(0.9**1.5) and r[C] == 0
    # min distance for comparison
    assert reverse_bfs(7, src, dst, [S, S2])[A] == 1


def test_mean_distance_respects_groups():
    # two disjoint groups with the same shape give the same values, computed in one call
    src, dst = edges((0, 1), (1, 2), (0, 2), (3, 4), (4, 5), (3, 5))
    mean = reverse_bfs_mean(6, src, dst, [2, 5], node_group=np.array([0, 0, 0, 1, 1, 1]))
    assert mean.tolist() == [1.0, 1.0, 0.0, 1.0, 1.0, 0.0]


def test_unique_edges_dedupes_repeated_transitions():
    src, dst = unique_edges(np.array([0, 0, 1, 0]), np.array([1, 1, 2, 1]), np.array([True, True, True, True]))
    assert list(zip(src.tolist(), dst.tolist())) == [(0, 1), (1, 2)]
    src, dst = unique_edges(np.array([0, 1]), np.array([1, 2]), np.array([False, False]))
    assert src.size == 0 and dst.size == 0


def test_bridge_prunes_invalid_noop_and_self_loops():
    # one trajectory: A -a-> A (self-loop), A -bad-> N ("Nothing happens" node, flagged noisy),
    # N -c-> C (bridged: edge A -> C), C -d-> D
    N = 9
    pre = np.array([A, A, N, C])
    post = np.array([A, N, C, D])
    noisy = np.array([False, True, False, False])
    anchor, kept = bridge_transitions(pre, post, np.zeros(4, dtype=int), noisy)
    assert kept.tolist() == [False, False, True, True]
    assert anchor.tolist() == [A, A, A, C]
    s, d = unique_edges(anchor, post, kept)
    assert list(zip(s.tolist(), d.tolist())) == [(A, C), (C, D)]
    # without pruning every step is an edge from its recorded state
    anchor, kept = bridge_transitions(pre, post, np.zeros(4, dtype=int), noisy, prune=False)
    assert kept.all() and anchor.tolist() == pre.tolist()


def test_bridge_returning_to_the_bridged_state_is_a_self_loop():
    # A -bad-> N, N -back-> A: relative to the bridge this is A -> A, pruned; then A -> B kept
    N = 9
    pre, post = np.array([A, N, A]), np.array([N, A, B])
    anchor, kept = bridge_transitions(pre, post, np.zeros(3, dtype=int), np.array([True, False, False]))
    assert kept.tolist() == [False, False, True] and anchor.tolist() == [A, A, A]


def _bridge_reference(pre, post, start, noisy):
    anchor, kept = [], []
    for i in range(len(pre)):
        a = pre[i] if (start[i] == i or kept[i - 1]) else anchor[i - 1]
        anchor.append(a)
        kept.append((not noisy[i]) and post[i] != pre[i] and post[i] != a)
    return anchor, kept


@pytest.mark.parametrize("seed", range(8))
def test_vectorised_bridge_matches_left_to_right_scan(seed):
    rng = np.random.default_rng(100 + seed)
    lengths = rng.integers(0, 12, size=20)
    start = np.repeat(np.cumsum(lengths) - lengths, lengths)
    n = int(lengths.sum())
    pre, post = rng.integers(0, 4, n), rng.integers(0, 4, n)
    noisy = rng.random(n) < 0.3
    anchor, kept = bridge_transitions(pre, post, start, noisy)
    ref_anchor, ref_kept = _bridge_reference(pre, post, start, noisy)
    assert anchor.tolist() == ref_anchor and kept.tolist() == ref_kept
