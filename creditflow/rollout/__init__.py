"""Rollouts: the Trajectory type and JSONL io (torch-free), the batched engine (imports torch lazily)."""

from creditflow.rollout.trajectory import (
    Step,
    Trajectory,
    TrajectoryFormatError,
    group_by,
    iter_jsonl,
    read_jsonl,
    write_jsonl,
)

__all__ = ["Step", "Trajectory", "TrajectoryFormatError", "group_by", "iter_jsonl", "read_jsonl", "write_jsonl"]
