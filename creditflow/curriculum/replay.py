"""ExpReplay baseline (paper 002, §4.3 iii): replay stored successful tasks from their initial state.

It shares everything with CRPS except *where* a replay starts: the same success buffer and insertion
gate (Eq. 5–7), the same eviction, the same mixture (Eq. 13) and the same mastery removal, but k is
pinned to T, so t0 = 0 (Eq. 8) and there is no suffix controller (no Eq. 9, no Eq. 12). The replay
success EMA (Eq. 11) is still tracked, for mastery removal and the ``crps/replay_success_ema`` metric.
That makes "CRPS vs ExpReplay" an ablation of the start-state curriculum alone.
"""

from __future__ import annotations

from dataclasses import dataclass

from creditflow.curriculum.crps import BufferEntry, SuffixController


@dataclass
class ExpReplay(SuffixController):
    """A :class:`SuffixController` with k = T always (restart from the beginning of the episode)."""

    def initial_k(self, acc: float, T: int) -> int:
        return T  # k = T: replay the whole task

    def next_k(self, k: int, ema: float, T: int) -> int:
        return T  # no controller

    def bounds(self, T: int) -> tuple[int, int]:
        return T, T  # the full horizon is the only horizon, so mastery needs only the EMA condition

    def start_of(self, entry: BufferEntry) -> int:
        return 0
