"""CRPS: curriculum replay via progressive suffixes of successful trajectories (paper 002, §3.4–3.6).

Pure Python/NumPy (no torch). Three pieces, wired to the trainer by :mod:`creditflow.curriculum.hooks`:

* :class:`SuccessBuffer` — entries ``b = (x, z, T, {(o_t, a_t)})`` (Eq. 5) plus the fresh-group success
  rate acc(x) (Eq. 6) and replay statistics; insertion gate Eq. 7; bounded capacity with an eviction
  rule; bad entries (restore mismatch) and mastered entries are removed.
* :class:`SuffixController` — suffix length k per entry: start index Eq. 8, initial k Eq. 9, EMA of
  replay success Eq. 10–11 and the banded update Eq. 12, plus mastery removal (§3.5 "Buffer
  maintenance").
* :func:`replay_mixture` — Eq. 13: each group is a replay group with probability ``p_replay``.

The ExpReplay baseline (§4.3 iii) lives in :mod:`creditflow.curriculum.replay`: the same buffer, k pinned
to T (start from the initial state).
"""

from __future__ import annotations

import copy
import math
from dataclasses import asdict, dataclass
from typing import Iterable

import numpy as np

from creditflow.rollout.trajectory import StartState

EVICTION_RULES = ("oldest", "easiest")


@dataclass
class BufferEntry:
    """One successful trace ``b = (x, z, T, {(o_t, a_t)}_{t=0}^{T-1})`` (Eq. 5) and its replay state."""

    uid: int
    task_id: str
    env: str  # env id (registry name)
    seed: int  # z: the env initialisation identifier
    instruction: str  # x
    observations: list[str]  # o_0 .. o_{T-1} (o_t = what was shown before a_t)
    actions: list[str]  # a_0 .. a_{T-1} exactly as the env executed them
    acc: float  # acc(x) of the fresh group the success came from (Eq. 6)
    k: int  # current suffix length (Eq. 9 at insertion, then Eq. 12)
    ema: float  # rho_hat: EMA of replay group success (Eq. 11)
    inserted_step: int = 0
    replays: int = 0  # replay groups rolled out from this entry
    replay_success_sum: float = 0.0  # sum of acc_replay over those groups (Eq. 10)
    mastery_streak: int = 0  # consecutive replay groups at full horizon with rho_hat above the threshold
    snapshots: list | None = None  # snapshots[t] = env.snapshot() at s_t, when the env has snapshot/restore

    @property
    def T(self) -> int:
        return len(self.actions)

    def start_state(self, t0: int) -> StartState:
        """s_t0 of this trace (Eq. 8): the first t0 actions, o_0 .. o_t0 to verify, the stored snapshot."""
        snapshot = copy.deepcopy(self.snapshots[t0]) if t0 > 0 and self.snapshots is not None else None
        return StartState(self.seed, list(self.actions[:t0]), list(self.observations[: t0 + 1]), snapshot)


def insertion_gate(acc: float, succeeded: bool, alpha_max: float) -> bool:
    """Eq. 7: insert a trace only if its rollout succeeded and acc(x) <= alpha_max."""
    return bool(succeeded) and acc <= alpha_max + 1e-12


def group_success_rate(outcomes: Iterable[float | bool]) -> float:
    """Eq. 6 / Eq. 10: acc = (1/G) sum_g 1{R^(g) = 1}."""
    values = [1.0 if bool(o) else 0.0 for o in outcomes]
    return float(np.mean(values)) if values else 0.0


