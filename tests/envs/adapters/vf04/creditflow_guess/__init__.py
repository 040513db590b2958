"""A verifiers 0.4 environment for the adapter tests, written with verifiers' own classes and run offline:
guess the number. Laid out as an Environments Hub package is (a top-level module named by its taskset id,
``creditflow-guess``, exporting its Taskset, its Harness and its Env through ``__all__``); the tests put its folder
on ``sys.path`` as installing it would.

- ``GuessTaskset``: three tasks (answers 3, 4, 5), each prompting for a number from 1 to 9.
- ``GuessTask``: the reward ``solved_fast`` (1 / the number of guesses when the last one is right; ``@vf.reward``)
  and the stop condition ``said_quit`` (``@vf.stop``: a reply of "quit" ends the rollout).
- ``GuessEnv``: the rollout loop, an ``Env`` that answers each guess with "higher" or "lower" through the agent's
  interaction, and ends the exchange when the guess is right.
- ``ChatHarness``: the agent's program, in-process (a ``Harness`` may run its loop in-process as long as every
  model call goes through the rollout's interception endpoint): one chat completion per segment (streamed, or
  whole with ``stream=false``) with the ``openai`` SDK, as verifiers' own chat program (the ``null`` harness) does in a subprocess that ``uv``
  provisions from the network. The agent runs in the ``subprocess`` runtime (a local working directory).
"""

from __future__ import annotations

__all__ = ["ChatHarness", "GuessEnv", "GuessTaskset"]  # first: verifiers reads it while resolving ids

import openai

import verifiers.v1 as vf
from verifiers.v1.dialects.chat import message_to_wire


class GuessData(vf.TaskData):
    info: dict


class GuessTask(vf.Task[GuessData]):
    @vf.reward(weight=1.0)
    async def solved_fast(self, trace: vf.Trace) -> float:
        replies = [(m.content or "").strip() for m in trace.assistant_messages]
        return 1.0 / len(replies) if replies and replies[-1] == self.data.info["answer"] else 0.0

    @vf.stop
    async def said_quit(self, trace: vf.Trace) -> bool:
        replies = trace.assistant_messages
        return bool(replies) and (replies[-1].content or "").strip() == "quit"


class GuessConfig(vf.TasksetConfig):
    tasks: int = 3
    """How many tasks (answers 3, 4, ...)."""


class GuessTaskset(vf.Taskset[GuessTask, GuessConfig]):
    def load(self):
        for i in range(self.config.tasks):
            yield GuessTask(GuessData(idx=i, name=f"guess#{i}", prompt=f"Guess my number from 1 to 9 (try {i}).",
                                      system_prompt="Answer with one number.", info={"answer": str(3 + i)}),
                            self.config.task)


class ChatHarnessConfig(vf.HarnessConfig):
    id: str = "creditflow-guess"
    stream: bool = True
    """Stream the completion (as verifiers' chat program does), or ask for it whole."""


class ChatHarness(vf.Harness[ChatHarnessConfig]):
    """One streamed chat completion per segment, through the interception endpoint (module docstring)."""

    APPENDS_SYSTEM_PROMPT = True
    SUPPORTS_RESUME = True
    EXECUTES_CODE = False
    NEEDS_CONTAINER = False

    async def launch(self, ctx, trace, runtime, endpoint, secret, mcp_urls, data, tool_interception_url=None):
        system, prompt = self.resolve_prompt(data)
        messages = [{"role": "system", "content": system}] if system else []
        if isinstance(prompt, str):
            messages.append({"role": "user", "content": prompt})
        elif prompt is not None:
            messages += [message_to_wire(m) for m in prompt]
        client = openai.AsyncOpenAI(base_url=endpoint, api_key=secret, max_retries=0)
        try:
            if self.config.stream:
                stream = await client.chat.completions.create(model=ctx.model, messages=messages, stream=True,
                                                              stream_options={"include_usage": True})
                async for _ in stream:
                    pass
            else:
                await client.chat.completions.create(model=ctx.model, messages=messages)
        except openai.APIError as exc:  # a refused turn (a limit, a @stop): the run ends
            return vf.ProgramResult(exit_code=1, stdout="", stderr=str(exc))
        finally:
            await client.close()
        return vf.ProgramResult(exit_code=0, stdout="", stderr="")


class GuessEnvConfig(vf.EnvConfig):
    agent: vf.AgentConfig = vf.AgentConfig(runtime={"type": "subprocess"})


class GuessEnv(vf.Env[GuessEnvConfig]):
    """The rollout loop: the agent answers the task, the env says higher or lower until the guess is right."""

    async def run(self, task, agents):
        answer = task.data.info["answer"]
        async with agents.agent.interaction(task) as chat:
            segment = await chat.turn()
            while not segment.terminated and segment.last_reply != answer:
                guess = segment.last_reply
                segment = await chat.turn("higher" if guess.isdigit() and int(guess) < int(answer) else "lower")
