"""Prime Intellect ``verifiers`` environments as creditflow envs: ``--env verifiers:<env id>`` (an installed
Environments Hub package, loaded by ``verifiers.load_environment``) or ``verifiers:<module>:<name>`` (an
``Environment``, or a function / class that returns one) (docs/env_adapters.md).

The adapter runs the environment's own rollout (``Environment.rollout``: ``setup_state``, its stop conditions,
``env_response`` between turns, ``final_env_response``, its timeout, the cleanup handlers) with creditflow's
policy as the model. The model is a ``verifiers`` ``Client`` (the library's own seam for model providers) whose
``get_response`` hands the prompt to creditflow and waits for the action: every ``step(action)`` answers one model
call with the action as the assistant message, and the rollout runs on until it asks the model again or ends.
At the end the environment's rubric scores the rollout (``rubric.score_rollout``, then ``rubric.cleanup``).

Text: the task is the contents of the rollout's first prompt (system and user messages), the first observation
is empty, and later observations are the contents of the messages ``env_response`` added (and, at the end, of the
``final_env_response``). ``score`` is the rubric's reward, given as the reward of the last step (every other step
gives 0); ``won`` is False, so the run's ``env.success_threshold`` decides success. An episode cut at
``max_steps``, or by the run's ``rollout.max_steps`` (``truncate()``), is cancelled (its cleanup handlers run),
marked as verifiers marks a rollout its own ``max_turns`` stopped (``is_completed``, stop condition
``max_turns_reached``) and scored as it stands.

``reset(seed=z)`` plays row ``z % len(dataset)`` of the environment's dataset (``split="test"``: its eval dataset,
which verifiers replaces by the train dataset when there is none). The loaded environment is shared by every
adapter of the same spec and ``env_args`` in a process (verifiers runs many rollouts on one environment object,
each with its own state), and every rollout runs on one event loop in a daemon thread, so the adapter also works
where an event loop is already running (a notebook).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import threading
import time
import uuid
from typing import Any, Callable, Literal

from creditflow.envs.adapters.common import (AdapterEnv, Outcome, import_package, load_object, messages_text,
                                             run_async)
from creditflow.envs.base import EnvError

DEFAULT_MAX_STEPS = 10  # when the environment sets no max_turns

_ENVS: dict[str, Any] = {}  # (spec, env_args) -> the loaded verifiers Environment
_CLIENT_CLASS: type | None = None


def _client_class(vf) -> type:
    """A ``verifiers`` ``Client`` whose model is creditflow's policy (defined once verifiers is imported)."""
    global _CLIENT_CLASS
    if _CLIENT_CLASS is not None:
        return _CLIENT_CLASS

    class PolicyClient(vf.Client):
        """Each model call publishes its prompt (and the rollout's state) and waits for ``answer``."""

        def __init__(self):
            super().__init__(None)
            self.asked = asyncio.Event()
            self.answer: asyncio.Future | None = None
            self.prompt: list = []
            self.state = None

        def setup_client(self, config):  # no provider behind this client
            return None

        async def to_native_tool(self, tool):
            return tool

        async def to_native_prompt(self, messages):
            return messages, {}

        async def get_native_response(self, prompt, model, sampling_args, tools=None, **kwargs):
            self.prompt, self.state = list(prompt), kwargs.get("state", self.state)
            self.answer = asyncio.get_running_loop().create_future()
            self.asked.set()
            return await self.answer

        async def raise_from_native_response(self, response):
            return None

        async def from_native_response(self, response):
            return response

        async def close(self):
            return None

    _CLIENT_CLASS = PolicyClient
    return PolicyClient


def _load_environment(vf, spec: str, env_args: dict, name: str):
    key = json.dumps([spec, env_args], sort_keys=True, default=repr)
    if key in _ENVS:
        return _ENVS[key]
    # A verifiers Environment installs SIGINT/SIGTERM handlers when it is built (its teardown, then exit 143 on
    # SIGTERM); the process keeps its own (creditflow's: stop the run and say what was saved). The teardown still
    # runs at exit: verifiers registers it with atexit too.
    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        with _quiet_datasets(), vf.log_level("CRITICAL"):  # a load error is our one line, not its log too
            env = _build_environment(vf, spec, env_args, name)
    finally:
        if threading.current_thread() is threading.main_thread():
            for sig, handler in handlers.items():
                if handler is not None:
                    signal.signal(sig, handler)
    _ENVS[key] = env
    return env


@contextlib.contextmanager
def _quiet_datasets():
    """No progress bars while verifiers formats its datasets (``datasets.map`` over a few rows)."""
    try:
        import datasets as bars  # a verifiers dependency
    except ImportError:
        yield
        return
    was_disabled = bars.are_progress_bars_disabled()
    bars.disable_progress_bars()
    try:
        yield
    finally:
        if not was_disabled:
            bars.enable_progress_bars()


def _build_environment(vf, spec: str, env_args: dict, name: str):
    _, sep, attr = spec.partition(":")
    if sep:
        target = load_object(spec, f"env {name!r}")
        if not isinstance(target, vf.Environment) and not callable(target):
            raise EnvError(f"env {name!r}: {spec} is not an Environment, nor a function or class that returns one")
        try:
            env = target if isinstance(target, vf.Environment) else target(**env_args)
        except (TypeError, ValueError, KeyError) as exc:
            raise EnvError(f"env {name!r}: {spec} raised {type(exc).__name__}: {exc}") from None
    else:
        try:
            env = vf.load_environment(spec, **env_args)
        except (ValueError, RuntimeError) as exc:
            cause = exc.__cause__
            raise EnvError(f"env {name!r}: {exc}" + (f" ({type(cause).__name__}: {cause})" if cause else "")) \
                from None
    if not isinstance(env, vf.Environment):
        raise EnvError(f"env {name!r}: {spec} gave a {type(env).__name__}, not a verifiers Environment")
    if env.requires_group_rollouts:
        raise EnvError(f"env {name!r}: its rubric has group reward functions, which score a group of rollouts "
                       "together; creditflow scores each episode on its own")
    return env


