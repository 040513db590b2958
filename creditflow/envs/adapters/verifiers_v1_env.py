"""verifiers 0.4 environments (``verifiers.v1``: a taskset, the agent that plays it through a harness, an
``Env`` that turns a task into an episode) as creditflow envs: ``--env verifiers:<taskset id>``, the id
``vf eval`` takes (an installed Environments Hub package, or a taskset that ships with verifiers)
(docs/env_adapters.md).

The adapter runs the environment's own episode (``Env.run_episode``: its ``setup``/``run``/``finalize``, the
agent's harness and runtime, verifiers' interception server, the task's ``@vf.reward`` functions and ``@vf.stop``
conditions, its limits) with creditflow's policy as the model. The model is an OpenAI-compatible endpoint
(``/chat/completions``, plain or streamed) that the adapter serves on 127.0.0.1 and hands to verifiers as the
rollout's client (``EvalClientConfig``: verifiers' own client for a provider, unchanged): every model call of
the rollout publishes its messages and waits for creditflow's action, so every ``step(action)`` answers one
model call, and the episode runs on until it calls the model again or ends.

Text: the task is the contents of the first model call's messages (system and user), the first observation is
empty, and later observations are the contents of the messages the next call adds after the model's answer (the
env's reply, a tool result). ``score`` is the episode's reward (the sum of its trace's weighted rewards), given as
the reward of the last step (every other step gives 0); ``won`` is False, so the run's ``env.success_threshold``
decides success.

``max_steps`` is the agent's ``max_turns`` (verifiers' own limit: it refuses the turn after it, and the episode is
scored as it stands); without either, 10. ``reset(seed=z)`` plays task ``z % len(taskset)`` (task ``z`` of an
infinite taskset). ``env_args`` are the taskset's config fields (``--env.taskset.*``), ``env_config`` the other
fields of the env's config (``--env.*``: its agent's ``runtime``, ``harness``, ``timeout``...). One loaded env
serves every adapter of the same options in a process (its ``serving()`` resources stay up until exit), and its
episodes run on the adapters' event loop in a daemon thread.

Not supported: environments with more than one agent (each would be a policy of its own), and tool calls from
the model (creditflow's action is text: a tool-calling harness gets an answer without tool calls).
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from typing import Any, Callable

from creditflow.envs.adapters.common import AdapterEnv, Outcome, import_package, messages_text, run_async
from creditflow.envs.base import EnvError

DEFAULT_MAX_STEPS = 10  # when neither max_steps nor the agent's max_turns is set
MODEL = "creditflow"  # the model name verifiers sees
API_KEY_VAR = "CREDITFLOW_VERIFIERS_API_KEY"  # read by verifiers' client; the endpoint needs no key

_SERVED: dict[str, "_Served"] = {}
_ENDPOINT: "_Endpoint | None" = None


# --------------------------------------------------------------------------------------------------
# the model: an OpenAI-compatible endpoint answered by creditflow's policy
# --------------------------------------------------------------------------------------------------


class _Turns:
    """One rollout's model calls: the endpoint publishes each call's messages and waits for the answer."""

    def __init__(self):
        self.asked = asyncio.Event()
        self.answer: asyncio.Future | None = None
        self.messages: list = []

    async def ask(self, messages: list) -> str:
        self.messages = list(messages)
        self.answer = asyncio.get_running_loop().create_future()
        self.asked.set()
        return await self.answer


class _Endpoint:
    """``POST /<key>/v1/chat/completions`` on 127.0.0.1 (a free port), on the adapters' event loop: ``<key>`` names
    the adapter whose rollout made the call."""

    def __init__(self):
        self.routes: dict[str, _Turns] = {}
        self.base_url = ""
        self._runner = None

    async def start(self) -> None:
        from aiohttp import web  # a verifiers dependency

        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_post("/{key}/v1/chat/completions", self._completion)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = self._runner.addresses[0][1]
        self.base_url = f"http://127.0.0.1:{port}"

    async def _completion(self, request):
        from aiohttp import web

        turns = self.routes.get(request.match_info["key"])
        if turns is None:
            return web.json_response({"error": {"message": "no creditflow rollout at this address"}}, status=404)
        body = await request.json()
        text = await turns.ask(body.get("messages") or [])
        ident, created = f"chatcmpl-creditflow-{uuid.uuid4().hex}", int(time.time())
        usage = {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}
        if not body.get("stream"):
            return web.json_response({
                "id": ident, "object": "chat.completion", "created": created, "model": body.get("model", MODEL),
                "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop",
                             "logprobs": None}],
                "usage": usage})
        # streamed (what verifiers' chat program asks for): the whole answer in one delta, then the end
        head = {"id": ident, "object": "chat.completion.chunk", "created": created,
                "model": body.get("model", MODEL)}
        chunks = [{**head, "choices": [{"index": 0, "delta": {"role": "assistant", "content": text},
                                        "finish_reason": None}]},
                  {**head, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}]
        if (body.get("stream_options") or {}).get("include_usage"):
            chunks.append({**head, "choices": [], "usage": usage})
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
        await response.prepare(request)
        for chunk in chunks:
            await response.write(f"data: {json.dumps(chunk)}\n\n".encode())
        await response.write(b"data: [DONE]\n\n")
        await response.write_eof()
        return response


async def _endpoint() -> _Endpoint:
    global _ENDPOINT
    if _ENDPOINT is None:
        endpoint = _Endpoint()
        await endpoint.start()
        _ENDPOINT = endpoint
    return _ENDPOINT


# --------------------------------------------------------------------------------------------------
# the loaded environment
# --------------------------------------------------------------------------------------------------


class _Served:
    """A loaded verifiers env, its tasks, and its ``serving()`` resources held open by a task on the loop."""

    def __init__(self, vf, env, role: str, name: str):
        self.vf, self.env, self.role, self.name = vf, env, role, name
        self.infinite = not env.taskset.bounded
        self._iter = iter(env.taskset) if self.infinite else None
        self.tasks: list = [] if self.infinite else list(env.taskset)
        if not self.infinite and not self.tasks:
            raise EnvError(f"env {name!r}: its taskset has no tasks")
        self._ready: asyncio.Future | None = None
        self.max_steps = DEFAULT_MAX_STEPS

    def task(self, seed: int):
        if not self.infinite:
            return self.tasks[seed % len(self.tasks)]
        while len(self.tasks) <= seed:
            self.tasks.append(next(self._iter))
        return self.tasks[seed]

    async def serving(self) -> None:
        """Bring the env's serving resources up once (shared tool servers, interception); they stay up until
        the adapters' loop stops at exit."""
        if self._ready is None:
            self._ready = asyncio.get_running_loop().create_future()
            self._holder = asyncio.ensure_future(self._hold())  # referenced: a pending task is not collected
        await asyncio.shield(self._ready)

    async def _hold(self) -> None:
        try:
            async with self.env.serving():
                self._ready.set_result(None)
                await asyncio.Event().wait()  # until cancelled at exit
        except BaseException as exc:  # noqa: BLE001 - a failed start is the adapter's one-line error
            if not self._ready.done():
                self._ready.set_exception(exc)
            if not isinstance(exc, Exception):
                raise


