"""The one data type that flows through creditflow: ``Trajectory`` (a list of ``Step``), plus JSONL io.

Next to it live the two definitions every layer shares:

* :class:`StartState` — where an episode starts: an env seed plus the path to an intermediate state
  (CRPS replay groups, RRO candidates and MC process rewards all start from one). ``Trajectory.prefix(t)``
  gives the state before its step ``t``.
* :class:`SuccessRule` — the one rule for "was this a success": the env's ``won`` flag, or
  ``score >= threshold`` when a threshold is configured (graded envs).

The JSONL schema is the interchange format (docs/formats.md), one trajectory per line::

    {"task_id", "group_id", "traj_id", "steps": [{"state", "observation", "action", "response",
     "valid", "reward", ...}], "final_state", "success", "score", "meta"}

Token-level fields (``prompt_ids``, ``response_ids``, ``logprobs``) live on ``Step`` for training but
are not written unless asked (``include_tokens=True``); credit adds ``process_reward``,
``step_reward`` and ``advantage`` per step.
"""

from __future__ import annotations

import itertools
import json
import os
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping, Sequence

import numpy as np

from creditflow.atomic import atomic_open
from creditflow.envs.base import INVALID_ACTION_PREFIX
from creditflow.errors import UserError
from creditflow.jsonl import JsonLine, iter_json_lines, iter_json_texts

TOKEN_FIELDS = ("prompt_ids", "response_ids", "logprobs")
CREDIT_FIELDS = ("process_reward", "step_reward", "advantage")


class TrajectoryFormatError(UserError, ValueError):
    """A JSONL line that is not a valid trajectory; the message names the line and the field."""


@dataclass(frozen=True)
class SuccessRule:
    """R(tau) = 1: the env's ``won`` flag, or ``score >= threshold`` when ``threshold`` is set.

    Configured once (``env.success_threshold``) and applied where an episode's outcome is recorded: the
    rollout engine, the expert, RRO collection, CRPS verification. Everything downstream reads
    ``Trajectory.success``.
    """

    threshold: float | None = None

    def __call__(self, won: bool, score: float) -> bool:
        return bool(won) or (self.threshold is not None and float(score) >= self.threshold)

    def outcome(self, info: dict) -> tuple[bool, float]:
        """``(success, score)`` of the env ``info`` returned by the step that ended an episode."""
        won = bool(info.get("won", False))
        score = float(info.get("score", 1.0 if won else 0.0))
        return self(won, score), score

    def of(self, traj: "Trajectory") -> bool:
        """Apply the rule to a recorded trajectory (``success`` stands for ``won``)."""
        return self(traj.success, traj.score)


@dataclass
class StartState:
    """Where an episode starts: env seed ``seed`` and the path to state s_t (t = ``len(actions)``).

    ``actions`` are a_0 .. a_{t-1} exactly as the env received them (an unparseable response is
    ``INVALID_ACTION_PREFIX + text``). ``observations[i]`` is the observation shown before ``actions[i]``;
    it may hold one more entry, o_t, the observation at s_t itself. Restoring verifies every observation
    given (``creditflow.envs.base.replay``). ``snapshot`` is ``env.snapshot()`` at s_t, when the env has
    snapshot/restore: it skips the replay.
    """

    seed: int | None
    actions: list[str] = field(default_factory=list)
    observations: list[str] = field(default_factory=list)
    snapshot: object | None = None

    @property
    def t(self) -> int:
        return len(self.actions)

    @property
    def key(self) -> tuple:
        """Identity of the state's path (seed, actions): equal keys reach the same state."""
        return (self.seed, tuple(self.actions))


