"""The generation backend interface: token-id prompts in, sampled responses with log-probs out."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol


@dataclass
class SamplingParams:
    max_new_tokens: int = 32
    temperature: float = 1.0  # 0 => greedy
    top_p: float = 1.0
    stop_token_ids: list[int] = field(default_factory=list)  # extra stops besides eos


@dataclass
class Generation:
    text: str
    token_ids: list[int]
    logprobs: list[float]  # log pi(token | context) under the policy's own (temperature 1) distribution


class Backend(Protocol):
    def generate(self, prompts: list[list[int]], params: SamplingParams) -> list[Generation]: ...


class TrainableBackend(Backend, Protocol):
    """A backend that RL training can use: it follows the policy's weights after every update."""

    def sync_weights(self, model) -> None: ...