def _served(vf, spec: str, env_args: dict, env_config: dict, max_steps: int | None, name: str) -> _Served:
    key = json.dumps([spec, env_args, env_config, max_steps], sort_keys=True, default=repr)
    if key not in _SERVED:
        _SERVED[key] = _load(vf, spec, env_args, env_config, max_steps, name)
    return _SERVED[key]


def _load(vf, spec: str, env_args: dict, env_config: dict, max_steps: int | None, name: str) -> _Served:
    from verifiers.v1.configs.agent import agent_config_fields

    data = {**env_config, "taskset": {**dict(env_config.get("taskset") or {}), **env_args, "id": spec}}
    try:
        config = vf.resolve_env_config(data)
        roles = agent_config_fields(config)
        if len(roles) != 1:
            raise EnvError(f"env {name!r}: its episodes have {len(roles)} agents ({', '.join(roles)}); creditflow's "
                           "policy plays environments with one agent")
        (role, agent), = roles.items()
        turns = agent.max_turns if isinstance(agent.max_turns, int) and agent.max_turns > 0 else DEFAULT_MAX_STEPS
        limit = max_steps if max_steps is not None else turns
        # verifiers' own limit ends the rollout at creditflow's, and the episode is scored as it stands
        config = config.model_copy(update={role: agent.model_copy(update={"max_turns": limit})})
        env = vf.load_environment(config)
    except EnvError:
        raise
    except Exception as exc:  # noqa: BLE001 - an unknown id, a bad config field: one line
        last = [line for line in f"{type(exc).__name__}: {exc}".splitlines() if line.strip()]
        raise EnvError(f"env {name!r}: verifiers could not load it: {last[0] if last else type(exc).__name__}") \
            from None
    served = _Served(vf, env, role, name)
    served.max_steps = limit
    return served


