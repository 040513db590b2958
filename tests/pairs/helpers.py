"""Scripted envs and policies for the process (RRO) tests: no model, exact numbers."""

from __future__ import annotations

import functools

from creditflow.envs import make
from creditflow.envs.base import BaseTextEnv
from creditflow.policy.backends.base import Generation, SamplingParams
from creditflow.policy.prompts import PromptBuilder
from creditflow.rollout.engine import EpisodeRules, RolloutEngine

SOKOBAN = functools.partial(make, "sokoban", max_steps=6)  # picklable (Ray workers build their own)


class LineEnv(BaseTextEnv):
    """Three steps of 'a', 'b' or 'c'; graded final score = (#a)/3; no snapshot (replay path)."""

    name = "line"

    def __init__(self, length: int = 3):
        super().__init__(max_steps=100)
        self.length = length

    def _info(self, valid=True):
        return {"task": "say a", "admissible_actions": ["a", "b", "c"], "action_valid": valid,
                "won": self.count == self.length, "score": self.count / self.length,
                "state_key": f"{self.t}/{self.count}"}

    def _reset(self, seed, options):
        self.t, self.count = 0, 0
        return f"t=0 a=0", self._info()

    def _step(self, action):
        valid = action in ("a", "b", "c")
        self.t += 1
        self.count += action == "a"
        return f"t={self.t} a={self.count}", 0.0, self.t >= self.length, self._info(valid)


def gen(text: str) -> Generation:
    return Generation(text=text, token_ids=[1] * (1 + len(text) % 3), logprobs=[-0.5] * (1 + len(text) % 3))


def act(a: str) -> str:
    return f"<think></think><action>{a}</action>"


class ScriptedBackend:
    """``responder(call_index, position_in_batch, prompt_ids) -> text``; records batch sizes."""

    def __init__(self, responder):
        self.responder = responder
        self.calls: list[int] = []

    def generate(self, prompts, params):
        call = len(self.calls)
        self.calls.append(len(prompts))
        return [gen(self.responder(call, j, p)) for j, p in enumerate(prompts)]


class QueueBackend:
    """Answers prompts with the next texts of a fixed script (candidate proposals in order)."""

    def __init__(self, texts: list[str]):
        self.texts = list(texts)
        self.prompts: list[list[int]] = []

    def generate(self, prompts, params):
        self.prompts.extend(prompts)
        return [gen(self.texts.pop(0)) for _ in prompts]


class RandomPolicyBackend:
    """A stochastic policy without a model: uniform over moves plus an invalid answer, drawn from torch's
    global RNG (like HF sampling), so seeding makes it reproducible."""

    CHOICES = ["up", "down", "left", "right", None]

    def generate(self, prompts, params):
        import torch

        out = []
        for _ in prompts:
            k = int(torch.randint(0, len(self.CHOICES), (1,)).item())
            a = self.CHOICES[k]
            out.append(gen(act(a) if a else "I am not sure"))
        return out


def encode(messages):
    return list(messages[0]["content"].encode())


def engine(backend, factory, executor=None, max_steps=None) -> RolloutEngine:
    return RolloutEngine(backend, encode, factory, PromptBuilder("a test env"), SamplingParams(),
                         EpisodeRules(max_steps=max_steps), env_executor=executor)
