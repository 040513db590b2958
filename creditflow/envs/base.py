"""The environment protocol every creditflow env follows (docs/environments.md).

Gymnasium-shaped, text in and text out:

* ``reset(*, seed=None, options=None) -> (observation, info)``
* ``step(action) -> (observation, reward, terminated, truncated, info)``

``info`` always carries :data:`INFO_KEYS`. Envs use a local RNG only (``random.Random`` /
``numpy.random.Generator`` seeded in ``reset``), never the global one, so two envs with the same seed
and the same actions produce the same observations whatever else runs in the process.

Envs that can copy their state implement ``snapshot() -> obj`` and ``restore(obj) -> (observation,
info)``; every env can be brought back
to a state by :func:`replay`, which re-applies a stored action prefix and verifies each observation.
"""

from __future__ import annotations

import copy
import functools
import random
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from creditflow.errors import UserError

INFO_KEYS = ("task", "admissible_actions", "action_valid", "won", "score", "state_key")

# The rollout engine sends ``INVALID_ACTION_PREFIX + text`` for a response it could not parse: envs must
# treat such an action as invalid (no effect on the state, ``action_valid=False``), never execute it.
INVALID_ACTION_PREFIX = "<invalid>"


class EnvError(UserError, ValueError):
    """A user-facing problem with an env (bad option, missing data)."""


class ReplayMismatch(Exception):
    """Verified replay reached a state whose observation differs from the stored one (callers count
    and skip; not a user error)."""

    def __init__(self, step: int, expected: str, got: str):
        self.step, self.expected, self.got = step, expected, got
        super().__init__(
            f"replay diverged at step {step}: expected {_short(expected)!r}, got {_short(got)!r}"
        )


def _short(text: str, n: int = 60) -> str:
    text = text.replace("\n", "\\n")
    return text if len(text) <= n else text[: n - 3] + "..."


@runtime_checkable
class TextEnv(Protocol):
    """Structural type of a creditflow environment."""

    name: str
    max_steps: int

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[str, dict]: ...

    def step(self, action: str) -> tuple[str, float, bool, bool, dict]: ...


class BaseTextEnv:
    """Convenience base class: step counting, truncation and info defaults.

    Subclasses implement ``_reset(seed, options) -> (obs, info)`` and ``_step(action) -> (obs, reward,
    terminated, info)``; this class adds ``truncated`` at ``max_steps`` and fills missing info keys. ``step()``
    before the first ``reset()`` (or ``restore()``) and after the episode ended is an :class:`EnvError`.
    """

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        restore = cls.__dict__.get("restore")
        if callable(restore):  # a restored env has an episode under way, as after reset()
            @functools.wraps(restore)
            def started_restore(self, *args, **kw):
                result = restore(self, *args, **kw)
                self._started = True
                return result

            cls.restore = started_restore

    name: str = "base"
    max_steps: int = 15

    def __init__(self, max_steps: int | None = None):
        if max_steps is not None:
            if int(max_steps) < 1:
                raise EnvError(f"max_steps must be >= 1, got {max_steps}")
            self.max_steps = int(max_steps)
        self.steps_taken = 0
        self.seed: int | None = None
        self._done = False
        self._started = False

    # -- subclass hooks -------------------------------------------------------------------------
    def _reset(self, seed: int | None, options: dict | None) -> tuple[str, dict]:
        raise NotImplementedError

    def _step(self, action: str) -> tuple[str, float, bool, dict]:
        raise NotImplementedError

    # -- protocol -------------------------------------------------------------------------------
    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[str, dict]:
        self.steps_taken = 0
        self.seed = seed
        self._done = False
        self._started = True
        obs, info = self._reset(seed, options)
        return obs, self._fill(info)

    def step(self, action: str) -> tuple[str, float, bool, bool, dict]:
        if not getattr(self, "_started", True):  # (a subclass that skips __init__ is not checked)
            raise EnvError(f"{self.name}: step() called before reset(); call reset(seed=...) first")
        if self._done:
            raise EnvError(f"{self.name}: step() called after the episode ended; call reset()")
        obs, reward, terminated, info = self._step(action)
        self.steps_taken += 1
        truncated = (not terminated) and self.steps_taken >= self.max_steps
        self._done = terminated or truncated
        return obs, float(reward), bool(terminated), bool(truncated), self._fill(info)

    def _fill(self, info: dict) -> dict:
        info.setdefault("task", "")
        info.setdefault("admissible_actions", None)
        info.setdefault("action_valid", True)
        info.setdefault("won", False)
        info.setdefault("score", 1.0 if info["won"] else 0.0)
        info.setdefault("state_key", "")
        return info


