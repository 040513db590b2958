"""What every adapter shares: the episode bookkeeping of the protocol, the ``state_key`` option, loading a
``module:name`` target, the task files of SkyRL and TRL, and chat messages as text.

An adapter is an :class:`AdapterEnv` that implements ``_begin(seed, options) -> first observation`` (and sets the
task), ``_act(action) -> Outcome`` and ``_end(terminated) -> (score, won, last reward)`` on the wrapped env. The base
class counts steps, ends the episode at ``max_steps`` (``_end`` then scores an episode cut short), answers invalid
and non-text actions without touching the wrapped env, and fills the info keys (``state_key`` is the observation,
or what the user's ``state_key`` function makes of it). ``truncate()`` is the protocol's hook for a cut by the
run's ``rollout.max_steps``: the episode ends there exactly as at the adapter's own ``max_steps``. Async code of the wrapped envs runs on one event loop in a
daemon thread (:func:`run_async`).
"""

from __future__ import annotations

import asyncio
import atexit
import importlib
import json
import numbers
import os
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from creditflow.envs.base import INVALID_ACTION_PREFIX, BaseTextEnv, EnvError
from creditflow.envs.loading import import_target_module
from creditflow.jsonl import iter_json_lines

StateKey = Callable[[str, Any], object]

_LOCK = threading.Lock()
_LOOP: tuple[int, asyncio.AbstractEventLoop] | None = None  # (pid, loop): a forked process starts its own


def event_loop() -> asyncio.AbstractEventLoop:
    """The adapters' event loop, running in a daemon thread: async code of the wrapped envs runs there, so an
    adapter works where the caller's thread already runs a loop (a notebook)."""
    global _LOOP
    with _LOCK:
        if _LOOP is None or _LOOP[0] != os.getpid():
            loop = asyncio.new_event_loop()
            threading.Thread(target=loop.run_forever, name="creditflow-env-adapters", daemon=True).start()
            atexit.register(_stop, loop)
            _LOOP = (os.getpid(), loop)
        return _LOOP[1]


def _stop(loop: asyncio.AbstractEventLoop) -> None:
    """At exit: cancel what still runs on the loop (a rollout the engine stopped mid-episode; its cleanup runs),
    then stop the loop, so no pending task is destroyed with the interpreter."""
    async def cancel_all():
        tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    if loop.is_running():
        try:
            asyncio.run_coroutine_threadsafe(cancel_all(), loop).result(timeout=10)
        except Exception:  # noqa: BLE001 - best effort at exit
            pass
        loop.call_soon_threadsafe(loop.stop)


def run_async(awaitable):
    """Run a coroutine (or any awaitable) on :func:`event_loop` and wait for its result."""
    async def wait():
        return await awaitable
    return asyncio.run_coroutine_threadsafe(wait(), event_loop()).result()


@dataclass
class Outcome:
    """What one action did in the wrapped env. ``valid=False``: the env answered it as a failed action (an
    unknown tool, a malformed call); ``info``: extra info keys."""

    observation: str
    reward: float = 0.0
    terminated: bool = False
    truncated: bool = False
    valid: bool = True
    info: dict = field(default_factory=dict)


