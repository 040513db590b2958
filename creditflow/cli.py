"""The ``creditflow`` command line (typer).

User errors (:class:`creditflow.errors.UserError`) and usage errors (unknown option, bad flag value) become
one line on stderr and exit code 2; commands write their outputs atomically so a failed run leaves nothing
half-written. Ctrl-C or SIGTERM ends a command with one line, what was saved and how to continue (exit
130, or 143 for SIGTERM), at any moment: also while the imports below run (the first seconds) and while the
command exits (:mod:`creditflow.interrupts`). Warnings from third-party libraries that a user cannot act on
are not shown.

Launched as N processes (``accelerate launch``, ``torchrun``), ``train``, ``sft`` and ``rro train`` are data
parallel and rank 0 prints their results; every other command refuses in one line (it would run N copies).
"""

from __future__ import annotations

from creditflow.interrupts import exit_on_interrupt, ignore_in_final_teardown

_STARTED = exit_on_interrupt("while starting; nothing saved")  # the imports below take seconds; undone at the end

import difflib
import errno
import inspect
import json
import numbers
import os
import shlex
import signal
import sys
import threading
import warnings
from pathlib import Path
from typing import Optional

import typer
from rich.markup import escape

from rich.console import Console
from rich.table import Table

from creditflow import api, credit, envs
from creditflow.config import build_config, setting
from creditflow.configdoc import commented_yaml
from creditflow.envs import adapters
from creditflow.envs.check import check_env
from creditflow.credit.draw import FORMATS, GraphError, group_graph, write_graph
from creditflow.credit.registry import Knobs, knob_lines, parse_key_values, validate_model
from creditflow.credit.graphgpo import GraphGPOKnobs
from creditflow.credit.rewardflow import GraphKnobs
from creditflow.errors import RERUN, Interrupted, UserError
from creditflow.rollout.trajectory import read_jsonl, read_jsonl_lines, write_jsonl
from creditflow.spill import disk_full_line, write_results
from creditflow.trainer import distributed

try:  # typer >= 0.20 ships its own copy of click as typer._click; older typer runs on click itself
    from typer._click import exceptions as click_errors
except ImportError:
    from click import exceptions as click_errors

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    help="Train LLM agents on multi-turn tasks with terminal rewards: RewardFlow, CRPS, RRO and baselines.",
)


DATA_PARALLEL = {"train", "sft", "rro train"}
"""The commands that run as N launched processes (data parallel); the others refuse to."""


def _refuse_copies(command: Optional[str]) -> None:
    if command is not None and command not in DATA_PARALLEL and command != "rro":  # rro: its subcommand decides
        distributed.refuse_copies(command)


@app.callback()
def _root(ctx: typer.Context) -> None:
    """creditflow: credit assignment for multi-turn LLM agents (RewardFlow, CRPS, RRO, baselines)."""
    _refuse_copies(ctx.invoked_subcommand)


# --------------------------------------------------------------------------------------------------
# envs
# --------------------------------------------------------------------------------------------------


envs_app = typer.Typer(help="List the environments (built-in, plug-ins, adapters) and their options; "
                       "`envs check NAME` checks an env against the protocol.")
app.add_typer(envs_app, name="envs")


@envs_app.callback(invoke_without_command=True)
def envs_command(ctx: typer.Context) -> None:
    """List the environments and their options: built-in, plug-ins (entry points of the creditflow.envs group)
    and adapters (<adapter>:<spec>). Any importable env class also works as --env module:Class."""
    if ctx.invoked_subcommand is not None:
        return
    problems = []
    for name in envs.env_names():
        try:
            where = envs.source(name)
        except UserError as exc:  # a plug-in with a built-in's name, or declared twice
            problems.append(str(exc))
            continue
        try:
            head = f"{name}: {envs.summary(name)}" + ("" if where == "built-in" else f" [{where}]")
            options = envs.env_options(name)
        except UserError as exc:
            if where != "built-in":  # a plug-in that does not import, or has no reset/step
                problems.append(str(exc))
                continue
            typer.echo(f"{name}: {envs.summary(name)}\n    (unavailable: {exc})")
            continue
        typer.echo(head)
        _echo_options(options)
    for prefix, target in adapters.ADAPTERS.items():
        try:
            typer.echo(f"{prefix}:<spec>: {envs.summary(prefix + ':')} [adapter: {target}]")
            _echo_options(envs.env_options(prefix + ":"))
        except UserError as exc:
            typer.echo(f"{prefix}:<spec>: [adapter: {target}]\n    (unavailable: {exc})")
    for problem in problems:
        typer.echo(f"error: {problem}", err=True)
    if problems:
        raise typer.Exit(2)