@dataclass
class Step:
    state: str  # state_key of the state the action was taken in
    observation: str  # text shown to the policy at this step
    action: str  # parsed action that was executed (raw text if unparseable)
    response: str = ""  # full model output
    valid: bool = True
    reward: float = 0.0  # env reward (+ invalid-action penalty) for this step
    done: bool = False  # the episode ended at this step (terminated or truncated)
    truncated: bool = False  # ended by a step limit (the env's own, or rollout.max_steps), not by the env's own end
    next_state: str | None = None  # state_key after the action (None: not recorded)
    executed: str | None = None  # what the env received, when it differs from ``action`` (None: ``action``)
    info: dict = field(default_factory=dict)  # extra env info worth keeping (small)
    # token-level (training only)
    prompt_ids: list[int] | None = None
    response_ids: list[int] | None = None
    logprobs: list[float] | None = None
    # credit outputs
    process_reward: float | None = None  # R(s_t)
    step_reward: float | None = None  # r~_t
    advantage: float | None = None

    @property
    def env_action(self) -> str:
        """The action as the env received it (replaying it reproduces the step)."""
        if self.executed is not None:
            return self.executed
        return self.action if self.valid else INVALID_ACTION_PREFIX + self.action

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
        if self.truncated:
            out["truncated"] = True
        if self.next_state is not None:
            out["next_state"] = self.next_state
        if self.executed is not None:
            out["executed"] = self.executed
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
    # in memory only (never written): where the episode started, and the env's snapshot and info after
    # its last step (the rollout engine sets them; a trajectory stopped early can be continued from there)
    start: StartState | None = field(default=None, repr=False, compare=False)
    end_snapshot: object | None = field(default=None, repr=False, compare=False)
    end_info: dict | None = field(default=None, repr=False, compare=False)

    def __post_init__(self):
        if not self.group_id:
            self.group_id = self.task_id

    @property
    def done(self) -> bool:
        """The episode ended (its last step terminated or truncated it)."""
        return bool(self.steps) and self.steps[-1].done

    @property
    def truncated(self) -> bool:
        """The episode was cut by a step limit (the env's ``max_steps`` or ``rollout.max_steps``) before the env
        ended it; its ``success`` and ``score`` are what the env gave the episode as it stood there."""
        return self.done and self.steps[-1].truncated

    def prefix(self, t: int | None = None) -> StartState:
        """The state before step ``t`` (default: after the last step), as a :class:`StartState`.

        It includes the path to the trajectory's own start state, so a trajectory that began mid-task
        (a replay group, an RRO candidate) gives the full path from reset.
        """
        n = len(self.steps)
        t = n if t is None else t
        if not 0 <= t <= n:
            raise ValueError(f"prefix({t}) of a trajectory with {n} steps")
        start = self.start or StartState(self.meta.get("seed"))
        at_t = self.steps[t].observation if t < n else self.meta.get("final_observation")
        observations = list(start.observations[: start.t]) + [s.observation for s in self.steps[:t]]
        if at_t is not None:
            observations.append(at_t)
        snapshot = start.snapshot if t == 0 else (self.end_snapshot if t == n else None)
        return StartState(start.seed, list(start.actions) + [s.env_action for s in self.steps[:t]],
                          observations, snapshot)

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
                "state": _state_key(_req(raw, "state", str, sp + ": "), "state", sp + ": "),
                "observation": _opt(raw, "observation", str, sp + ": ", ""),
                "action": _req(raw, "action", str, sp + ": "),
                "response": _opt(raw, "response", str, sp + ": ", ""),
                "valid": _opt(raw, "valid", bool, sp + ": ", True),
                "reward": _float(_opt(raw, "reward", (int, float), sp + ": ", 0.0), "reward", sp + ": "),
            }
            for name in ("done", "truncated", "next_state", "executed", "info", *TOKEN_FIELDS, *CREDIT_FIELDS):
                if name in raw and name in step_names:
                    kw[name] = _checked_extra(raw[name], name, sp + ": ")
            if kw.get("next_state") is not None:
                _state_key(kw["next_state"], "next_state", sp + ": ")
            steps.append(Step(**kw))
        traj = cls(
            task_id=task_id,
            steps=steps,
            group_id=_opt(data, "group_id", str, pre, "") or task_id,
            traj_id=_opt(data, "traj_id", str, pre, ""),
            final_state=_state_key(_opt(data, "final_state", str, pre, ""), "final_state", pre),
            success=_opt(data, "success", bool, pre, False),
            score=_float(_opt(data, "score", (int, float), pre, 0.0), "score", pre),
            meta=_opt(data, "meta", dict, pre, {}),
        )
        return traj


