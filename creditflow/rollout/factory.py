"""The rollout engine a run config builds on a policy and an env factory, and the run's success rule."""

from __future__ import annotations

from creditflow.config import RunConfig
from creditflow.envs.configured import turn_limit
from creditflow.policy.backends.base import Backend
from creditflow.policy.backends.factory import chat_encoder, hf_backend, sampling_params
from creditflow.policy.factory import prompt_builder
from creditflow.policy.prompts import ChatTemplate
from creditflow.rollout.engine import RolloutEngine
from creditflow.rollout.trajectory import SuccessRule
from creditflow.rollout.watched import Bars, WatchedEngine


def success_rule(cfg: RunConfig) -> SuccessRule:
    """The run's one success rule (``env.success_threshold``)."""
    return SuccessRule(cfg.env.success_threshold)


def make_engine(cfg: RunConfig, model, tokenizer, factory, env_executor=None, *, backend: Backend | None = None,
                progress: Bars | None = None, watch: str | None = None) -> RolloutEngine:
    """``env_executor``: where env work runs (``creditflow.rollout.executors``; default in-process).
    ``backend``: the generation backend (default: ``hf`` on ``model``; see
    :func:`creditflow.policy.backends.factory.make_backend`).
    ``watch``: show every rollout as a ``progress`` bar with this description (turns, episodes running)."""
    env = factory()
    prompts = prompt_builder(cfg, env)
    engine = WatchedEngine(
        backend=backend if backend is not None else hf_backend(cfg, model, tokenizer),
        encode=chat_encoder(tokenizer),
        env_factory=factory,
        prompt_builder=prompts,
        sampling=sampling_params(cfg, tokenizer),
        invalid_penalty=cfg.rollout.invalid_penalty,
        max_steps=turn_limit(cfg, env),
        env_executor=env_executor,
        success_rule=success_rule(cfg),
        chat=ChatTemplate(tokenizer) if prompts.conversation else None,
    )
    engine.progress, engine.watch = progress, watch
    engine.turn_limit = turn_limit(cfg, env)
    return engine