class VerifiersEnv(AdapterEnv):
    """verifiers environments (MultiTurnEnv: env_response/is_completed, rubric reward), run step by step."""

    adapter = "verifiers"
    example = "<installed environment id, or module:load_environment>"

    def __init__(self, spec: str, env_args: dict | None = None, split: Literal["train", "test"] = "train",
                 state_key: str | Callable[..., object] | None = None, max_steps: int | None = None):
        super().__init__(spec, state_key=state_key)
        vf = import_package("verifiers", self.name, "verifiers")
        if split not in ("train", "test"):
            raise EnvError(f"env {self.name!r}: split must be 'train' or 'test', got {split!r}")
        self._vf = vf
        self._env = _load_environment(vf, spec, dict(env_args or {}), self.name)
        self._rows = self._dataset(split)
        turns = getattr(self._env, "max_turns", -1)
        self._set_max_steps(max_steps if max_steps is not None else
                            (turns if isinstance(turns, int) and turns > 0 else DEFAULT_MAX_STEPS))
        self.description = f"the verifiers environment {spec}"
        self._client = None
        self._task_future: asyncio.Future | None = None
        self._rollout_state = None

    def _dataset(self, split: str) -> list[dict]:
        cache = self._env.__dict__.setdefault("_creditflow_rows", {})
        if split not in cache:
            try:
                with _quiet_datasets():
                    data = self._env.get_dataset() if split == "train" else self._env.get_eval_dataset()
            except ValueError as exc:
                raise EnvError(f"env {self.name!r}: no {split} dataset ({exc})") from None
            cache[split] = data.to_list()
            if not cache[split]:
                raise EnvError(f"env {self.name!r}: its {split} dataset is empty")
        return cache[split]

    # -- the rollout on the event loop ----------------------------------------------------------------
    async def _start(self, row: dict) -> None:
        self._client = _client_class(self._vf)()
        sampling = dict(getattr(self._env, "sampling_args", None) or {})
        self._task_future = asyncio.ensure_future(self._env.rollout(row, self._client, "creditflow", sampling))

    async def _next_turn(self) -> None:
        """Run the rollout until it asks the model again or ends."""
        asked = asyncio.ensure_future(self._client.asked.wait())
        await asyncio.wait({self._task_future, asked}, return_when=asyncio.FIRST_COMPLETED)
        if not asked.done():
            asked.cancel()
        self._client.asked.clear()

    async def _answer(self, action: str) -> None:
        message = self._vf.types.ResponseMessage(role="assistant", content=action, finish_reason="stop",
                                                 is_truncated=False)
        self._client.answer.set_result(self._vf.types.Response(
            id=f"creditflow-{uuid.uuid4().hex}", created=int(time.time()), model="creditflow", message=message))
        await self._next_turn()

    async def _cancel(self):
        task = self._task_future
        if task is not None and not task.done():
            task.cancel()
            try:
                await task
            except asyncio.CancelledError:
                pass

    async def _rubric_score(self, state) -> float:
        await self._env.rubric.score_rollout(state)
        await self._env.rubric.cleanup(state)
        return float(state.get("reward") or 0.0)

    def _finished(self) -> bool:
        return self._task_future is not None and self._task_future.done()

    # -- AdapterEnv ---------------------------------------------------------------------------------
    def _native(self):
        return self._rollout_state

    def _begin(self, seed, options) -> str:
        self.close()
        row = dict(self._rows[(seed or 0) % len(self._rows)])
        run_async(self._start(row))
        run_async(self._next_turn())
        if self._finished():  # ended before the first model call (an error in setup_state)
            self._rollout_state = self._task_future.result()
            self._task = messages_text(self._rollout_state.get("prompt"))
            raise EnvError(f"env {self.name!r}: the rollout of row {(seed or 0) % len(self._rows)} ended before its "
                           f"first turn ({self._rollout_state.get('stop_condition')}: "
                           f"{self._rollout_state.get('error')})")
        self._rollout_state = self._client.state
        self._task = messages_text(self._client.prompt)
        return ""

    def _act(self, action: str) -> Outcome:
        shown = len(self._client.prompt) + 1  # the prompt the model saw, and its answer
        run_async(self._answer(action))
        if self._finished():
            self._rollout_state = self._task_future.result()
            final = self._rollout_state.get("final_env_response")
            return Outcome(messages_text(final) if final else "", terminated=True,
                           info={"stop_condition": self._rollout_state.get("stop_condition")})
        self._rollout_state = self._client.state
        prompt = self._client.prompt
        return Outcome(messages_text(prompt[shown:] if len(prompt) >= shown else prompt))

    def _end(self, terminated: bool) -> tuple[float, bool, float]:
        state = self._rollout_state
        if not terminated:  # cut at a turn limit (max_steps, or the run's rollout.max_steps through truncate()):
            run_async(self._cancel())  # stop the rollout where it is (its cleanup runs), end it as verifiers ends
            if state is not None:  # one at its max_turns, then score it
                state["is_completed"] = True
                state["stop_condition"] = "max_turns_reached"
            self._end_info = {"stop_condition": "max_turns_reached"}
        self._task_future = None
        score = run_async(self._rubric_score(state)) if state is not None else 0.0
        return score, False, score

    def close(self) -> None:
        if self._task_future is not None:
            run_async(self._cancel())
            self._task_future = None
