"""TRL ``environment_factory`` classes as creditflow envs: ``--env trl:<module>:<Class>`` (docs/env_adapters.md).

Such a class is what ``trl.GRPOTrainer(environment_factory=...)`` takes (TRL 1.x): ``reset(**row)`` starts an
episode from a dataset row and may return text that is appended to the prompt; every other public method is a
tool the model may call (typed arguments, a docstring); ``get_reward()`` scores the episode from the env's own
state. TRL's rollout lets the model call tools until it answers without a tool call; here every tool call is one
step:

* an action ``name(arg=value, ...)`` (Python call syntax, literal values; positional arguments bind in order) or
  the JSON object ``{"name": ..., "arguments": {...}}`` (the shape of a parsed tool call) calls the tool; the
  observation is its result as text (``str(result)``, as TRL puts it in the tool message). A call TRL would
  answer with an error (an unknown tool, arguments that do not bind, a tool that raises) observes TRL's
  ``{'error': '...'}`` text and is an invalid action; like TRL, the episode goes on;
* any other action is the final answer: the episode ends and ``get_reward()`` is its ``score`` and the reward of
  that last step (every tool step gives 0). An episode cut at ``max_steps`` (TRL's
  ``max_tool_calling_iterations``) is scored the same way. ``won`` is the class's ``success`` (an attribute, a
  property or a method) when it has one; without it ``won`` is False and the run's ``env.success_threshold``
  decides success.

What creditflow reads from the class (:data:`CREDITFLOW_READS`) is never a tool, here as in
``creditflow.integrations.trl.CreditGRPOTrainer``, so one class behaves the same through both routes (docs/trl.md):
``state_key()`` is each state's key (unless the ``state_key`` option gives a function; without either, the
observation text), ``success`` the outcome, and ``expert_actions()`` (a list of tool calls that solves the current
task) the demonstrations of ``creditflow sft``.

``data`` (a ``.parquet``, ``.json`` or ``.jsonl`` file of rows) gives the tasks: ``reset(seed=z)`` calls
``reset(**row)`` with row ``z % len(rows)``, as TRL passes every column; the row's ``prompt`` (text or chat
messages) is the task. Without ``data``, ``reset()`` gets no row (the env makes its own task), and ``seed=z``
when its ``reset`` takes a ``seed`` argument. The task shown to the policy ends with the tools, one line each:
the signature and the first line of the docstring, and how to call them. TRL's chat template renders the same
facts as a tool schema; creditflow's prompts are text, so they are written out.
"""

from __future__ import annotations

import ast
import inspect
import json
from typing import Any, Callable

from creditflow.envs.adapters.common import (AdapterEnv, Outcome, load_object, load_rows, messages_text,
                                             run_async)
from creditflow.envs.base import EnvError

DEFAULT_MAX_STEPS = 10
# members creditflow reads from an environment_factory class, never tools: the state s_t, the outcome, the expert
CREDITFLOW_READS = ("state_key", "success", "expert_actions")
_NOT_TOOLS = ("reset", "get_reward", *CREDITFLOW_READS)  # TRL exposes neither reset nor get_reward as a tool


