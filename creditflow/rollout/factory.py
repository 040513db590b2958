"""The rollout engine the config sections of a run build on a policy and an env factory, and the run's success
rule."""

from __future__ import annotations

from dataclasses import dataclass

from creditflow.config import EnvConfig, GenerationConfig, PolicyConfig, RolloutConfig
from creditflow.envs.configured import turn_limit
from creditflow.policy.backends.base import Backend
from creditflow.policy.backends.factory import chat_encoder, hf_backend, sampling_params
from creditflow.policy.factory import prompt_builder
from creditflow.policy.prompts import ChatTemplate
from creditflow.rollout.engine import EpisodeRules, RolloutEngine
from creditflow.rollout.trajectory import SuccessRule
from creditflow.rollout.watched import Bars, WatchedEngine


@dataclass(frozen=True)
class EngineSettings:
    """The sections of the run config an engine reads, handed down by the recipe: ``policy`` (the template and
    the ``hf`` backend's settings), ``rollout`` (history, invalid-action penalty, turn limit), ``generation``
    (sampling) and ``env`` (the success rule)."""

    policy: PolicyConfig
    rollout: RolloutConfig
    generation: GenerationConfig
    env: EnvConfig


def success_rule(env: EnvConfig) -> SuccessRule:
    """The run's one success rule (``env.success_threshold``)."""
    return SuccessRule(env.success_threshold)


def make_engine(settings: EngineSettings, model, tokenizer, factory, env_executor=None, *,
                backend: Backend | None = None, progress: Bars | None = None,
                watch: str | None = None) -> RolloutEngine:
    """``env_executor``: where env work runs (``creditflow.rollout.executors``; default in-process).
    ``backend``: the generation backend (default: ``hf`` on ``model``; see
    :func:`creditflow.policy.backends.factory.make_backend`).
    ``watch``: show every rollout as a ``progress`` bar with this description (turns, episodes running)."""
    env = factory()
    s = settings
    prompts = prompt_builder(s.policy, s.rollout, env)
    engine = WatchedEngine(
        backend=backend if backend is not None else hf_backend(s.policy, model, tokenizer),
        encode=chat_encoder(tokenizer),
        env_factory=factory,
        prompt_builder=prompts,
        sampling=sampling_params(s.generation, tokenizer),
        rules=EpisodeRules(s.rollout.invalid_penalty, turn_limit(s.rollout.max_steps, env), success_rule(s.env)),
        env_executor=env_executor,
        chat=ChatTemplate(tokenizer) if prompts.conversation else None,
    )
    engine.progress, engine.watch = progress, watch
    engine.turn_limit = turn_limit(s.rollout.max_steps, env)
    return engine
