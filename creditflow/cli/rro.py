"""``creditflow rro``: RRO's preference collection (``collect``), DPO on the pairs (``train``) and the whole pipeline
(``run``), each through :mod:`creditflow.api`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer

from creditflow import api, world
from creditflow.cli.options import (BACKEND, BASE_URL, ENV_HELP, MODEL_NAME, OVERRIDES_HELP, backend_flags,
                                    config_overrides)
from creditflow.cli.root import app, check_launch
from creditflow.config import build_config

rro_app = typer.Typer(no_args_is_help=True, help="RRO: MC process rewards, reward-rising sampling, DPO.")
app.add_typer(rro_app, name="rro")


@rro_app.callback()
def _rro_root(ctx: typer.Context) -> None:
    """RRO: MC process rewards, reward-rising sampling, DPO."""
    if ctx.invoked_subcommand is not None:
        check_launch(f"rro {ctx.invoked_subcommand}")


# options shared by ``rro collect`` and ``rro run`` (one OptionInfo serves both commands)
_EXPLORATION = typer.Option(None, "--exploration",
                            help="rising (RRO, Alg. 1) or fixed (fixed-size baseline) (rro.exploration).")
_CANDIDATES = typer.Option(None, "--candidates", help="N_max (rising) / N (fixed) (rro.candidates).")
_MC_ROLLOUTS = typer.Option(None, "--mc-rollouts", help="m rollouts per process reward.")
_TASKS = typer.Option(None, "--tasks", help="Training tasks to collect on (rro.tasks).")
_EXECUTOR = typer.Option(None, "--executor", help="inprocess or ray (rro.executor).")
_RAY_ADDRESS = typer.Option(None, "--ray-address", help="Ray cluster; default: start a local one.")


def _collection_flags(exploration, candidates, mc_rollouts, tasks, executor, ray_address) -> dict:
    """The collection options by the config key each sets."""
    return {"rro.exploration": exploration, "rro.candidates": candidates, "rro.mc_rollouts": mc_rollouts,
            "rro.tasks": tasks, "rro.executor": executor, "rro.ray_address": ray_address}


@rro_app.command("collect")
def rro_collect_command(
    overrides: Optional[list[str]] = typer.Argument(None, help=OVERRIDES_HELP, show_default=False),
    config: Optional[Path] = typer.Option(None, "--config", "-c", help="YAML run config."),
    env: Optional[str] = typer.Option(None, "--env", help=ENV_HELP),
    model: Optional[str] = typer.Option(None, "--model", help="π_SFT model dir; default OUT/sft_model, trained if absent."),
    out: Optional[str] = typer.Option(None, "--out", help="Run directory (out_dir)."),
    data: Optional[str] = typer.Option(None, "--data", help="Preference data dir (default OUT/preferences)."),
    exploration: Optional[str] = _EXPLORATION,
    candidates: Optional[int] = _CANDIDATES,
    mc_rollouts: Optional[int] = _MC_ROLLOUTS,
    tasks: Optional[int] = _TASKS,
    executor: Optional[str] = _EXECUTOR,
    ray_address: Optional[str] = _RAY_ADDRESS,
    backend: Optional[str] = BACKEND,
    base_url: Optional[str] = BASE_URL,
    model_name: Optional[str] = MODEL_NAME,
) -> None:
    """Collect process-supervised preference pairs (resumes an interrupted collection in the same dir)."""
    flags = {"env.name": env, "policy.model": model, "out_dir": out, "rro.data_dir": data,
             **_collection_flags(exploration, candidates, mc_rollouts, tasks, executor, ray_address),
             **backend_flags(backend, base_url, model_name)}
    summary = api.collect_preferences(config, overrides=config_overrides(flags, overrides))
    typer.echo(json.dumps({k: summary[k] for k in ("samples_per_step", "steps", "pairs", "rollouts",
                                                   "generated_tokens", "wall_seconds")}, indent=2))


@rro_app.command("train")
def rro_train_command(
    overrides: Optional[list[str]] = typer.Argument(None, help=OVERRIDES_HELP, show_default=False),
    config: Optional[Path] = typer.Option(None, "--config", "-c", help="YAML run config."),
    model: Optional[str] = typer.Option(None, "--model", help="π_SFT model dir (start and reference); default OUT/sft_model."),
    out: Optional[str] = typer.Option(None, "--out", help="Run directory; the result goes to OUT/dpo_model."),
    data: Optional[str] = typer.Option(None, "--data", help="Preference data dir (default OUT/preferences)."),
    env: Optional[str] = typer.Option(None, "--env", help=ENV_HELP),
) -> None:
    """DPO (TRL) from π_SFT on collected preference pairs; reference = π_SFT (policy.lora=true: a LoRA adapter,
    merged into the saved model)."""
    flags = {"env.name": env, "policy.model": model, "out_dir": out, "rro.data_dir": data}
    result = api.dpo(config, overrides=config_overrides(flags, overrides))
    if world.current().main:
        metrics = result.metrics
        typer.echo(f"DPO: {metrics['dpo/pairs']} pairs, {metrics['dpo/steps']} steps, loss "
                   f"{metrics['dpo/train_loss']:.4f} -> {result.model}")


@rro_app.command("run")
def rro_run_command(
    overrides: Optional[list[str]] = typer.Argument(None, help=OVERRIDES_HELP, show_default=False),
    config: Optional[Path] = typer.Option(None, "--config", "-c", help="YAML run config."),
    env: Optional[str] = typer.Option(None, "--env", help=ENV_HELP),
    model: Optional[str] = typer.Option(None, "--model", help="π_SFT model dir; default: SFT the tiny policy."),
    out: Optional[str] = typer.Option(None, "--out", help="Run directory (out_dir)."),
    exploration: Optional[str] = _EXPLORATION,
    candidates: Optional[int] = _CANDIDATES,
    mc_rollouts: Optional[int] = _MC_ROLLOUTS,
    tasks: Optional[int] = _TASKS,
    executor: Optional[str] = _EXECUTOR,
    ray_address: Optional[str] = _RAY_ADDRESS,
) -> None:
    """The whole RRO pipeline: SFT → collect → DPO → held-out eval of π_SFT and π_DPO."""
    flags = {"env.name": env, "policy.model": model, "out_dir": out,
             **_collection_flags(exploration, candidates, mc_rollouts, tasks, executor, ray_address)}
    result = api.rro(build_config(config, config_overrides(flags, overrides)))
    typer.echo((result.run_dir / "rro_summary.md").read_text())
    typer.echo(json.dumps({k: result.metrics[k] for k in ("samples_per_step", "steps", "pairs", "rollouts")}))