def import_package(module: str, env: str, extra: str):
    """Import an adapter's package where the env is built, or say in one line which extra installs it."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise EnvError(f"env {env!r} needs the {module} package ({_last_line(exc)}); "
                       f"install it with: pip install 'creditflow[{extra}]'") from None


def load_object(target: str, what: str) -> Any:
    """The object ``module:name`` (``name`` may be dotted) names; ``what`` says whose it is (``env 'trl:m:C'``).
    One-line :class:`EnvError` when it cannot be loaded: the module that failed to import and the last line of its
    error, or the missing name."""
    module, sep, attr = target.partition(":")
    if not sep or not module or not attr:
        raise EnvError(f"{what}: {target!r} must be 'module:name'")
    try:
        obj = import_target_module(module)  # the current directory too, as for `--env module:Class`
    except Exception as exc:  # noqa: BLE001 - any error of the user's module is reported in one line
        raise EnvError(f"{what}: module {module!r} failed to import: {_last_line(exc)}") from None
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise EnvError(f"{what}: module {module!r} has no attribute {attr!r}")
        obj = getattr(obj, part)
    return obj


def _last_line(exc: BaseException) -> str:
    lines = [line for line in f"{type(exc).__name__}: {exc}".splitlines() if line.strip()]
    return lines[-1] if lines else type(exc).__name__


def state_key_function(state_key: str | StateKey | None, env: str) -> StateKey | None:
    """The ``state_key`` option of env ``env`` as a callable ``f(observation, native) -> key`` (None: the
    observation is the key)."""
    if state_key is None:
        return None
    what = f"env {env!r}: state_key {state_key!r}"
    fn = load_object(state_key, what) if isinstance(state_key, str) else state_key
    if not callable(fn):
        raise EnvError(f"{what} is not callable")
    return fn


def load_rows(path: str, what: str) -> list[dict]:
    """The rows of a task file: Parquet, a JSON list of objects, or JSONL (one object a line)."""
    file = Path(path)
    if not file.is_file():
        raise EnvError(f"{what}: no file {path!r}")
    suffix = file.suffix.lower()
    if suffix == ".parquet":
        try:
            import pyarrow.parquet as pq  # optional: pyarrow comes with datasets
        except ImportError as exc:
            raise EnvError(f"{what}: reading {path!r} needs pyarrow ({_last_line(exc)})") from None
        try:
            rows = pq.read_table(file).to_pylist()
        except Exception as exc:  # noqa: BLE001 - a damaged file is a user error
            raise EnvError(f"{what}: {path!r} is not a readable Parquet file: {_last_line(exc)}") from None
    elif suffix == ".json":
        try:
            rows = json.loads(file.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise EnvError(f"{what}: {path!r} is not a readable JSON file: {_last_line(exc)}") from None
        if not isinstance(rows, list):
            raise EnvError(f"{what}: {path!r} must hold a JSON list of objects")
    elif suffix == ".jsonl":
        rows = [value for _, value in iter_json_lines(file, EnvError, prefix=f"{what}: ")]
    else:
        raise EnvError(f"{what}: {path!r} must be a .parquet, .json or .jsonl file")
    bad = next((i for i, row in enumerate(rows) if not isinstance(row, dict)), None)
    if bad is not None:
        raise EnvError(f"{what}: {path!r} row {bad + 1} is not an object")
    if not rows:
        raise EnvError(f"{what}: {path!r} has no rows")
    return rows


def message_text(message: Any) -> str:
    """A chat message's text: its ``content`` (a string, or the text parts of a list of parts)."""
    content = message.get("content") if isinstance(message, dict) else getattr(message, "content", message)
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            text = part.get("text") if isinstance(part, dict) else getattr(part, "text", None)
            if isinstance(text, str):
                parts.append(text)
        return "\n".join(parts)
    return str(content)


def messages_text(messages: Any) -> str:
    """Chat messages (or a plain string) as one text: the messages' contents, one after the other."""
    if messages is None:
        return ""
    if isinstance(messages, str):
        return messages
    return "\n\n".join(text for text in (message_text(m) for m in messages) if text)


