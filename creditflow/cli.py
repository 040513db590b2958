"""The ``creditflow`` command line (typer).

User errors (:class:`creditflow.errors.UserError`) become one line on stderr and exit code 2; commands
write their outputs atomically so a failed run leaves nothing half-written.
"""

from __future__ import annotations

import inspect
import json
import sys
from pathlib import Path
from typing import Optional

import typer
from rich.markup import escape

from creditflow import credit, envs
from creditflow.config import build_config
from creditflow.credit.draw import FORMATS, GraphError, group_graph, write_graph
from creditflow.credit.registry import Knobs, knob_lines, parse_key_values, validate_model
from creditflow.credit.rewardflow import GraphKnobs
from creditflow.errors import UserError
from creditflow.recipes.demo import run_demo
from creditflow.recipes.eval import evaluate_policy
from creditflow.recipes.rro import run_collect, run_dpo_training, run_rro
from creditflow.recipes.train import config_for_resume, run_sft_command, run_train
from creditflow.rollout.trajectory import read_jsonl, write_jsonl

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
    extra = list(overrides or [])
    for key, value in (("env.name", env), ("policy.model", model), ("out_dir", out)):
        if value is not None:
            extra.insert(0, f"{key}={value}")
    run_sft_command(build_config(config, extra))


# generation backend options shared by ``eval`` and ``rro collect``
_BACKEND = typer.Option(None, "--backend", help="Generation backend (policy.backend): hf, vllm or openai.")
_BASE_URL = typer.Option(None, "--base-url", help="backend openai: server API root, e.g. http://127.0.0.1:8000/v1.")
_MODEL_NAME = typer.Option(None, "--model-name", help="backend openai: the model's name on the server.")


def _backend_settings(backend, base_url, model_name) -> dict:
    return {"policy.backend": backend, "policy.base_url": base_url, "policy.model_name": model_name}


@app.command("eval")
def eval_command(
    model: Optional[str] = typer.Option(None, "--model", help="Local HF model directory to evaluate (backend "
                                        "openai: its tokenizer; default --model-name when that is a directory)."),
    env: str = typer.Option("sokoban", "--env", help="Environment name."),
    episodes: int = typer.Option(64, "--episodes", min=1, help="Held-out tasks (one episode each)."),
    overrides: Optional[list[str]] = typer.Argument(None, help=_OVERRIDES_HELP, show_default=False),
    out: Optional[Path] = typer.Option(None, "--out", help="Write the trajectories here (JSONL)."),
    backend: Optional[str] = _BACKEND,
    base_url: Optional[str] = _BASE_URL,
    model_name: Optional[str] = _MODEL_NAME,
) -> None:
    """Evaluate a policy on held-out tasks: success rate, score, steps."""
    model = model or (model_name if backend == "openai" else None)
    if model is None:
        raise UserError("eval: give --model DIR (with --backend openai, a local copy of the served model)")
    extra = [f"{k}={v}" for k, v in _backend_settings(backend, base_url, model_name).items() if v is not None]
    cfg = build_config(None, [f"env.name={env}", f"policy.model={model}", *extra, *(overrides or [])])
    metrics, trajs = evaluate_policy(cfg, model, episodes)
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
    report = run_demo(list(overrides or []), env=env, out_dir=out, quick=quick,
                      config_file=str(config) if config else None)
    typer.echo((report / "summary.md").read_text())
    typer.echo(f"report: {report}")


# --------------------------------------------------------------------------------------------------
# credit, graph
# --------------------------------------------------------------------------------------------------

_KNOBS_HELP = "Estimator knobs as key=value (e.g. gamma=0.9 state_fn=observation); see the list below."


def _knob_block(title: str, model: type[Knobs]) -> str:
    """``title:`` then one indented ``name=default  docstring`` line per knob of ``model``."""
    return f"{title}:\n" + "\n".join(f"  {line}" for line in knob_lines(model))


def _knobs_epilog(blocks: list[str]) -> str:
    """Help text listing knobs as ``name=default  docstring`` (escaped: typer renders rich markup)."""
    return escape("Knobs (key=value, shown with their defaults; none for an unset number, true/false for "
                  "switches):\n\n" + "\n\n".join(blocks))


