"""What a recipe checks of its config before any work (SFT, model building, rollouts), as one-line UserErrors.
The checks of the parts live beside them: the env's in ``creditflow.envs.configured`` (its factory checks the
options), the backend's in ``creditflow.policy.backends.factory``, a model directory's in ``policy/model.py``."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from creditflow import credit, envs
from creditflow.config import RunConfig
from creditflow.errors import UserError
from creditflow.policy import lora
from creditflow.policy.load import autocast_note, check_device_and_dtype
from creditflow.policy.tiny import tiny_config
from creditflow.policy.validate import check_model_dir, model_config
from creditflow.trainer import distributed

_NOTED: set[str] = set()  # notes check_run has printed in this process


def check_run(cfg: RunConfig, *, knobs: bool = False, model: str | Path | None = None, tools: bool = False) -> None:
    """What can be checked before any work (SFT, model building, rollouts), as one-line UserErrors: the
    credit knobs (``knobs``), device and dtype on this machine, the model directory (``model``, default
    ``policy.model``: config, tokenizer and weights, :func:`~creditflow.policy.model.check_model_dir`) and LoRA's
    target modules in that model; ``sft.tools`` only where the command takes it (``tools``: ``creditflow sft``).
    Env options are checked by :func:`creditflow.envs.configured.env_factory`."""
    if cfg.sft.tools and not tools:
        raise UserError("sft.tools=true makes a tool-calling model for TRL's environment_factory and is for "
                        "`creditflow sft --tools` only; this command runs creditflow's own prompts (docs/trl.md)")
    if knobs:
        try:
            credit.validate_knobs(cfg.rl.algo, cfg.rl.credit)
        except UserError as exc:
            where = "rl.credit" if cfg.rl.algo in credit.estimator_names() else "rl.algo"
            raise UserError(f"{where}: {exc}") from None
    if cfg.env.train_pool:
        check_train_pool(cfg)
    check_device_and_dtype(cfg.policy.device, cfg.policy.weights_dtype, cfg.policy.autocast)
    note = autocast_note(cfg.policy.device, cfg.policy.autocast, rollout_dtype=cfg.policy.rollout_dtype)
    if note and note not in _NOTED and os.environ.get("LOCAL_RANK", "0") == "0":  # once, on the main process
        _NOTED.add(note)
        print(note, file=sys.stderr)
    model = model if model is not None else cfg.policy.model
    if model:  # a served model's local copy (backend openai) lends its tokenizer only
        check_model_dir(model, weights=cfg.policy.backend != "openai")
    if cfg.policy.lora.enabled:  # target modules that exist in the model (the tiny default's when none is given)
        lora.check_targets(cfg.policy.lora, model_config(model) if model else
                           tiny_config(hidden_size=cfg.policy.tiny_hidden_size,
                                       num_hidden_layers=cfg.policy.tiny_layers))


def check_train_pool(cfg: RunConfig) -> None:
    """``env.train_pool`` trains on validation seeds and scores them: the step must find enough distinct tasks in
    the pool, and a validation seed must be the same task in the training env as in the held-out one (not so
    where held-out envs take other options: ``env.eval_kwargs`` or a ``split`` option)."""
    env = cfg.env
    if env.train_pool < cfg.rollout.tasks_per_step:
        raise UserError(f"env.train_pool={env.train_pool} is smaller than rollout.tasks_per_step="
                        f"{cfg.rollout.tasks_per_step}: a step draws distinct tasks from the pool")
    if env.eval_kwargs or "split" in envs.env_options(env.name):
        raise UserError(f"env.train_pool needs held-out envs that play the training envs' tasks; env {env.name!r} "
                        "plays other tasks there (" + ("env.eval_kwargs" if env.eval_kwargs else "its split option")
                        + ")")


def check_data_parallel(cfg: RunConfig) -> None:
    """What ``creditflow train`` under N launched processes needs, checked before any work: B tasks split
    evenly (a task's group stays on one process), the ``hf`` backend, and a replicated policy (DDP): an
    FSDP or DeepSpeed launch config shards the model, which RL generation here does not do."""
    n = distributed.launched_size()
    if n == 1:
        return
    sharded = distributed.sharded_launch()
    if sharded:
        raise UserError(f"creditflow train keeps a whole policy on each process (data parallel); the {sharded} "
                        "launch config shards it: use configs/accelerate/ddp.yaml (FSDP / ZeRO-3 serve sft and "
                        "rro train)")
    if cfg.rollout.tasks_per_step % n:
        raise UserError(f"rollout.tasks_per_step={cfg.rollout.tasks_per_step} must be divisible by the {n} launched "
                        f"processes (each rolls out the same number of tasks)")
    if cfg.policy.backend != "hf":
        raise UserError(f"policy.backend={cfg.policy.backend} under {n} processes is not supported; use "
                        "policy.backend=hf, or one process")