class AdapterEnv(BaseTextEnv):
    """The protocol side of every adapter (see the module docstring). ``name`` is ``<adapter>:<spec>``."""

    adapter = ""
    max_steps = 15

    def __init__(self, spec: str, *, state_key: str | StateKey | None):
        if not isinstance(spec, str) or not spec.strip():
            raise EnvError(f"env '{self.adapter}:' needs what to adapt after the colon, e.g. "
                           f"'{self.adapter}:{self.example}'")
        super().__init__()
        self.spec = spec
        self.name = f"{self.adapter}:{spec}"
        self._state_key = state_key_function(state_key, self.name)
        self._observation = ""
        self._task = ""
        self._admissible: list[str] | None = None
        self._score = 0.0
        self._return = 0.0
        self._end_info: dict = {}  # what _end adds to the last info (e.g. the wrapped env's stop condition)
        self._last_step: tuple[bool, dict] = (True, {})  # the last step's action_valid and extra info keys

    example = "<their env id>"

    def _set_max_steps(self, value: int) -> None:
        """The episode limit (``max_steps``, or the adapter's default read off the wrapped env)."""
        if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
            raise EnvError(f"env {self.name!r}: max_steps must be an integer >= 1, got {value!r}")
        self.max_steps = int(value)

    # -- what an adapter implements -------------------------------------------------------------
    def _native(self) -> Any:
        """The object the ``state_key`` function gets next to the observation."""
        raise NotImplementedError

    def _begin(self, seed: int | None, options: dict | None) -> str:
        """Start an episode of the wrapped env; returns the first observation (sets ``_task``)."""
        raise NotImplementedError

    def _act(self, action: str) -> Outcome | None:
        """Apply a text action, or return None when the wrapped env cannot take it (no effect on its state)."""
        raise NotImplementedError

    def _end(self, terminated: bool) -> tuple[float, bool, float]:
        """The episode ended (``terminated``, or cut at ``max_steps`` or by ``truncate()``): ``(score, won, extra
        reward of the last step)``; info keys for the last step may go in ``self._end_info``. Default: the return so
        far, not won, nothing extra."""
        return self._return, False, 0.0

    # -- the protocol -------------------------------------------------------------------------------
    def _info(self, *, valid: bool = True, won: bool = False, extra: dict | None = None) -> dict:
        info = {
            "task": self._task,
            "admissible_actions": None if self._admissible is None else list(self._admissible),
            "action_valid": valid,
            "won": won,
            "score": self._score,
            "state_key": self._key(self._observation),
        }
        if extra:
            info.update({k: v for k, v in extra.items() if k not in info})
        return info

    def _key(self, observation: str) -> str:
        if self._state_key is None:
            return observation
        return str(self._state_key(observation, self._native()))

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[str, dict]:
        self.steps_taken = 0
        self.seed = seed
        self._done = False
        self._started = True
        self._score = 0.0
        self._return = 0.0
        self._last_step = (True, {})
        self._observation = self._begin(seed, options)
        return self._observation, self._info()

    def step(self, action: str) -> tuple[str, float, bool, bool, dict]:
        if not getattr(self, "_started", True):
            raise EnvError(f"{self.name}: step() called before reset(); call reset(seed=...) first")
        if self._done:
            raise EnvError(f"{self.name}: step() called after the episode ended; call reset()")
        out = None
        if isinstance(action, str) and not action.startswith(INVALID_ACTION_PREFIX):
            out = self._act(action)
        if out is None:  # invalid or not text: the wrapped env never sees it
            out = Outcome(self._observation, valid=False)
        self.steps_taken += 1
        terminated = bool(out.terminated)
        truncated = not terminated and (bool(out.truncated) or self.steps_taken >= self.max_steps)
        self._observation = out.observation
        reward = float(out.reward)
        self._return += reward
        won, bonus = False, 0.0
        extra = dict(out.info)
        if terminated or truncated:
            won, bonus, ended = self._finish(terminated)
            extra.update(ended)
        self._last_step = (out.valid, extra)
        return out.observation, reward + bonus, terminated, truncated, self._info(valid=out.valid, won=won,
                                                                                  extra=extra)

    def truncate(self) -> tuple[float, dict]:
        """The run cut the episode after its last step (``rollout.max_steps`` below this env's ``max_steps``; the
        rollout engine calls this): end it as this adapter's own ``max_steps`` ends it, scored as it stands (the
        wrapped env is told the way its library tells it: verifiers 0.3 stops the rollout at a turn limit and its
        rubric scores it, a TRL env's ``get_reward()`` is called, a gymnasium episode is truncated, which calls
        nothing). Returns the extra reward of the last step (the score, for the adapters that give it there) and the
        last step's info with the ended episode's ``score`` and ``won``."""
        if not getattr(self, "_started", True):
            raise EnvError(f"{self.name}: truncate() called before reset(); call reset(seed=...) first")
        if self._done:
            raise EnvError(f"{self.name}: truncate() called after the episode ended; call reset()")
        won, bonus, ended = self._finish(False)
        valid, extra = self._last_step
        return bonus, self._info(valid=valid, won=won, extra={**extra, **ended})

    def _finish(self, terminated: bool) -> tuple[bool, float, dict]:
        """End the episode: ``_end``'s score, then ``(won, extra reward of the last step, info keys it adds)``."""
        self._done = True
        self._end_info = {}
        self._score, won, bonus = self._end(terminated)
        self._return += bonus
        return won, bonus, dict(self._end_info)

    def close(self) -> None:
        """Release what the wrapped env holds (a no-op unless the adapter overrides it)."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.spec!r})"