@app.command("credit", epilog=_knobs_epilog([_knob_block(name, credit.knob_model(name))
                                               for name in credit.estimator_names()]))
def credit_command(
    knobs: Optional[list[str]] = typer.Argument(None, help=_KNOBS_HELP, show_default=False),
    estimator: str = typer.Option(..., "--estimator", "-e", help=f"{', '.join(credit.estimator_names())}."),
    input_path: Path = typer.Option(..., "--in", help="Trajectories (JSONL, one trajectory per line)."),
    output_path: Path = typer.Option(..., "--out", help="Scored trajectories (JSONL), written atomically."),
) -> None:
    """Score trajectories: add process_reward, step_reward and advantage to every step."""
    # unknown estimator or bad knob => one line before reading anything
    values = credit.validate_knobs(estimator, parse_key_values(knobs or []), strings=True)
    if not input_path.is_file():
        raise UserError(f"--in {str(input_path)!r}: no such file")
    trajs = read_jsonl(input_path)
    metrics = credit.get_estimator(estimator)(trajs, values)
    write_jsonl(output_path, trajs)
    steps = sum(len(t.steps) for t in trajs)
    shown = ", ".join(f"{k.split('/', 1)[-1]}={v:.4g}" for k, v in metrics.items() if isinstance(v, (int, float)))
    typer.echo(f"{estimator}: scored {len(trajs)} trajectories, {steps} steps -> {output_path} ({shown})", err=True)


@app.command("graph", epilog=_knobs_epilog([_knob_block("RewardFlow graph", GraphKnobs)]))
def graph_command(
    knobs: Optional[list[str]] = typer.Argument(
        None, show_default=False, help="RewardFlow graph knobs as key=value (e.g. gamma=0.5); see the list below."),
    input_path: Path = typer.Option(..., "--in", help="Trajectories (JSONL)."),
    group: Optional[str] = typer.Option(None, "--group", "-g", help="group_id to draw (default: the first)."),
    output_path: Path = typer.Option(..., "--out", help="graph.png, .svg, .pdf, .dot or .html"),
) -> None:
    """Draw one group's RewardFlow state graph (node shade = R(s), edge colour = r~) with a legend."""
    values = validate_model(GraphKnobs, parse_key_values(knobs or []), "graph", strings=True)
    if output_path.suffix.lower() not in FORMATS:
        raise GraphError(f"unsupported output {output_path.name!r}: use one of {', '.join(FORMATS)}")
    if not input_path.is_file():
        raise UserError(f"--in {str(input_path)!r}: no such file")
    graph = group_graph(read_jsonl(input_path), group, values)
    write_graph(graph, output_path)
    typer.echo(f"group {graph.group_id}: {len(graph.labels)} nodes, {len(graph.edges)} edges -> {output_path}",
               err=True)


# --------------------------------------------------------------------------------------------------
# rro
# --------------------------------------------------------------------------------------------------

rro_app = typer.Typer(no_args_is_help=True, help="RRO: MC process rewards, reward-rising sampling, DPO.")
app.add_typer(rro_app, name="rro")


def _rro_config(overrides, config, pairs: dict):
    extra = list(overrides or [])
    for key, value in pairs.items():
        if value is not None:
            extra.insert(0, f"{key}={value}")
    return build_config(config, extra)


# options shared by ``rro collect`` and ``rro run`` (one OptionInfo serves both commands)
_EXPLORATION = typer.Option(None, "--exploration",
                            help="rising (RRO, Alg. 1) or fixed (fixed-size baseline) (rro.exploration).")
_CANDIDATES = typer.Option(None, "--candidates", help="N_max (rising) / N (fixed) (rro.candidates).")
_MC_ROLLOUTS = typer.Option(None, "--mc-rollouts", help="m rollouts per process reward.")
_TASKS = typer.Option(None, "--tasks", help="Training tasks to collect on (rro.tasks).")
_EXECUTOR = typer.Option(None, "--executor", help="inprocess or ray (rro.executor).")
_RAY_ADDRESS = typer.Option(None, "--ray-address", help="Ray cluster; default: start a local one.")


