"""The one data type that flows through creditflow: ``Trajectory`` (a list of ``Step``), plus JSONL io.

The JSONL schema is DESIGN.md's interchange format, one trajectory per line::

    {"task_id", "group_id", "traj_id", "steps": [{"state", "observation", "action", "response",
     "valid", "reward", ...}], "final_state", "success", "score", "meta"}

Token-level fields (``prompt_ids``, ``response_ids``, ``logprobs``) live on ``Step`` for training but
are not written unless asked (``include_tokens=True``); credit adds ``process_reward``,
``step_reward`` and ``advantage`` per step.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Iterable, Iterator

from creditflow.atomic import atomic_open
from creditflow.errors import UserError
from creditflow.jsonl import iter_json_lines

TOKEN_FIELDS = ("prompt_ids", "response_ids", "logprobs")
CREDIT_FIELDS = ("process_reward", "step_reward", "advantage")


class TrajectoryFormatError(UserError):
    """A JSONL line that is not a valid trajectory; the message names the line and the field."""


@dataclass
class Step:
    state: str  # state_key of the state the action was taken in
    observation: str  # text shown to the policy at this step
    action: str  # parsed action that was executed (raw text if unparseable)
    response: str = ""  # full model output
    valid: bool = True
    reward: float = 0.0  # env reward (+ invalid-action penalty) for this step
    done: bool = False
    next_state: str | None = None  # state_key after the action (None: not recorded)
    info: dict = field(default_factory=dict)  # extra env info worth keeping (small)
    # token-level (training only)
    prompt_ids: list[int] | None = None
    response_ids: list[int] | None = None
    logprobs: list[float] | None = None
    # credit outputs
    process_reward: float | None = None  # R(s_t)
    step_reward: float | None = None  # r~_t
    advantage: float | None = None

    def to_dict(self, include_tokens: bool = False) -> dict:
        out: dict[str, Any] = {
            "state": self.state,
            "observation": self.observation,
            "action": self.action,
            "response": self.response,
            "valid": self.valid,
            "reward": self.reward,
        }
        if self.done:
            out["done"] = True
        if self.next_state is not None:
            out["next_state"] = self.next_state
        if self.info:
            out["info"] = self.info
        for name in CREDIT_FIELDS:
            value = getattr(self, name)
            if value is not None:
                out[name] = value
        if include_tokens:
            for name in TOKEN_FIELDS:
                value = getattr(self, name)
                if value is not None:
                    out[name] = value
        return out


@dataclass
class Trajectory:
    task_id: str
    steps: list[Step] = field(default_factory=list)
    group_id: str = ""
    traj_id: str = ""
    final_state: str = ""
    success: bool = False
    score: float = 0.0
    meta: dict = field(default_factory=dict)

    def __post_init__(self):
        if not self.group_id:
            self.group_id = self.task_id

    @property
    def total_reward(self) -> float:
        return float(sum(s.reward for s in self.steps))

    def __len__(self) -> int:
        return len(self.steps)

    def states(self) -> list[str]:
        """s_0 .. s_T: the state before each step, then the final state."""
        return [s.state for s in self.steps] + [self.final_state]

    def to_dict(self, include_tokens: bool = False) -> dict:
        return {
            "task_id": self.task_id,
            "group_id": self.group_id,
            "traj_id": self.traj_id,
            "steps": [s.to_dict(include_tokens) for s in self.steps],
            "final_state": self.final_state,
            "success": self.success,
            "score": self.score,
            "meta": self.meta,
        }

    @classmethod
    def from_dict(cls, data: Any, where: str = "") -> "Trajectory":
        """Validate and build; errors name ``where`` (e.g. ``"trajs.jsonl:12"``) and the field."""
        pre = f"{where}: " if where else ""
        if not isinstance(data, dict):
            raise TrajectoryFormatError(f"{pre}expected a JSON object, got {type(data).__name__}")
        task_id = _req(data, "task_id", str, pre)
        steps_raw = _req(data, "steps", list, pre)
        steps = []
        step_names = {f.name for f in fields(Step)}
        for i, raw in enumerate(steps_raw):
            sp = f"{pre}steps[{i}]"
            if not isinstance(raw, dict):
                raise TrajectoryFormatError(f"{sp}: expected an object")
            kw: dict[str, Any] = {
                "state": _req(raw, "state", str, sp + ": "),
                "observation": _opt(raw, "observation", str, sp + ": ", ""),
                "action": _req(raw, "action", str, sp + ": "),
                "response": _opt(raw, "response", str, sp + ": ", ""),
                "valid": _opt(raw, "valid", bool, sp + ": ", True),
                "reward": float(_opt(raw, "reward", (int, float), sp + ": ", 0.0)),
            }
            for name in ("done", "next_state", "info", *TOKEN_FIELDS, *CREDIT_FIELDS):
                if name in raw and name in step_names:
                    kw[name] = raw[name]
            steps.append(Step(**kw))
        traj = cls(
            task_id=task_id,
            steps=steps,
            group_id=_opt(data, "group_id", str, pre, "") or task_id,
            traj_id=_opt(data, "traj_id", str, pre, ""),
            final_state=_opt(data, "final_state", str, pre, ""),
            success=_opt(data, "success", bool, pre, False),
            score=float(_opt(data, "score", (int, float), pre, 0.0)),
            meta=_opt(data, "meta", dict, pre, {}),
        )
        return traj


def _req(data: dict, key: str, typ, pre: str):
    if key not in data:
        raise TrajectoryFormatError(f"{pre}missing field '{key}'")
    return _typed(data[key], key, typ, pre)


def _opt(data: dict, key: str, typ, pre: str, default):
    if key not in data or data[key] is None:
        return default
    return _typed(data[key], key, typ, pre)


def _typed(value, key: str, typ, pre: str):
    ok = isinstance(value, typ) and not (typ in ((int, float),) and isinstance(value, bool))
    if not ok:
        want = typ.__name__ if isinstance(typ, type) else "number"
        raise TrajectoryFormatError(f"{pre}field '{key}' must be {want}, got {type(value).__name__}")
    return value


# -- JSONL io --------------------------------------------------------------------------------------


def iter_jsonl(path: str | os.PathLike) -> Iterator[Trajectory]:
    """Yield trajectories; a bad line raises :class:`TrajectoryFormatError` naming ``file:line``."""
    for where, data in iter_json_lines(path, TrajectoryFormatError):
        yield Trajectory.from_dict(data, where)


def read_jsonl(path: str | os.PathLike) -> list[Trajectory]:
    return list(iter_jsonl(path))


def write_jsonl(path: str | os.PathLike, trajectories: Iterable[Trajectory | dict],
                include_tokens: bool = False) -> Path:
    """Write atomically: a temporary file in the same directory, renamed over ``path`` at the end."""
    path = Path(path)
    with atomic_open(path, "w") as fh:
        for traj in trajectories:
            data = traj.to_dict(include_tokens) if isinstance(traj, Trajectory) else traj
            fh.write(json.dumps(data, ensure_ascii=False) + "\n")
    return path


def group_by(trajectories: Iterable[Trajectory], key: str = "group_id") -> dict[str, list[Trajectory]]:
    """Group trajectories (insertion order kept) by ``group_id`` (default) or another attribute."""
    groups: dict[str, list[Trajectory]] = {}
    for traj in trajectories:
        groups.setdefault(getattr(traj, key), []).append(traj)
    return groups