class VerifiersV1Env(AdapterEnv):
    """verifiers 0.4 environments (taskset + agent + Env), one model call per step (module docstring)."""

    adapter = "verifiers"
    example = "<taskset id of an installed verifiers 0.4 environment>"

    def __init__(self, spec: str, env_args: dict | None = None, env_config: dict | None = None,
                 state_key: str | Callable[..., object] | None = None, max_steps: int | None = None):
        super().__init__(spec, state_key=state_key)
        vf = import_package("verifiers.v1", self.name, "verifiers")
        if max_steps is not None:
            self._set_max_steps(max_steps)
        self._served = _served(vf, spec, dict(env_args or {}), dict(env_config or {}), max_steps, self.name)
        self._set_max_steps(self._served.max_steps)
        self.description = f"the verifiers 0.4 environment {spec}"
        self._route = uuid.uuid4().hex
        self._turns: _Turns | None = None
        self._episode: asyncio.Future | None = None
        self._result = None

    # -- the episode on the event loop ------------------------------------------------------------------
    async def _start(self, task) -> None:
        endpoint = await _endpoint()
        await self._served.serving()
        self._turns = endpoint.routes[self._route] = _Turns()
        vf = self._served.vf
        client = vf.EvalClientConfig(base_url=f"{endpoint.base_url}/{self._route}/v1", api_key_var=API_KEY_VAR)
        ctx = vf.ModelContext(model=MODEL, client=client)
        self._episode = asyncio.ensure_future(self._served.env.run_episode(task, ctx))

    async def _next_turn(self) -> None:
        """Run the episode until it calls the model again or ends."""
        asked = asyncio.ensure_future(self._turns.asked.wait())
        await asyncio.wait({self._episode, asked}, return_when=asyncio.FIRST_COMPLETED)
        if not asked.done():
            asked.cancel()
        self._turns.asked.clear()

    async def _answer(self, action: str) -> None:
        self._turns.answer.set_result(action)
        await self._next_turn()

    async def _cancel(self) -> None:
        episode = self._episode
        if episode is not None and not episode.done():
            episode.cancel()
            try:
                await episode
            except asyncio.CancelledError:
                pass

    def _finished(self) -> bool:
        return self._episode is not None and self._episode.done()

    def _outcome(self) -> tuple[float, dict]:
        """The ended episode's reward and what to report of it."""
        try:
            episode = self._episode.result()
        except Exception as exc:  # noqa: BLE001 - the episode itself raised: one line
            raise EnvError(f"env {self.name!r}: the episode failed: {type(exc).__name__}: {exc}") from None
        self._result = episode
        traces = list(episode.traces)
        if len(traces) > 1:
            raise EnvError(f"env {self.name!r}: its episode has {len(traces)} traces (several runs of its agent); "
                           "creditflow scores one")
        info: dict = {"stop_condition": traces[0].stop_condition if traces else None}
        errors = [f"{e.type}: {e.message}" for e in [*episode.errors, *(traces[0].errors if traces else [])]]
        if errors:
            info["errors"] = errors
        return (float(traces[0].reward) if traces else 0.0), info

    # -- AdapterEnv ---------------------------------------------------------------------------------------
    def _native(self):
        return self._result if self._finished() else (self._turns.messages if self._turns else None)

    def _begin(self, seed, options) -> str:
        self.close()
        self._result = None
        row = (seed or 0)
        run_async(self._start(self._served.task(row)))
        run_async(self._next_turn())
        if self._finished():  # ended before its first model call
            score, info = self._outcome()
            raise EnvError(f"env {self.name!r}: the episode of task {row} ended before its first model call "
                           f"({info.get('stop_condition')}; {'; '.join(info.get('errors', [])) or 'no error'})")
        self._task = messages_text(self._turns.messages)
        return ""

    def _act(self, action: str) -> Outcome:
        shown = len(self._turns.messages) + 1  # the messages the model saw, and its answer
        run_async(self._answer(action))
        if self._finished():
            self._final, info = self._outcome()
            return Outcome("", terminated=True, info=info)
        messages = self._turns.messages
        return Outcome(messages_text(messages[shown:] if len(messages) >= shown else messages))

    def _end(self, terminated: bool) -> tuple[float, bool, float]:
        if terminated:
            score = self._final
        else:  # cut at max_steps with the episode still running (a new run of its agent): stop it, reward 0
            run_async(self._cancel())
            score = 0.0
        self._forget()
        return score, False, score

    def _forget(self) -> None:
        if _ENDPOINT is not None:
            _ENDPOINT.routes.pop(self._route, None)
        self._episode = None

    def close(self) -> None:
        if self._episode is not None:
            run_async(self._cancel())
        self._forget()


__all__ = ["VerifiersV1Env"]