def _echo_options(options: dict) -> None:
    for key, default in options.items():
        shown = "required" if default is inspect.Parameter.empty else repr(default)
        typer.echo(f"    {key} = {shown}")


_CHECK_MARKS = {"pass": "[green]pass[/]", "fail": "[bold red]FAIL[/]", "warn": "[yellow]warn[/]", "skip": "[dim]skip[/]"}


@envs_app.command("check")
def envs_check_command(
    name: str = typer.Argument(..., help="Env name (built-in, plug-in, <adapter>:<spec>) or module:Class.",
                               show_default=False, metavar="NAME_OR_PATH"),
    options: Optional[list[str]] = typer.Argument(None, help="Env options as key=value (e.g. size=5).",
                                                  show_default=False),
    seeds: int = typer.Option(3, "--seeds", min=1, help="Seeds to play (0 .. N-1)."),
    success_threshold: Optional[float] = typer.Option(
        None, "--success-threshold", help="The expert succeeds on won, or on score >= this (env.success_threshold)."),
) -> None:
    """Check an env against the protocol: reset/step values and info keys, determinism under a seed,
    snapshot/restore or verified replay, state_key stable across replay, invalid and non-text actions, the
    expert (expert_actions) reaching won, and truncate() where the env has it; warns when episodes can run over
    30 turns. Prints a table; exit code 1 when a check fails."""
    cfg = build_config(None, [setting("env.name", name), *(f"env.kwargs.{item}" for item in options or [])])
    factory = envs.factory(cfg.env.name, **cfg.env.kwargs)
    checks = check_env(factory, list(range(seeds)), success_threshold=success_threshold)
    where = envs.source(name)
    table = Table(title=f"creditflow envs check {name}" + ("" if where in ("built-in", name) else f" ({where})"),
                  title_justify="left")
    table.add_column("check")
    table.add_column("result")
    table.add_column("detail", overflow="fold")
    for check in checks:
        table.add_row(check.name, _CHECK_MARKS[check.status], escape(check.detail))
    Console().print(table)
    failed = [c.name for c in checks if c.status == "fail"]
    if failed:
        typer.echo(f"{len(failed)} check(s) failed: {', '.join(failed)}", err=True)
        raise typer.Exit(1)


# --------------------------------------------------------------------------------------------------
# training
# --------------------------------------------------------------------------------------------------

_ENV_HELP = ("Environment (env.name): a name `creditflow envs` lists (built-in or plug-in), <adapter>:<spec>, or "
             "module:Class.")
_OVERRIDES_HELP = "Config overrides as key=value (e.g. rl.lr=1e-5 rollout.group_size=8 env.kwargs.size=7)."


@app.command("train", context_settings={"allow_extra_args": False})
def train_command(
    overrides: Optional[list[str]] = typer.Argument(None, help=_OVERRIDES_HELP, show_default=False),
    config: Optional[Path] = typer.Option(None, "--config", "-c", help="YAML run config."),
    env: Optional[str] = typer.Option(None, "--env", help=_ENV_HELP),
    algo: Optional[str] = typer.Option(None, "--algo", help="Credit estimator (rl.algo): grpo, rloo, ..."),
    model: Optional[str] = typer.Option(None, "--model", help="Local HF model dir (policy.model); default: tiny + SFT."),
    out: Optional[str] = typer.Option(None, "--out", help="Run directory (out_dir)."),
    resume: Optional[Path] = typer.Option(None, "--resume", help="Continue the run in this directory exactly."),
    curriculum: Optional[str] = typer.Option(None, "--curriculum",
                                             help="Start-state curriculum (curriculum.name): none, crps, expreplay."),
) -> None:
    """Multi-turn group RL (PPO-clip + KL) with the chosen credit estimator (policy.lora=true: LoRA adapters only)."""
    extra = [setting("env.name", env)] if env is not None else []
    if resume is not None and config is not None:
        raise UserError("--config conflicts with --resume: a resumed run keeps its own config.yaml "
                        "(give changes as key=value; they are recorded there)")
    result = api.train(config, model=model, out=out, algo=algo, curriculum=curriculum,
                       overrides=[*extra, *(overrides or [])], resume=resume)
    if distributed.current().main:
        last = result.metrics
        typer.echo(f"done: step {last.get('step', 0)}, eval success {last.get('eval/success_rate', float('nan')):.3f} "
                   f"-> {result.run_dir}")