class TRLEnv(AdapterEnv):
    """TRL environment_factory classes (reset, tool methods as actions, get_reward as the score)."""

    adapter = "trl"
    example = "mypkg.envs:MyToolEnv"

    def __init__(self, spec: str, data: str | None = None, state_key: str | Callable[..., object] | None = None,
                 max_steps: int = DEFAULT_MAX_STEPS):
        super().__init__(spec, state_key=state_key)
        self._set_max_steps(max_steps)
        factory = load_object(spec, f"env {self.name!r}")
        if not callable(factory):
            raise EnvError(f"env {self.name!r}: {spec} is not a class or factory")
        try:
            self._env = factory()  # TRL builds an instance with no arguments and reuses it (reset between rollouts)
        except TypeError as exc:
            raise EnvError(f"env {self.name!r}: {spec}() failed: {exc}") from None
        cls = type(self._env)
        if not callable(getattr(self._env, "reset", None)):
            raise EnvError(f"env {self.name!r}: {cls.__name__} has no reset method (TRL needs one)")
        if not callable(getattr(self._env, "get_reward", None)):
            raise EnvError(f"env {self.name!r}: {cls.__name__} has no get_reward method; creditflow takes the "
                           "episode's score from the env (TRL's separate reward_funcs are not carried over)")
        # TRL's rule: the functions defined on the class (not properties), public, except reset and get_reward;
        # and not what creditflow reads (the trainer hides the same from TRL's tool list)
        self._tools = {name: getattr(self._env, name)
                       for name, _ in inspect.getmembers(cls, predicate=inspect.isfunction)
                       if not name.startswith("_") and name not in _NOT_TOOLS}
        self._rows = load_rows(data, f"env {self.name!r}: data") if data is not None else None
        self._reset_takes_seed = "seed" in inspect.signature(self._env.reset).parameters
        self.description = f"the TRL environment {cls.__name__}"
        self._has_key = callable(getattr(self._env, "state_key", None))
        if callable(getattr(self._env, "expert_actions", None)):
            self.expert_actions = self._expert_actions
        self._tool_text = _tools_text(self._tools)

    # -- AdapterEnv ---------------------------------------------------------------------------------
    def _native(self):
        return self._env

    def _begin(self, seed, options) -> str:
        if self._rows is not None:
            row = dict(self._rows[(seed or 0) % len(self._rows)])
            prompt = messages_text(row.get("prompt"))
            shown = self._env.reset(**row)
        else:
            row = {}
            prompt = ""
            shown = self._env.reset(seed=seed) if self._reset_takes_seed else self._env.reset()
        self._task = "\n\n".join(part for part in (prompt, self._tool_text) if part)
        self._chat = _trl_prompt(row.get("prompt"), shown)
        return "" if shown is None else messages_text(shown)

    def tool_prompt(self) -> list[dict]:
        """The chat TRL's GRPOTrainer shows the model for the current episode: the row's ``prompt`` messages (an
        empty user message without ``data``, as TRL's placeholder rows) with ``reset()``'s text appended to the
        last message's content. ``creditflow sft --tools`` starts its demonstrations with it."""
        return [dict(m) for m in self._chat]

    def _act(self, action: str) -> Outcome:
        call = parse_tool_call(action)
        if call is None:  # no tool call: the final answer
            return Outcome("", terminated=True)
        name, args, kwargs = call
        tool = self._tools.get(name)
        try:
            if tool is None:
                raise ValueError(f"Tool {name} not found.")
            result = tool(*args, **kwargs)
            if inspect.isawaitable(result):  # an async tool (TRL runs those on its own event loop)
                result = run_async(result)
        except Exception as exc:  # noqa: BLE001 - TRL turns a failed call into an error the model sees
            return Outcome(str({"error": str(exc)}), valid=False)
        return Outcome(str(result))

    def _end(self, terminated: bool) -> tuple[float, bool, float]:
        reward = self._env.get_reward()
        if inspect.isawaitable(reward):  # an async get_reward (e.g. an LLM judge)
            reward = run_async(reward)
        score = float(reward)
        return score, outcome_of(self._env), score

    def _key(self, observation: str) -> str:
        """The state key: the ``state_key`` option's function, else the class's ``state_key()`` (as
        CreditGRPOTrainer reads it), else the observation."""
        if self._state_key is None and self._has_key:
            key = self._env.state_key()
            if key is None:
                raise EnvError(f"env {self.name!r}: {type(self._env).__name__}.state_key() returned None; every "
                               "state needs a key")
            return str(key)
        return super()._key(observation)

    def _expert_actions(self) -> list[str]:
        """The class's ``expert_actions()`` as actions of this env: a call written as text stays as it is, a
        ``{"name": ..., "arguments": {...}}`` object becomes its JSON text."""
        plan = self._env.expert_actions()
        return [a if isinstance(a, str) else json.dumps(a) for a in (plan or [])]


def outcome_of(env) -> bool:
    """An environment_factory instance's ``success`` (an attribute, a property or a method); False without one
    (then a success threshold decides)."""
    value = getattr(env, "success", False)
    return bool(value() if callable(value) else value)


def _trl_prompt(prompt: Any, shown: Any) -> list[dict]:
    """TRL's prompt of an environment_factory episode: the prompt as chat messages, ``reset()``'s text appended to
    the last message (``GRPOTrainer._generate``)."""
    if isinstance(prompt, list) and prompt and all(isinstance(m, dict) for m in prompt):
        messages = [dict(m) for m in prompt]
    else:
        messages = [{"role": "user", "content": "" if prompt is None else messages_text(prompt)}]
    if shown is not None:
        last = messages[-1]
        messages[-1] = {**last, "content": messages_text(last.get("content")) + messages_text(shown)}
    return messages


def parse_tool_call(action: str) -> tuple[str, list, dict] | None:
    """``(name, args, kwargs)`` of a tool call written as ``name(...)`` (literal arguments) or as the JSON object
    ``{"name": ..., "arguments": {...}}``; None for any other text (a final answer)."""
    text = action.strip()
    if text.startswith("{"):
        try:
            value = json.loads(text)
        except json.JSONDecodeError:
            return None
        if isinstance(value, dict) and isinstance(value.get("name"), str) and \
                isinstance(value.get("arguments", {}), dict):
            return value["name"], [], dict(value.get("arguments", {}))
        return None
    try:
        node = ast.parse(text, mode="eval").body
        if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Name) or \
                any(k.arg is None for k in node.keywords) or any(isinstance(a, ast.Starred) for a in node.args):
            return None
        args = [ast.literal_eval(a) for a in node.args]
        kwargs = {k.arg: ast.literal_eval(k.value) for k in node.keywords}
    except (SyntaxError, ValueError, TypeError, RecursionError, MemoryError):  # not a call of literals
        return None
    return node.func.id, args, kwargs


def _tools_text(tools: dict[str, Any]) -> str:
    if not tools:
        return "Answer directly; there are no tools."
    lines = ["Tools (call one per step as name(arg=value, ...); an answer without a tool call ends the task):"]
    for name, fn in tools.items():
        doc = (inspect.getdoc(fn) or "").strip().splitlines()
        lines.append(f"- {name}{_signature(fn)}" + (f": {doc[0]}" if doc else ""))
    return "\n".join(lines)


def _signature(fn) -> str:
    params = []
    for p in inspect.signature(fn).parameters.values():
        text = p.name
        if p.annotation is not inspect.Parameter.empty:  # a string under `from __future__ import annotations`
            hint = p.annotation
            text += f": {hint if isinstance(hint, str) else getattr(hint, '__name__', hint)}"
        if p.default is not inspect.Parameter.empty:
            text += f" = {p.default!r}"
        params.append(text)
    return f"({', '.join(params)})"
