"""The policy's parts its config section builds (``policy``, and ``rollout``'s prompt layout): the prompt builder
on an env and the tiny default policy (its vocabulary size and its build from a corpus, with the env's tokenizer
hints). Which process builds it, and from which expert text, is the SFT recipe's (``creditflow.recipes.sft``):
this layer knows nothing of processes or rollouts. The settings saved beside a model complete the run config
where it is resolved (``creditflow.recipes.resolve``)."""

from __future__ import annotations

from pathlib import Path
from typing import Iterable

from creditflow.config import PolicyConfig, RolloutConfig
from creditflow.policy.tiny import build_tiny_policy
from creditflow.policy.prompts import PromptBuilder, environment_description

TINY_CORPUS_SEEDS = range(900_000, 900_400)
"""The expert episodes whose prompts and actions train the tiny default policy's tokenizer."""


def prompt_builder(policy: PolicyConfig, rollout: RolloutConfig, env) -> PromptBuilder:
    """The run's prompts on ``env``: ``policy.template``, ``rollout.history`` and ``rollout.history_length``."""
    return PromptBuilder(environment=environment_description(env), history_length=rollout.history_length,
                         template=policy.template, history=rollout.history)


def tiny_vocab_size(policy: PolicyConfig, env) -> int:
    """``policy.tiny_vocab_size``, else the env's own suggestion (``tiny_vocab_size``), else 1024."""
    return int(policy.tiny_vocab_size or getattr(env, "tiny_vocab_size", 0) or 1024)


def build_tiny_default(policy: PolicyConfig, seed: int, tiny_dir: Path, env, texts: list[str],
                       words: Iterable[str] = ()) -> None:
    """The tiny default policy in ``tiny_dir``: a tokenizer trained on ``texts`` with ``env``'s hints (characters
    kept apart, lowercase, whole words, plus ``words``) and a ``policy.tiny_*`` sized model, seeded by ``seed``."""
    build_tiny_policy(tiny_dir, texts, vocab_size=tiny_vocab_size(policy, env), seed=seed,
                      isolate_chars=getattr(env, "tokenizer_isolate_chars", ""),
                      lowercase=bool(getattr(env, "tokenizer_lowercase", False)),
                      words=(*getattr(env, "tokenizer_words", ()), *words),
                      hidden_size=policy.tiny_hidden_size, num_hidden_layers=policy.tiny_layers)