@app.command("sft")
def sft_command(
    overrides: Optional[list[str]] = typer.Argument(None, help=_OVERRIDES_HELP, show_default=False),
    config: Optional[Path] = typer.Option(None, "--config", "-c", help="YAML run config."),
    env: Optional[str] = typer.Option(None, "--env", help=_ENV_HELP),
    model: Optional[str] = typer.Option(None, "--model", help="Local HF model dir; default: build the tiny one."),
    out: Optional[str] = typer.Option(None, "--out", help="Run directory; the result goes to OUT/sft_model."),
    tools: bool = typer.Option(False, "--tools", help="Tool-calling demonstrations and a model whose chat template "
                               "renders and parses tool calls, for TRL's environment_factory (sft.tools=true; an env "
                               "whose actions are tool calls, e.g. trl:module:Class)."),
) -> None:
    """Supervised fine-tuning on the env's expert trajectories (loss on response tokens only; policy.lora=true: a LoRA
    adapter, merged into the saved model)."""
    extra = [setting("env.name", env)] if env is not None else []
    if tools:
        extra.append("sft.tools=true")
    api.sft(config, model=model, out=out, overrides=[*extra, *(overrides or [])])


@app.command("config")
def config_command(
    overrides: Optional[list[str]] = typer.Argument(None, help=_OVERRIDES_HELP, show_default=False),
    config: Optional[Path] = typer.Option(None, "--config", "-c", help="YAML run config to start from."),
) -> None:
    """Print the full run config as commented YAML (each field's docstring and constraints).

    The defaults, or what --config and key=value overrides give; `creditflow train --config FILE` reads the
    output back as it is."""
    typer.echo(commented_yaml(build_config(config, list(overrides or []))), nl=False)


# generation backend options shared by ``eval`` and ``rro collect``
_BACKEND = typer.Option(None, "--backend", help="Generation backend (policy.backend): hf, vllm or openai.")
_BASE_URL = typer.Option(None, "--base-url", help="backend openai: server API root, e.g. http://127.0.0.1:8000/v1.")
_MODEL_NAME = typer.Option(None, "--model-name", help="backend openai: the model's name on the server.")


def _backend_settings(backend: Optional[str], base_url: Optional[str],
                      model_name: Optional[str]) -> dict[str, Optional[str]]:
    """The backend options as config keys (None: not given, the config's value stays)."""
    return {"policy.backend": backend, "policy.base_url": base_url, "policy.model_name": model_name}


@app.command("eval")
def eval_command(
    model: Optional[str] = typer.Option(None, "--model", help="Local HF model directory or checkpoint to evaluate "
                                        "(a run directory: its newest checkpoint; backend openai: its tokenizer; "
                                        "default --model-name when that is a directory)."),
    env: str = typer.Option("sokoban", "--env", help=_ENV_HELP),
    episodes: int = typer.Option(64, "--episodes", min=1, help="Held-out tasks (one episode each)."),
    split: str = typer.Option("validation", "--split",
                              help="Held-out split: validation (for choices) or test (for reported numbers)."),
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
    extra = [setting(k, v) for k, v in _backend_settings(backend, base_url, model_name).items() if v is not None]
    cfg = build_config(None, [setting("env.name", env), setting("policy.model", model), *extra, *(overrides or [])])
    if out is not None:
        _check_output_file(out, "--out")
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
    overrides: Optional[list[str]] = typer.Argument(None, help=_OVERRIDES_HELP, show_default=False),
    env: Optional[str] = typer.Option(None, "--env", help=_ENV_HELP + " Default sokoban."),
    out: Optional[str] = typer.Option(None, "--out", help="Run directory (default runs/demo)."),
    quick: bool = typer.Option(False, "--quick",
                               help="Tiny-budget smoke run: 3-5 minutes on 2 CPU cores (measured), with progress bars."),
    config: Optional[Path] = typer.Option(None, "--config", "-c", help="YAML overriding the demo defaults."),
) -> None:
    """The main job: build the tiny policy, SFT on expert demos, RewardFlow RL, evaluate, write a report."""
    report = api.demo(config, env=env, out=out, quick=quick, overrides=list(overrides or []))
    typer.echo((report / "summary.md").read_text())
    typer.echo(f"report: {report}")