def has_snapshot(env: Any) -> bool:
    return callable(getattr(env, "snapshot", None)) and callable(getattr(env, "restore", None))


@dataclass
class ReplayResult:
    """What :func:`replay` leaves behind: the last observation/info and the rewards on the way."""

    observation: str
    info: dict
    rewards: list[float] = field(default_factory=list)
    done: bool = False
    snapshots: list | None = None  # env.snapshot() at s_0 .. s_{T-1} (before each action), when asked for


def replay(
    env: TextEnv,
    seed: int | None,
    actions: list[str],
    observations: list[str] | None = None,
    *,
    options: dict | None = None,
    snapshots: bool = False,
) -> ReplayResult:
    """Bring ``env`` to the state after ``actions`` by reset + re-applying them.

    ``observations`` (optional) are the stored observations: ``observations[0]`` the one after reset,
    ``observations[i]`` the one after ``actions[i-1]``. Each one is compared with what the env shows
    now; the first difference raises :class:`ReplayMismatch`. Ending early (terminated/truncated
    before the prefix is used up) also raises it. ``snapshots=True`` (envs with snapshot/restore) also
    returns a deep copy of the env's snapshot before every action.
    """
    obs, info = env.reset(seed=seed, options=options)
    if observations:
        _check(0, observations[0], obs)
    rewards: list[float] = []
    snaps: list | None = [] if snapshots else None
    done = False
    for i, action in enumerate(actions):
        if done:
            raise ReplayMismatch(i, "<episode continues>", "<episode ended>")
        if snaps is not None:
            snaps.append(copy.deepcopy(env.snapshot()))
        obs, reward, terminated, truncated, info = env.step(action)
        rewards.append(reward)
        done = terminated or truncated
        if observations and i + 1 < len(observations):
            _check(i + 1, observations[i + 1], obs)
    return ReplayResult(observation=obs, info=info, rewards=rewards, done=done, snapshots=snaps)


def _check(step: int, expected: str, got: str) -> None:
    if expected != got:
        raise ReplayMismatch(step, expected, got)


def check_determinism(
    make_env, seed: int, actions: list[str] | None = None, *, n_steps: int = 10, rng_seed: int = 0
) -> list[tuple]:
    """Run the same seed and actions on two fresh envs; raise AssertionError on any difference.

    ``make_env`` is a zero-argument factory. Without ``actions`` a fixed pseudo-random sequence is
    drawn from each step's admissible actions (same choice rule on both runs). Returns the trace.
    """
    def run() -> list[tuple]:
        env = make_env()
        chooser = random.Random(rng_seed)
        obs, info = env.reset(seed=seed)
        trace = [("reset", obs, 0.0, info.get("state_key"), info.get("admissible_actions"))]
        plan = list(actions) if actions is not None else None
        for t in range(len(plan) if plan is not None else n_steps):
            if plan is not None:
                action = plan[t]
            else:
                adm = info.get("admissible_actions") or ["noop"]
                action = adm[chooser.randrange(len(adm))]
            obs, reward, terminated, truncated, info = env.step(action)
            trace.append((action, obs, reward, info.get("state_key"), info.get("admissible_actions")))
            if terminated or truncated:
                break
        return trace

    first, second = run(), run()
    for i, (a, b) in enumerate(zip(first, second)):
        if a != b:
            raise AssertionError(f"env not deterministic at step {i}: {a!r} != {b!r}")
    if len(first) != len(second):
        raise AssertionError(f"env not deterministic: episode lengths {len(first)} != {len(second)}")
    return first