def _state_key(value: str, key: str, pre: str) -> str:
    """A state key of the input: never one starting with NUL, which creditflow's own graph nodes (the shared
    success node, a failed rollout's dead end) start with (``creditflow.credit.states``)."""
    if value.startswith("\x00"):
        raise TrajectoryFormatError(f"{pre}field {key!r} is {value[:40]!r}: a state key must not start with the NUL "
                                    "character, which creditflow's own graph nodes (success, dead ends) start with")
    return value


_EXTRA_TYPES = {"done": (bool, "bool"), "truncated": (bool, "bool"), "next_state": (str, "str"),
                "executed": (str, "str"), "info": (dict, "dict"),
                "prompt_ids": (list, "list"), "response_ids": (list, "list"), "logprobs": (list, "list"),
                "process_reward": ((int, float), "number"), "step_reward": ((int, float), "number"),
                "advantage": ((int, float), "number")}


def _checked_extra(value: Any, key: str, pre: str) -> Any:
    """An optional step field of the type the schema gives it (None: not recorded); anything else (a list for
    ``next_state`` or ``info``, a number for a state key) is a one-line error naming it."""
    if value is None:
        return None
    typ, want = _EXTRA_TYPES[key]
    if not isinstance(value, typ) or (want == "number" and isinstance(value, bool)):
        raise TrajectoryFormatError(f"{pre}field '{key}' must be {want}, got {type(value).__name__}")
    return value


def _float(value: int | float, key: str, pre: str) -> float:
    try:
        return float(value)
    except OverflowError:  # an integer beyond float64
        raise TrajectoryFormatError(f"{pre}field '{key}' must be a finite number, got an integer of "
                                    f"{len(str(abs(value)))} digits") from None


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


def read_jsonl_lines(path: str | os.PathLike) -> list[JsonLine]:
    """The lines of a trajectory JSONL file as parsed (unknown fields kept, nothing validated yet), with every
    byte of the file and ``file:line``, for :func:`write_scored_jsonl`; the members of step objects that
    already hold credit fields are located too. Unreadable files and lines raise
    :class:`TrajectoryFormatError`."""
    return list(iter_json_texts(path, TrajectoryFormatError, "steps", spans_for=_CREDIT))


_CREDIT = frozenset(CREDIT_FIELDS)


def write_scored_jsonl(path: str | os.PathLike, lines: Sequence[JsonLine], columns: Mapping[str, Any]) -> Path:
    """Write ``lines`` (from :func:`read_jsonl_lines`) with the per-step ``columns`` (name -> finite values, one
    per step of all lines in order), atomically. Each column becomes a member of every step object: its value
    replaced in place where the step has that member already, else ``, "name": value`` added after the step's
    last member. A credit field a step holds that ``columns`` lacks (``process_reward`` from an earlier
    estimator) is removed. Every other byte of the file stays as it was read."""
    names = list(columns)
    values = {name: np.asarray(columns[name], dtype=np.float64) for name in names}
    for name, column in values.items():
        if not np.isfinite(column).all():
            raise ValueError(f"write_scored_jsonl: column {name!r} holds a value that is not a finite number")
    inserts = _inserts(names, values)
    pieces: list[bytes] = []
    start = 0
    for line in lines:
        n = len(line.value["steps"])
        pieces.append(line.lead)
        if line.ends is None:  # not reached for a valid trajectory line (the walk locates its steps)
            pieces.append(_dumped(line.value["steps"], names, values, start, line.value))
        elif line.members:
            pieces.append(_edited(line, names, values, inserts, start))
        else:
            bounds = [0, *line.ends, len(line.raw)]
            segments = list(map(line.raw.__getitem__, map(slice, bounds, bounds[1:])))
            pieces.extend(itertools.chain.from_iterable(zip(segments, inserts[start:start + n])))
            pieces.append(segments[-1])
        pieces.append(line.end)
        start += n
    path = Path(path)
    with atomic_open(path, "wb") as fh:
        fh.write(b"".join(pieces))
    return path


