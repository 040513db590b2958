"""The ``creditflow`` command line (typer).

User errors (:class:`creditflow.errors.UserError`) become one line on stderr and exit code 2; commands
write their outputs atomically so a failed run leaves nothing half-written.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Optional

import typer

from creditflow.errors import UserError

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    help="Train LLM agents on multi-turn tasks with terminal rewards: RewardFlow, CRPS, RRO and baselines.",
)


@app.callback()
def _root() -> None:
    """creditflow: credit assignment for multi-turn LLM agents (RewardFlow, CRPS, RRO, baselines)."""


# --------------------------------------------------------------------------------------------------
# envs
# --------------------------------------------------------------------------------------------------


@app.command("envs")
def envs_command() -> None:
    """List the registered environments and their options."""
    import inspect

    from creditflow import envs

    for name in envs.env_names():
        typer.echo(f"{name}: {envs.summary(name)}")
        try:
            options = envs.env_options(name)
        except UserError as exc:
            typer.echo(f"    (unavailable: {exc})")
            continue
        for key, default in options.items():
            shown = "required" if default is inspect.Parameter.empty else repr(default)
            typer.echo(f"    {key} = {shown}")


# --------------------------------------------------------------------------------------------------
# training
# --------------------------------------------------------------------------------------------------

_OVERRIDES_HELP = "Config overrides as key=value (e.g. rl.lr=1e-5 rollout.group_size=8 env.kwargs.size=7)."


@app.command("train", context_settings={"allow_extra_args": False})
def train_command(
    overrides: Optional[list[str]] = typer.Argument(None, help=_OVERRIDES_HELP, show_default=False),
    config: Optional[Path] = typer.Option(None, "--config", "-c", help="YAML run config."),
    env: Optional[str] = typer.Option(None, "--env", help="Environment name (env.name)."),
    algo: Optional[str] = typer.Option(None, "--algo", help="Credit estimator (rl.algo): grpo, rloo, ..."),
    model: Optional[str] = typer.Option(None, "--model", help="Local HF model dir (policy.model); default: tiny + SFT."),
    out: Optional[str] = typer.Option(None, "--out", help="Run directory (out_dir)."),
    resume: Optional[Path] = typer.Option(None, "--resume", help="Continue the run in this directory exactly."),
    curriculum: Optional[str] = typer.Option(None, "--curriculum",
                                             help="Start-state curriculum (curriculum.name): none, crps, expreplay."),
) -> None:
    """Multi-turn group RL (PPO-clip + KL) with the chosen credit estimator."""
    from creditflow.config import build_config
    from creditflow.train.pipeline import config_for_resume, run_train

    extra = list(overrides or [])
    for key, value in (("env.name", env), ("rl.algo", algo), ("policy.model", model), ("out_dir", out),
                       ("curriculum.name", curriculum)):
        if value is not None:
            extra.insert(0, f"{key}={value}")
    if resume is not None:
        cfg = config_for_resume(resume, extra)
    else:
        cfg = build_config(config, extra)
    run_dir, trainer, last = run_train(cfg, resume=resume is not None)
    typer.echo(f"done: step {trainer.step}, eval success {last.get('eval/success_rate', float('nan')):.3f} "
               f"-> {run_dir}")


@app.command("sft")
def sft_command(
    overrides: Optional[list[str]] = typer.Argument(None, help=_OVERRIDES_HELP, show_default=False),
    config: Optional[Path] = typer.Option(None, "--config", "-c", help="YAML run config."),
    env: Optional[str] = typer.Option(None, "--env", help="Environment name (env.name)."),
    model: Optional[str] = typer.Option(None, "--model", help="Local HF model dir; default: build the tiny one."),
    out: Optional[str] = typer.Option(None, "--out", help="Run directory; the result goes to OUT/sft_model."),
) -> None:
    """Supervised fine-tuning on the env's expert trajectories (loss on response tokens only)."""
    from creditflow.config import build_config
    from creditflow.train.pipeline import run_sft_command

    extra = list(overrides or [])
    for key, value in (("env.name", env), ("policy.model", model), ("out_dir", out)):
        if value is not None:
            extra.insert(0, f"{key}={value}")
    run_sft_command(build_config(config, extra))


@app.command("eval")
def eval_command(
    model: str = typer.Option(..., "--model", help="Local HF model directory to evaluate."),
    env: str = typer.Option("sokoban", "--env", help="Environment name."),
    episodes: int = typer.Option(64, "--episodes", min=1, help="Held-out tasks (one episode each)."),
    overrides: Optional[list[str]] = typer.Argument(None, help=_OVERRIDES_HELP, show_default=False),
    out: Optional[Path] = typer.Option(None, "--out", help="Write the trajectories here (JSONL)."),
) -> None:
    """Evaluate a policy on held-out tasks: success rate, score, steps."""
    import json

    from creditflow.config import build_config
    from creditflow.policy.model import load_policy
    from creditflow.rollout.trajectory import write_jsonl
    from creditflow.train import common
    from creditflow.train.rl import evaluate

    cfg = build_config(None, [f"env.name={env}", f"policy.model={model}", *(overrides or [])])
    factory = common.env_factory(cfg, "test")
    policy, tok = load_policy(model, cfg.policy.device, cfg.policy.dtype)
    engine = common.make_engine(cfg, policy, tok, factory)
    seeds = [cfg.env.eval_seed_offset + i for i in range(episodes)]
    metrics, trajs = evaluate(engine, seeds, common.sampling_params(cfg, tok, evaluation=True), env)
    if out is not None:
        write_jsonl(out, trajs)
    typer.echo(json.dumps(metrics, indent=2))


@app.command("demo")
def demo_command(
    overrides: Optional[list[str]] = typer.Argument(None, help=_OVERRIDES_HELP, show_default=False),
    env: Optional[str] = typer.Option(None, "--env", help="Environment (default sokoban)."),
    out: Optional[str] = typer.Option(None, "--out", help="Run directory (default runs/demo)."),
    quick: bool = typer.Option(False, "--quick", help="Tiny budget smoke run (about a minute)."),
    config: Optional[Path] = typer.Option(None, "--config", "-c", help="YAML overriding the demo defaults."),
) -> None:
    """The main job: build the tiny policy, SFT on expert demos, GRPO, evaluate, write a report."""
    from creditflow.demo import run_demo

    report = run_demo(list(overrides or []), env=env, out_dir=out, quick=quick,
                      config_file=str(config) if config else None)
    typer.echo((report / "summary.md").read_text())
    typer.echo(f"report: {report}")


def main(argv: Optional[list[str]] = None) -> None:
    """Console entry point: run the app, turning user errors into one line + exit 2.

    Usage errors (unknown command or option) are reported by click itself, also with exit 2.
    """
    try:
        app(args=argv, prog_name="creditflow")
    except UserError as exc:
        typer.echo(f"error: {exc}", err=True)
        sys.exit(2)


if __name__ == "__main__":
    main()
