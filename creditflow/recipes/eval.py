"""The ``eval`` recipe: held-out success/score of a saved policy (greedy by default)."""

from __future__ import annotations

import warnings
from pathlib import Path

from creditflow.config import RunConfig
from creditflow.envs.configured import env_factory
from creditflow.policy.backends.factory import check_backend, close_backend, make_backend, sampling_params
from creditflow.policy.load import load_policy, load_tokenizer
from creditflow.recipes.checks import check_run
from creditflow.recipes.progress import RunProgress
from creditflow.recipes.resolve import with_model_settings
from creditflow.recipes.sections import engine_settings
from creditflow.rollout.evaluate import evaluate_seeds
from creditflow.rollout.factory import make_engine
from creditflow.rollout.seeding import seed_everything, split_seeds
from creditflow.rollout.trajectory import Trajectory
from creditflow.trainer.checkpoint import policy_in


def evaluate_saved_policy(cfg: RunConfig, model_path: str | Path, episodes: int, progress: RunProgress | None = None,
                          split: str = "validation") -> tuple[dict, list[Trajectory]]:
    """One episode on each of the first ``episodes`` tasks of a held-out ``split`` (``validation``, which every
    choice is made on, or ``test``, for reported numbers; docs/environments.md "Evaluation splits"), with
    ``generation.eval_temperature``, under a bar of turns: ``(metrics, trajectories)``.

    With ``policy.backend=openai`` the server generates and ``model_path`` only provides the tokenizer. A run
    directory stands for its newest checkpoint; a LoRA checkpoint loads as its base with the adapter merged.
    """
    model_path = policy_in(model_path)
    check_run(cfg, model=model_path)
    progress = progress or RunProgress()
    cfg = with_model_settings(cfg, model_path, progress.log)  # the prompt layout it was trained with
    check_backend(cfg.policy)
    seed_everything(cfg.seed)
    factory = env_factory(cfg.env, cfg.rollout.max_steps, "test")
    seeds = split_seeds(cfg.env, split, episodes, cfg.rl.eval_episodes, factory)
    if cfg.policy.backend == "openai":
        model, tok = None, load_tokenizer(model_path)
    else:
        model, tok = load_policy(model_path, cfg.policy.device, cfg.policy.weights_dtype)
    backend = make_backend(cfg.policy, cfg.seed, model, tok, model_path)
    try:
        engine = make_engine(engine_settings(cfg), model, tok, factory, backend=backend, progress=progress,
                             watch=f"eval {Path(model_path).name}")
        engine.keep_bar = True
        return evaluate_seeds(engine, seeds, sampling_params(cfg.generation, tok, evaluation=True), cfg.env.name)
    finally:
        close_backend(backend)


def __getattr__(name: str):
    if name == "evaluate_policy":  # its name until 0.2, shared with another function that returned only metrics
        warnings.warn("creditflow.recipes.eval.evaluate_policy is now evaluate_saved_policy (the public API is "
                      "creditflow.evaluate); the old name goes in the next release", DeprecationWarning, stacklevel=2)
        return evaluate_saved_policy
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