def _float_text(value: float) -> str:
    """A finite float as JSON writes it (Python's shortest round-trip repr)."""
    return repr(float(value))


def _edited(line: JsonLine, names: list[str], values: Mapping[str, np.ndarray], inserts: list[bytes],
            start: int) -> bytes:
    """``line.raw`` with the credit members of its steps replaced (values only), added or removed."""
    edits: list[tuple[int, int, bytes]] = []  # (start, end, replacement) byte spans of line.raw
    for k, at in enumerate(line.ends):
        members = line.members.get(k)
        if members is None:
            edits.append((at, at, inserts[start + k]))
            continue
        row = {name: values[name][start + k] for name in names}
        stale = [m.key in _CREDIT and m.key not in row for m in members]
        for j, m in enumerate(members):
            if m.key in row:
                edits.append((m.value_start, m.value_end, _float_text(row[m.key]).encode()))
            elif stale[j] and (j == 0 or not stale[j - 1]):  # a run of stale members from j: remove it
                last = next((i for i in range(j, len(members)) if not stale[i]), len(members)) - 1
                if last + 1 < len(members):  # up to the next member's key
                    edits.append((m.start, members[last + 1].start, b""))
                elif j > 0:  # at the end: from the value before it
                    edits.append((members[j - 1].value_end, members[last].value_end, b""))
        present = {m.key for m in members}
        added = "".join(f', "{name}": {_float_text(row[name])}' for name in names if name not in present)
        if added:
            edits.append((at, at, added.encode()))
    out, pos = [], 0
    for a, b, text in sorted(edits, key=lambda e: (e[0], e[1])):
        out += (line.raw[pos:a], text)
        pos = b
    out.append(line.raw[pos:])
    return b"".join(out)


def _dumped(steps: list, names: list[str], values: Mapping[str, np.ndarray], start: int, value: Any) -> bytes:
    """The line as ``json.dumps`` of its value, credit fields set (or removed where ``names`` lacks them)."""
    for k, step in enumerate(steps):
        for name in CREDIT_FIELDS:
            if name in values:
                step[name] = float(values[name][start + k])
            else:
                step.pop(name, None)
    return json.dumps(value, ensure_ascii=False, allow_nan=False).encode("utf-8")


def _inserts(names: list[str], values: Mapping[str, np.ndarray]) -> list[bytes]:
    """``b', "name": value'`` for every step, as JSON writes the floats. Formatting is the slow part of
    writing and steps repeat their values (R(s) = gamma ** d, a trajectory's shared term): each distinct
    row of values is formatted once, all floats of a column in one C call (the list's own repr)."""
    if not names or not len(values[names[0]]):
        return []
    texts, codes = [], np.zeros(len(values[names[0]]), dtype=np.int64)
    for name in names:  # per column: the distinct bit patterns (-0.0 stays itself), formatted once
        bits, inverse = np.unique(values[name].view(np.int64), return_inverse=True)
        texts.append(repr(bits.view(np.float64).tolist())[1:-1].split(", "))
        codes = codes * bits.size + inverse.reshape(-1)
    rows, inverse = np.unique(codes, return_inverse=True)  # distinct rows of values
    template = "".join(f', "{name}": {{}}' for name in names)
    per_column = [map(column.__getitem__, _digits(rows, [len(t) for t in texts], k)) for k, column in enumerate(texts)]
    formatted = list(map(str.encode, map(template.format, *per_column)))
    return list(map(formatted.__getitem__, inverse.reshape(-1).tolist()))


def _digits(codes: np.ndarray, radices: list[int], k: int) -> list[int]:
    """Digit ``k`` of mixed-radix ``codes`` (most significant first)."""
    return ((codes // int(np.prod(radices[k + 1:], dtype=np.int64))) % radices[k]).tolist()


def write_jsonl(path: str | os.PathLike, trajectories: Iterable[Trajectory | dict],
                include_tokens: bool = False) -> Path:
    """Write atomically: a temporary file in the same directory, renamed over ``path`` at the end. Dicts are
    written as they are (key order and unknown fields kept)."""
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