class SuccessBuffer:
    """The success buffer B (§3.4): at most ``capacity`` entries, one per task instance.

    Eviction when full (``eviction``):

    * ``oldest`` — first in, first out (the entry inserted longest ago goes);
    * ``easiest`` — the entry with the highest replay-success EMA goes (ties: the oldest), i.e. the one
      closest to mastery.

    Tasks whose replay failed verification are remembered in ``bad_tasks`` and never re-inserted.
    """

    def __init__(self, capacity: int = 256, eviction: str = "oldest"):
        if capacity < 1:
            raise ValueError(f"capacity must be >= 1, got {capacity}")
        if eviction not in EVICTION_RULES:
            raise ValueError(f"eviction must be one of {', '.join(EVICTION_RULES)}, got {eviction!r}")
        self.capacity = int(capacity)
        self.eviction = eviction
        self.entries: dict[int, BufferEntry] = {}  # uid -> entry, insertion order
        self.bad_tasks: set[str] = set()
        self.next_uid = 0
        self.counts = {"inserted": 0, "evicted": 0, "mastered": 0, "bad": 0}

    def __len__(self) -> int:
        return len(self.entries)

    def __contains__(self, uid: int) -> bool:
        return uid in self.entries

    def get(self, uid: int) -> BufferEntry | None:
        return self.entries.get(uid)

    def has_task(self, task_id: str) -> bool:
        return any(e.task_id == task_id for e in self.entries.values())

    def accepts(self, task_id: str) -> bool:
        """A new trace for ``task_id`` may enter: not already held (the held entry keeps its controller
        state) and not known to be non-replayable."""
        return task_id not in self.bad_tasks and not self.has_task(task_id)

    def new_uid(self) -> int:
        uid = self.next_uid
        self.next_uid += 1
        return uid

    def add(self, entry: BufferEntry) -> int | None:
        """Insert ``entry``; returns the uid evicted to make room (None if none)."""
        evicted = None
        if len(self.entries) >= self.capacity:
            evicted = self._victim()
            del self.entries[evicted]
            self.counts["evicted"] += 1
        self.entries[entry.uid] = entry
        self.counts["inserted"] += 1
        return evicted

    def _victim(self) -> int:
        if self.eviction == "oldest":
            return next(iter(self.entries))
        # easiest: highest EMA among replayed entries; never-replayed ones count as ema = -inf
        best_uid, best = None, -math.inf
        for uid, e in self.entries.items():
            score = e.ema if e.replays > 0 else -math.inf
            if best_uid is None or score > best:
                best_uid, best = uid, score
        return best_uid

    def remove(self, uid: int, reason: str = "mastered") -> BufferEntry | None:
        entry = self.entries.pop(uid, None)
        if entry is not None and reason in self.counts:
            self.counts[reason] += 1
        return entry

    def mark_bad(self, uid: int) -> BufferEntry | None:
        """Restore mismatch (App. D): drop the entry and never re-insert its task."""
        entry = self.entries.pop(uid, None)
        if entry is not None:
            self.bad_tasks.add(entry.task_id)
            self.counts["bad"] += 1
        return entry

    def sample(self, rng: np.random.Generator) -> BufferEntry:
        """d_B in Eq. 13: an entry uniformly at random."""
        if not self.entries:
            raise IndexError("sample from an empty success buffer")
        uids = list(self.entries)
        return self.entries[uids[int(rng.integers(len(uids)))]]

    # -- statistics ------------------------------------------------------------------------------
    def mean_k(self) -> float:
        return float(np.mean([e.k for e in self.entries.values()])) if self.entries else 0.0

    def mean_ema(self) -> float:
        """Mean rho_hat over entries replayed at least once (0.0 when none has been)."""
        vals = [e.ema for e in self.entries.values() if e.replays > 0]
        return float(np.mean(vals)) if vals else 0.0

    # -- checkpointing ---------------------------------------------------------------------------
    def state_dict(self) -> dict:
        return {"capacity": self.capacity, "eviction": self.eviction, "next_uid": self.next_uid,
                "entries": [asdict(e) for e in self.entries.values()],
                "bad_tasks": sorted(self.bad_tasks), "counts": dict(self.counts)}

    def load_state_dict(self, state: dict) -> None:
        self.entries = {d["uid"]: BufferEntry(**copy.deepcopy(d)) for d in state.get("entries", [])}
        self.bad_tasks = set(state.get("bad_tasks", []))
        self.next_uid = int(state.get("next_uid", 0))
        self.counts.update(state.get("counts", {}))