def _check_output_file(path: Path, option: str) -> None:
    """An output file path that can be written, checked before any work: not a directory, and its nearest
    existing parent a writable directory (for a symbolic link, the file it points to, which is written)."""
    if path.is_dir():
        raise UserError(f"{option} {str(path)!r} is a directory; give a file path")
    try:
        os.path.realpath(path, strict=True)
    except OSError as exc:  # a loop of symbolic links (a new file, or a link to one, is fine)
        if exc.errno == errno.ELOOP:
            raise UserError(f"{option} {str(path)!r}: {exc.strerror}") from None
    parent = Path(os.path.realpath(path)).parent
    while not parent.exists():
        parent = parent.parent
    if not parent.is_dir():
        raise UserError(f"{option} {str(path)!r}: {str(parent)!r} is a file, not a directory")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise UserError(f"{option} {str(path)!r}: cannot write in {str(parent)!r} (permission denied)")


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
    """Score trajectories: add process_reward, step_reward and advantage to every step (nothing else changes)."""
    # unknown estimator, bad knob or unusable --out => one line before reading anything
    values = credit.validate_knobs(estimator, parse_key_values(knobs or []), strings=True)
    _check_input(input_path)
    _check_output_file(output_path, "--out")
    lines = read_jsonl_lines(input_path)
    if not lines:
        raise UserError(f"--in {str(input_path)!r}: no trajectories")
    scored, batch = _write(output_path, lambda: credit.score_lines(lines, estimator, values, output_path))
    shown = ", ".join(f"{k.split('/', 1)[-1]}={_number(v)}" for k, v in scored.metrics.items()
                      if isinstance(v, (int, float)))
    typer.echo(f"{estimator}: scored {batch.n_traj} trajectories, {batch.n_steps} steps -> {output_path} ({shown})",
               err=True)


GRAPH_ESTIMATORS = {"rewardflow": GraphKnobs, "graphgpo": GraphGPOKnobs}


@app.command("graph", epilog=_knobs_epilog([_knob_block("RewardFlow graph", GraphKnobs),
                                            _knob_block("GraphGPO (--estimator graphgpo)", GraphGPOKnobs)]))
def graph_command(
    knobs: Optional[list[str]] = typer.Argument(
        None, show_default=False, help="RewardFlow graph knobs as key=value (e.g. gamma=0.5); see the list below."),
    input_path: Path = typer.Option(..., "--in", help="Trajectories (JSONL)."),
    group: Optional[str] = typer.Option(None, "--group", "-g", help="group_id to draw (default: the first)."),
    output_path: Path = typer.Option(..., "--out", help="graph.png, .svg, .pdf, .dot or .html"),
    estimator: str = typer.Option("rewardflow", "--estimator", "-e",
                                  help="whose graph: rewardflow (R(s) = gamma^d, kept transitions) or graphgpo "
                                       "(omega^d(s), every step an edge); its knobs apply."),
) -> None:
    """Draw one group's state graph (node shade = R(s), edge colour = r~) with a legend."""
    if estimator not in GRAPH_ESTIMATORS:
        raise GraphError(f"--estimator {estimator!r}: graphs are drawn for {', '.join(GRAPH_ESTIMATORS)}")
    values = validate_model(GRAPH_ESTIMATORS[estimator], parse_key_values(knobs or []), "graph", strings=True)
    if output_path.suffix.lower() not in FORMATS:
        raise GraphError(f"unsupported output {output_path.name!r}: use one of {', '.join(FORMATS)}")
    _check_input(input_path)
    _check_output_file(output_path, "--out")
    graph = group_graph(read_jsonl(input_path), group, values, estimator=estimator)
    _write(output_path, lambda: write_graph(graph, output_path))
    typer.echo(f"group {graph.group_id}: {len(graph.labels)} nodes, {len(graph.edges)} edges -> {output_path}",
               err=True)


