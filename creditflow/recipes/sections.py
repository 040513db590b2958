"""The sections of a resolved run config that a recipe hands down: each part below the recipes receives its own
(``cfg.env``, ``cfg.policy``, ...) or the small frozen bundle it declares, never the whole :class:`RunConfig`."""

from __future__ import annotations

from pathlib import Path

from creditflow.config import RunConfig
from creditflow.policy.backends.base import SamplingParams
from creditflow.rollout.factory import EngineSettings
from creditflow.trainer.distributed import World
from creditflow.trainer.rl import RLRun


def engine_settings(cfg: RunConfig) -> EngineSettings:
    """What a rollout engine reads of ``cfg``: the policy's prompts and backend, the rollout, the sampling, the
    env's success rule."""
    return EngineSettings(cfg.policy, cfg.rollout, cfg.generation, cfg.env)


def rl_run(cfg: RunConfig, world: World = World(), eval_sampling: SamplingParams | None = None) -> RLRun:
    """What the RL trainer reads of ``cfg``, with this process's ``world`` and the held-out ``eval_sampling``."""
    return RLRun(cfg.rl, cfg.env, cfg.rollout, cfg.policy, cfg.checkpoint, cfg.seed, Path(cfg.out_dir), world,
                 eval_sampling)