@dataclass
class SuffixController:
    """Suffix length k per entry (Eq. 8–12) and mastery removal (§3.5).

    Defaults: band rho* = [0.2, 0.8], lambda = 0.9, Delta = 2 (App. E). ``k_max=None`` means "up to T"
    (the full trajectory), so the per-entry bounds are ``hi = min(k_max, T)``, ``lo = min(k_min, hi)``.
    """

    band: tuple[float, float] = (0.2, 0.8)
    ema_lambda: float = 0.9
    delta: int = 2
    beta_min: float = 0.2
    beta_max: float = 1.0
    k_min: int = 1
    k_max: int | None = None
    mastery_threshold: float = 0.9
    mastery_patience: int = 2

    def bounds(self, T: int) -> tuple[int, int]:
        hi = T if self.k_max is None else min(self.k_max, T)
        hi = max(hi, 1)
        return min(self.k_min, hi), hi

    def ema_init(self) -> float:
        """Initial rho_hat: the band midpoint (the paper gives none; it triggers no k change by itself)."""
        return 0.5 * (self.band[0] + self.band[1])

    def initial_k(self, acc: float, T: int) -> int:
        """Eq. 9: k0 = clip(floor((beta_min + (beta_max - beta_min) acc(x)) T), k_min, k_max)."""
        lo, hi = self.bounds(T)
        raw = math.floor((self.beta_min + (self.beta_max - self.beta_min) * acc) * T + 1e-9)  # fp guard
        return int(min(max(raw, lo), hi))

    @staticmethod
    def start_index(k: int, T: int) -> int:
        """Eq. 8: t0 = max(0, T - k)."""
        return max(0, T - k)

    def start_of(self, entry: BufferEntry) -> int:
        return self.start_index(entry.k, entry.T)

    def update_ema(self, ema: float, acc_replay: float) -> float:
        """Eq. 11 exactly as written: rho_hat <- (1 - lambda) rho_hat + lambda acc_replay(x).

        (lambda weighs the *new* group: lambda = 1 is no smoothing, small lambda lags; App. E Table 3.)
        """
        return (1.0 - self.ema_lambda) * ema + self.ema_lambda * acc_replay

    def next_k(self, k: int, ema: float, T: int) -> int:
        """Eq. 12: widen k when replay is too easy, shrink it when too hard, else keep it."""
        lo, hi = self.bounds(T)
        low, high = self.band
        if ema > high:
            return min(k + self.delta, hi)
        if ema < low:
            return max(k - self.delta, lo)
        return k

    def record(self, entry: BufferEntry, acc_replay: float) -> bool:
        """Fold one replay group's success rate (Eq. 10) into ``entry``; returns True when mastered.

        Order: EMA (Eq. 11); mastery check on the k this group was rolled out with; then k (Eq. 12).
        Mastered = k has reached its maximal horizon (T, or k_max if smaller) and rho_hat exceeded
        ``mastery_threshold`` for ``mastery_patience`` consecutive replay groups there.
        """
        entry.replays += 1
        entry.replay_success_sum += acc_replay
        entry.ema = self.update_ema(entry.ema, acc_replay)
        if self._mastered(entry):
            return True
        entry.k = self.next_k(entry.k, entry.ema, entry.T)
        return False

    def _mastered(self, entry: BufferEntry) -> bool:
        _, hi = self.bounds(entry.T)
        if entry.k >= hi and entry.ema > self.mastery_threshold:
            entry.mastery_streak += 1
        else:
            entry.mastery_streak = 0
        return entry.mastery_streak >= self.mastery_patience


def replay_mixture(rng: np.random.Generator, n_groups: int, p_replay: float, buffer_size: int) -> list[bool]:
    """Eq. 13: for each of ``n_groups`` groups, True (replay from d_B^(k)) with probability p_replay,
    else False (fresh, d_0). One uniform draw per group always (the stream does not depend on the buffer);
    an empty buffer turns every draw into a fresh group."""
    draws = rng.random(n_groups)
    return [bool(u < p_replay) and buffer_size > 0 for u in draws]