def _check_input(path: Path) -> None:
    """``--in`` is an existing file: one line otherwise."""
    if path.is_dir():
        raise UserError(f"--in {str(path)!r}: is a directory, not a JSONL file")
    if not path.exists():
        raise UserError(f"--in {str(path)!r}: no such file")


def _write(path: Path, write):
    """Return ``write()``; an OS error (disk full, permissions) is one line naming ``--out``."""
    try:
        return write()
    except OSError as exc:
        raise UserError(f"--out {str(path)!r}: cannot write ({exc.strerror or exc})") from None


def _number(value: float | int) -> str:
    """A metric for the summary line: counts as integers, other values to 4 significant digits."""
    if isinstance(value, numbers.Integral):
        return str(int(value))
    return f"{value:.4g}" if abs(value) < 1e4 else f"{value:.0f}"


# --------------------------------------------------------------------------------------------------
# audit
# --------------------------------------------------------------------------------------------------


def _csv(text: str, option: str, kind=str) -> list:
    items = [t.strip() for t in text.split(",") if t.strip()]
    try:
        return [kind(t) for t in items]
    except ValueError:
        raise UserError(f"{option}: expected comma-separated {kind.__name__} values, got {text!r}") from None


@app.command("audit")
def audit_command(
    options: Optional[list[str]] = typer.Argument(None, help="Env options as key=value (e.g. size=7 num_boxes=2).",
                                                  show_default=False),
    env: str = typer.Option("sokoban", "--env", help=_ENV_HELP),
    parts: str = typer.Option("coverage,accuracy,race,rro", "--parts",
                              help="Comma-separated parts: coverage, accuracy, race, rro."),
    seeds: int = typer.Option(20, "--seeds", help="Seeds of coverage, accuracy and RRO pairs (0 .. N-1)."),
    epsilon: str = typer.Option("0.5,0.75,0.9", "--epsilon",
                                help="Behaviour policies: the env's expert mixed with uniform admissible actions at "
                                     "each ε (comma-separated; 1 = uniform, needs no expert)."),
    tasks: int = typer.Option(4, "--tasks", help="Tasks (groups) per seed."),
    group_size: int = typer.Option(8, "--group-size", "-G", help="Rollouts per group."),
    m: int = typer.Option(32, "--mc", "-M", help="Monte-Carlo continuations per Q and per V estimate."),
    race_seeds: int = typer.Option(50, "--race-seeds", help="Seeds per race arm."),
    race_episodes: int = typer.Option(1280, "--race-episodes", help="Training episodes per race run."),
    race_pool: int = typer.Option(8, "--race-pool", help="Tasks in the race's fixed pool."),
    estimators: Optional[str] = typer.Option(None, "--estimators", help="Comma-separated estimator arms (default: "
                                             "every registered estimator and preset); the race runs these, and GRPO "
                                             "+ CRPS / + ExpReplay where grpo is one of them."),
    success_threshold: Optional[float] = typer.Option(
        None, "--success-threshold", help="Success is won, or score >= this (env.success_threshold)."),
    model: Optional[Path] = typer.Option(
        None, "--model", help="A model (or run) dir: at free-text states (WebShop's search, SQL queries) the "
                              "behaviour policy chooses among MENU_SIZE actions sampled from it plus the expert's."),
    menu_size: int = typer.Option(4, "--menu-size", help="Actions sampled from --model at each free-text state."),
    out: Optional[Path] = typer.Option(None, "--out", help="Write every per-seed value here (JSON)."),
) -> None:
    """Measure every estimator's credit against the true advantage A^π (Monte Carlo from restored states) and
    race them with a tabular softmax policy: coverage, advantage accuracy, the learning race and RRO's pairs
    (docs/audit.md). Prints means over seeds [95% bootstrap] and paired differences."""
    cfg = build_config(None, [f"env.name={env}", *(f"env.kwargs.{item}" for item in options or [])])
    if out is not None:
        _check_output_file(out, "--out")
    result = api.audit(cfg.env.name, env_options=cfg.env.kwargs, success_threshold=success_threshold,
                       parts=tuple(_csv(parts, "--parts")), seeds=seeds, epsilons=tuple(_csv(epsilon, "--epsilon", float)),
                       tasks=tasks, group_size=group_size, m=m, race_seeds=race_seeds, race_episodes=race_episodes,
                       race_pool=race_pool, estimators=_csv(estimators, "--estimators") if estimators else None,
                       model=model, menu_size=menu_size, progress=lambda line: typer.echo(line, err=True))
    for line in result.lines():
        typer.echo(line)
    if out is not None:
        _write(out, lambda: out.write_text(json.dumps(result.record, indent=1) + "\n", encoding="utf-8"))