def _collection_settings(exploration, candidates, mc_rollouts, tasks, executor, ray_address) -> dict:
    return {"rro.exploration": exploration, "rro.candidates": candidates, "rro.mc_rollouts": mc_rollouts,
            "rro.tasks": tasks, "rro.executor": executor, "rro.ray_address": ray_address}


@rro_app.command("collect")
def rro_collect_command(
    overrides: Optional[list[str]] = typer.Argument(None, help=_OVERRIDES_HELP, show_default=False),
    config: Optional[Path] = typer.Option(None, "--config", "-c", help="YAML run config."),
    env: Optional[str] = typer.Option(None, "--env", help="Environment name (env.name)."),
    model: Optional[str] = typer.Option(None, "--model", help="π_SFT model dir; default OUT/sft_model, trained if absent."),
    out: Optional[str] = typer.Option(None, "--out", help="Run directory (out_dir)."),
    data: Optional[str] = typer.Option(None, "--data", help="Preference data dir (default OUT/preferences)."),
    exploration: Optional[str] = _EXPLORATION,
    candidates: Optional[int] = _CANDIDATES,
    mc_rollouts: Optional[int] = _MC_ROLLOUTS,
    tasks: Optional[int] = _TASKS,
    executor: Optional[str] = _EXECUTOR,
    ray_address: Optional[str] = _RAY_ADDRESS,
    backend: Optional[str] = _BACKEND,
    base_url: Optional[str] = _BASE_URL,
    model_name: Optional[str] = _MODEL_NAME,
) -> None:
    """Collect process-supervised preference pairs (resumes an interrupted collection in the same dir)."""
    cfg = _rro_config(overrides, config, {
        "env.name": env, "policy.model": model, "out_dir": out, "rro.data_dir": data,
        **_collection_settings(exploration, candidates, mc_rollouts, tasks, executor, ray_address),
        **_backend_settings(backend, base_url, model_name)})
    summary = run_collect(cfg)
    typer.echo(json.dumps({k: summary[k] for k in ("samples_per_step", "steps", "pairs", "rollouts",
                                                   "generated_tokens", "wall_seconds")}, indent=2))


@rro_app.command("train")
def rro_train_command(
    overrides: Optional[list[str]] = typer.Argument(None, help=_OVERRIDES_HELP, show_default=False),
    config: Optional[Path] = typer.Option(None, "--config", "-c", help="YAML run config."),
    model: Optional[str] = typer.Option(None, "--model", help="π_SFT model dir (start and reference); default OUT/sft_model."),
    out: Optional[str] = typer.Option(None, "--out", help="Run directory; the result goes to OUT/dpo_model."),
    data: Optional[str] = typer.Option(None, "--data", help="Preference data dir (default OUT/preferences)."),
    env: Optional[str] = typer.Option(None, "--env", help="Environment name (env.name)."),
) -> None:
    """DPO (TRL) from π_SFT on collected preference pairs; reference = π_SFT."""
    cfg = _rro_config(overrides, config, {"env.name": env, "policy.model": model, "out_dir": out,
                                          "rro.data_dir": data})
    target, metrics = run_dpo_training(cfg)
    typer.echo(f"DPO: {metrics['dpo/pairs']} pairs, {metrics['dpo/steps']} steps, loss "
               f"{metrics['dpo/train_loss']:.4f} -> {target}")


@rro_app.command("run")
def rro_run_command(
    overrides: Optional[list[str]] = typer.Argument(None, help=_OVERRIDES_HELP, show_default=False),
    config: Optional[Path] = typer.Option(None, "--config", "-c", help="YAML run config."),
    env: Optional[str] = typer.Option(None, "--env", help="Environment name (env.name)."),
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
    cfg = _rro_config(overrides, config, {
        "env.name": env, "policy.model": model, "out_dir": out,
        **_collection_settings(exploration, candidates, mc_rollouts, tasks, executor, ray_address)})
    summary = run_rro(cfg)
    typer.echo((Path(cfg.out_dir) / "rro_summary.md").read_text())
    typer.echo(json.dumps({k: summary[k] for k in ("samples_per_step", "steps", "pairs", "rollouts")}))


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
