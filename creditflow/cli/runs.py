"""The commands that make or use a policy: ``train``, ``sft``, ``config``, ``eval``, ``export`` and ``demo``, each
through :mod:`creditflow.api`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer

from creditflow import api, world
from creditflow.cli.options import (BACKEND, BASE_URL, ENV_HELP, MODEL_NAME, OVERRIDES_HELP, backend_flags,
                                    check_output_file, config_overrides)
from creditflow.cli.root import app
from creditflow.config import build_config
from creditflow.errors import UserError
from creditflow.rollout.trajectory import write_jsonl
from creditflow.spill import write_results


@app.command("train", context_settings={"allow_extra_args": False})
def train_command(
    overrides: Optional[list[str]] = typer.Argument(None, help=OVERRIDES_HELP, show_default=False),
    config: Optional[Path] = typer.Option(None, "--config", "-c", help="YAML run config."),
    env: Optional[str] = typer.Option(None, "--env", help=ENV_HELP),
    algo: Optional[str] = typer.Option(None, "--algo", help="Credit estimator (rl.algo): grpo, rloo, ..."),
    model: Optional[str] = typer.Option(None, "--model", help="Local HF model dir (policy.model); default: tiny + SFT."),
    out: Optional[str] = typer.Option(None, "--out", help="Run directory (out_dir)."),
    resume: Optional[Path] = typer.Option(None, "--resume", help="Continue the run in this directory exactly."),
    curriculum: Optional[str] = typer.Option(None, "--curriculum",
                                             help="Start-state curriculum (curriculum.name): none, crps, expreplay."),
) -> None:
    """Multi-turn group RL (PPO-clip + KL) with the chosen credit estimator (policy.lora=true: LoRA adapters only)."""
    if resume is not None and config is not None:
        raise UserError("--config conflicts with --resume: a resumed run keeps its own config.yaml "
                        "(give changes as key=value; they are recorded there)")
    result = api.train(config, model=model, out=out, algo=algo, curriculum=curriculum,
                       overrides=config_overrides({"env.name": env}, overrides), resume=resume)
    if world.current().main:
        last = result.metrics
        typer.echo(f"done: step {last.get('step', 0)}, eval success {last.get('eval/success_rate', float('nan')):.3f} "
                   f"-> {result.run_dir}")


@app.command("sft")
def sft_command(
    overrides: Optional[list[str]] = typer.Argument(None, help=OVERRIDES_HELP, show_default=False),
    config: Optional[Path] = typer.Option(None, "--config", "-c", help="YAML run config."),
    env: Optional[str] = typer.Option(None, "--env", help=ENV_HELP),
    model: Optional[str] = typer.Option(None, "--model", help="Local HF model dir; default: build the tiny one."),
    out: Optional[str] = typer.Option(None, "--out", help="Run directory; the result goes to OUT/sft_model."),
    tools: bool = typer.Option(False, "--tools", help="Tool-calling demonstrations and a model whose chat template "
                               "renders and parses tool calls, for TRL's environment_factory (sft.tools=true; an env "
                               "whose actions are tool calls, e.g. trl:module:Class)."),
    no_eval: bool = typer.Option(False, "--no-eval", help="Skip the held-out evaluation of π_SFT when SFT ends "
                                 "(sft.evaluate=false); by default its success on the rl.eval_episodes validation "
                                 "tasks train starts from is printed."),
) -> None:
    """Supervised fine-tuning on the env's expert trajectories (loss on response tokens only; policy.lora=true: a LoRA
    adapter, merged into the saved model)."""
    flags = {"env.name": env, "sft.tools": True if tools else None,  # no --tools: the config's sft.tools stays
             "sft.evaluate": False if no_eval else None}
    api.sft(config, model=model, out=out, overrides=config_overrides(flags, overrides))


@app.command("config")
def config_command(
    overrides: Optional[list[str]] = typer.Argument(None, help=OVERRIDES_HELP, show_default=False),
    config: Optional[Path] = typer.Option(None, "--config", "-c", help="YAML run config to start from."),
) -> None:
    """Print the full run config as commented YAML (each field's docstring and constraints).

    The defaults, or what --config and key=value overrides give; `creditflow train --config FILE` reads the
    output back as it is."""
    typer.echo(api.config_yaml(config, list(overrides or [])), nl=False)


@app.command("eval")
def eval_command(
    model: Optional[str] = typer.Option(None, "--model", help="Local HF model directory or checkpoint to evaluate "
                                        "(a run directory: its newest checkpoint; backend openai: its tokenizer; "
                                        "default --model-name when that is a directory)."),
    env: str = typer.Option("sokoban", "--env", help=ENV_HELP),
    episodes: int = typer.Option(64, "--episodes", min=1, help="Held-out tasks (one episode each)."),
    split: str = typer.Option("validation", "--split",
                              help="Held-out split: validation (for choices) or test (for reported numbers)."),
    overrides: Optional[list[str]] = typer.Argument(None, help=OVERRIDES_HELP, show_default=False),
    out: Optional[Path] = typer.Option(None, "--out", help="Write the trajectories here (JSONL)."),
    backend: Optional[str] = BACKEND,
    base_url: Optional[str] = BASE_URL,
    model_name: Optional[str] = MODEL_NAME,
) -> None:
    """Evaluate a policy on held-out tasks: success rate, score, steps."""
    model = model or (model_name if backend == "openai" else None)
    if model is None:
        raise UserError("eval: give --model DIR (with --backend openai, a local copy of the served model)")
    flags = {"env.name": env, "policy.model": model, **backend_flags(backend, base_url, model_name)}
    cfg = build_config(None, config_overrides(flags, overrides))
    if out is not None:
        check_output_file(out, "--out")
    result = api.evaluate(cfg, model=model, episodes=episodes, split=split)
    typer.echo(json.dumps(result.metrics, indent=2))  # the results first: a failed write below loses none of them
    if out is not None:
        write_results(out, lambda path: write_jsonl(path, result.trajectories), "trajectories", "--out")


@app.command("export")
def export_command(
    source: Optional[Path] = typer.Argument(None, help="A checkpoint (e.g. runs/x/checkpoints/step_000020), a run "
                                            "directory (its newest checkpoint), a LoRA adapter or a model directory.",
                                            show_default=False, metavar="SOURCE"),
    out: Path = typer.Option(..., "--out", help="New directory for the plain Hugging Face model."),
    dtype: str = typer.Option("auto", "--dtype", help="float32, bfloat16 or float16 (auto: float32)."),
    from_gguf: Optional[Path] = typer.Option(None, "--from-gguf", help="A GGUF file (llama.cpp's format) in place "
                                             "of SOURCE: its weights dequantised to --dtype, its tokenizer and chat "
                                             "template (needs the gguf package).", show_default=False),
) -> None:
    """Save a policy as a plain HF model directory: a LoRA checkpoint's adapter merged into its base model (for
    vllm serve and other tools); a full checkpoint without its optimizer state; or, with --from-gguf, the model of
    a GGUF file, which every command then takes as --model DIR."""
    if (source is None) == (from_gguf is None):
        raise UserError("give exactly one of SOURCE and --from-gguf")
    if from_gguf is not None:
        target = api.export_gguf(from_gguf, out, dtype=dtype)
        typer.echo(f"exported {from_gguf} -> {target}")
        return
    target = api.export(source, out, dtype=dtype)
    typer.echo(f"exported {source} -> {target}")


@app.command("demo")
def demo_command(
    overrides: Optional[list[str]] = typer.Argument(None, help=OVERRIDES_HELP, show_default=False),
    env: Optional[str] = typer.Option(None, "--env", help=ENV_HELP + " Default sokoban."),
    out: Optional[str] = typer.Option(None, "--out", help="Run directory (default runs/demo)."),
    quick: bool = typer.Option(False, "--quick",
                               help="Smoke run of every stage at a tiny budget (2 RL steps, 4 held-out tasks): its numbers "
                                    "are noise. About 2.5 CPU-minutes (measured: benchmarks/results/demo_quick.json), so a "
                                    "few minutes on 2 cores, longer on a busy machine."),
    config: Optional[Path] = typer.Option(None, "--config", "-c", help="YAML overriding the demo defaults."),
) -> None:
    """The main job: build the tiny policy, SFT on expert demos, RewardFlow RL, evaluate, write a report."""
    report = api.demo(config, env=env, out=out, quick=quick, overrides=list(overrides or []))
    typer.echo((report / "summary.md").read_text())
    typer.echo(f"report: {report}")