# --------------------------------------------------------------------------------------------------
# rro
# --------------------------------------------------------------------------------------------------

rro_app = typer.Typer(no_args_is_help=True, help="RRO: MC process rewards, reward-rising sampling, DPO.")
app.add_typer(rro_app, name="rro")


@rro_app.callback()
def _rro_root(ctx: typer.Context) -> None:
    """RRO: MC process rewards, reward-rising sampling, DPO."""
    if ctx.invoked_subcommand is not None:
        _refuse_copies(f"rro {ctx.invoked_subcommand}")


def _rro_overrides(overrides, pairs: dict) -> list[str]:
    extra = list(overrides or [])
    for key, value in pairs.items():
        if value is not None:
            extra.insert(0, setting(key, value))
    return extra


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
    env: Optional[str] = typer.Option(None, "--env", help=_ENV_HELP),
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
    extra = _rro_overrides(overrides, {
        "env.name": env, "policy.model": model, "out_dir": out, "rro.data_dir": data,
        **_collection_settings(exploration, candidates, mc_rollouts, tasks, executor, ray_address),
        **_backend_settings(backend, base_url, model_name)})
    summary = api.collect_preferences(config, overrides=extra)
    typer.echo(json.dumps({k: summary[k] for k in ("samples_per_step", "steps", "pairs", "rollouts",
                                                   "generated_tokens", "wall_seconds")}, indent=2))


@rro_app.command("train")
def rro_train_command(
    overrides: Optional[list[str]] = typer.Argument(None, help=_OVERRIDES_HELP, show_default=False),
    config: Optional[Path] = typer.Option(None, "--config", "-c", help="YAML run config."),
    model: Optional[str] = typer.Option(None, "--model", help="π_SFT model dir (start and reference); default OUT/sft_model."),
    out: Optional[str] = typer.Option(None, "--out", help="Run directory; the result goes to OUT/dpo_model."),
    data: Optional[str] = typer.Option(None, "--data", help="Preference data dir (default OUT/preferences)."),
    env: Optional[str] = typer.Option(None, "--env", help=_ENV_HELP),
) -> None:
    """DPO (TRL) from π_SFT on collected preference pairs; reference = π_SFT (policy.lora=true: a LoRA adapter,
    merged into the saved model)."""
    extra = _rro_overrides(overrides, {"env.name": env, "policy.model": model, "out_dir": out, "rro.data_dir": data})
    result = api.dpo(config, overrides=extra)
    if distributed.current().main:
        metrics = result.metrics
        typer.echo(f"DPO: {metrics['dpo/pairs']} pairs, {metrics['dpo/steps']} steps, loss "
                   f"{metrics['dpo/train_loss']:.4f} -> {result.model}")


