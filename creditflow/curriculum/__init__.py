"""Start-state curricula (paper 002): CRPS suffix replay, the ExpReplay baseline, reward-extremity
diagnostics. Pure Python/NumPy; the trainer adapter is :mod:`creditflow.curriculum.hooks` (imports torch).
"""

from creditflow.curriculum.crps import (
    BufferEntry,
    SuccessBuffer,
    SuffixController,
    group_success_rate,
    insertion_gate,
    replay_mixture,
)
from creditflow.curriculum.diagnostics import group_diagnostics, group_entropy
from creditflow.curriculum.replay import ExpReplay

__all__ = [
    "BufferEntry",
    "ExpReplay",
    "SuccessBuffer",
    "SuffixController",
    "group_diagnostics",
    "group_entropy",
    "group_success_rate",
    "insertion_gate",
    "replay_mixture",
]