@rro_app.command("run")
def rro_run_command(
    overrides: Optional[list[str]] = typer.Argument(None, help=_OVERRIDES_HELP, show_default=False),
    config: Optional[Path] = typer.Option(None, "--config", "-c", help="YAML run config."),
    env: Optional[str] = typer.Option(None, "--env", help=_ENV_HELP),
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
    result = api.rro(build_config(config, _rro_overrides(overrides, {
        "env.name": env, "policy.model": model, "out_dir": out,
        **_collection_settings(exploration, candidates, mc_rollouts, tasks, executor, ray_address)})))
    typer.echo((result.run_dir / "rro_summary.md").read_text())
    typer.echo(json.dumps({k: result.metrics[k] for k in ("samples_per_step", "steps", "pairs", "rollouts")}))


# Third-party warnings a user cannot act on (deprecations inside transformers / TRL / torch and the like).
_QUIET_MODULES = r"(transformers|trl|torch|accelerate|peft|datasets|huggingface_hub|tokenizers|jericho|textworld)(\.|$)"


def _quiet_third_party_warnings() -> None:
    for category in (FutureWarning, DeprecationWarning, UserWarning):
        warnings.filterwarnings("ignore", category=category, module=_QUIET_MODULES)


_SIGNALS: list[int] = []  # signals received during this command (SIGTERM: exit 143 instead of 130)


def _on_sigterm(signum, _frame) -> None:
    """SIGTERM stops a run the way Ctrl-C does, so it says what it saved."""
    _SIGNALS.append(signum)
    raise KeyboardInterrupt


def _usage_line(exc: click_errors.UsageError) -> str:
    """One line for a usage error: what is wrong, a close option name when there is one, where help is."""
    ctx = exc.ctx
    where = ctx.command_path if ctx is not None else "creditflow"
    # click's own suggestion for an unknown option is any option that shares a few letters (--bogus: --out)
    message = (exc.message if isinstance(exc, click_errors.NoSuchOption) else exc.format_message()).rstrip(".")
    if isinstance(exc, click_errors.NoSuchOption) and ctx is not None:
        names = [opt for param in ctx.command.params for opt in (*param.opts, *param.secondary_opts)
                 if opt.startswith("-")]
        close = difflib.get_close_matches(exc.option_name.lstrip("-"), [n.lstrip("-") for n in names], n=1,
                                          cutoff=0.7)
        if close:
            message += f" (did you mean --{close[0]}?)"
    return f"{where}: {message}; see `{where} --help`"


def _interrupt_line(exc: Interrupted, argv: list[str]) -> str:
    if exc.resume is None:
        return f"interrupted {exc.saved}"
    command = shlex.join(["creditflow", *argv]) if exc.resume == RERUN else exc.resume
    return f"interrupted {exc.saved}; continue with: {command}"


def _run(argv: list[str]) -> int:
    """Run the app; returns the exit code after printing the one line of any error or interrupt."""
    try:
        code = app(args=argv, prog_name="creditflow", standalone_mode=False)
    except click_errors.NoArgsIsHelpError as exc:
        typer.echo(exc.ctx.get_help() if exc.ctx is not None else str(exc), err=True)
        return 2
    except click_errors.UsageError as exc:
        typer.echo(f"error: {_usage_line(exc)}", err=True)
        return 2
    except click_errors.ClickException as exc:
        typer.echo(f"error: {exc.format_message()}", err=True)
        return exc.exit_code
    except typer.Abort:
        typer.echo("error: aborted (end of input)", err=True)
        return 1
    except UserError as exc:
        if distributed.reports_errors():
            typer.echo(f"error: {exc}", err=True)
        return 2
    except Interrupted as exc:
        if distributed.current().main:  # every process stops; rank 0 says what was saved
            typer.echo(_interrupt_line(exc, argv), err=True)
        return 130
    except Exception as exc:  # a full disk anywhere is one line too
        line = disk_full_line(exc)
        if line is None:
            raise
        if distributed.reports_errors():
            typer.echo(f"error: {line}", err=True)
        return 2
    if code == 130:  # an interrupt outside a run: typer turns KeyboardInterrupt into exit code 130
        typer.echo("interrupted; nothing saved", err=True)
    return code if isinstance(code, int) else 0


def main(argv: Optional[list[str]] = None) -> None:
    """Console entry point: every user or usage error is one line + exit 2, an interrupt one line + exit 130
    (143 for SIGTERM). Called without ``argv`` (the ``creditflow`` command), Ctrl-C or SIGTERM after the
    command has ended end the process at once (with one line when it had succeeded), and the interpreter's
    final teardown ignores them; with ``argv`` (in a program) the signal handlers are put back as they were."""
    entry = argv is None
    if entry:  # the process ends with this command
        ignore_in_final_teardown()
    argv = list(sys.argv[1:] if argv is None else argv)
    _SIGNALS.clear()
    in_main_thread = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, _on_sigterm) if in_main_thread else None
    code = 130
    try:
        _quiet_third_party_warnings()
        code = _run(argv)
    except KeyboardInterrupt:  # outside the command (while a line was being written, say): nothing more to save
        typer.echo("interrupted", err=True)
    finally:
        code = 128 + signal.SIGTERM if code == 130 and _SIGNALS else code
        exiting = exit_on_interrupt("while exiting; the command had finished" if code == 0 else None)
        distributed.shutdown()
        if not entry:
            exiting()
            if in_main_thread:
                signal.signal(signal.SIGTERM, previous)
    sys.exit(code)


_STARTED()  # the imports are done: from here on, main() and the commands handle Ctrl-C and SIGTERM

if __name__ == "__main__":
    main()
