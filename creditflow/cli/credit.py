"""The commands on credit itself: ``credit`` (score trajectories), ``graph`` (draw a group's state graph) and
``audit`` (every estimator's credit against the true advantage)."""

from __future__ import annotations

import json
import numbers
from pathlib import Path
from typing import Optional

import typer
from rich.markup import escape

from creditflow import api, credit
from creditflow.atomic import write_atomic
from creditflow.cli.options import ENV_HELP, check_input, check_output_file, config_overrides, csv, write_out
from creditflow.cli.root import app
from creditflow.config import build_config
from creditflow.credit.draw import FORMATS, GraphError
from creditflow.credit.registry import (Knobs, estimator_drawing, graph_estimators, knob_lines, parse_key_values,
                                        validate_model)
from creditflow.spill import write_results

_KNOBS_HELP = "Estimator knobs as key=value (e.g. gamma=0.9 state_fn=observation); see the list below."


def _knob_block(title: str, model: type[Knobs]) -> str:
    """``title:`` then one indented ``name=default  docstring`` line per knob of ``model``."""
    return f"{title}:\n" + "\n".join(f"  {line}" for line in knob_lines(model))


def _knobs_epilog(blocks: list[str]) -> str:
    """Help text listing knobs as ``name=default  docstring`` (escaped: typer renders rich markup)."""
    return escape("Knobs (key=value, shown with their defaults; none for an unset number, true/false for "
                  "switches):\n\n" + "\n\n".join(blocks))


def _estimator_title(name: str) -> str:
    """``name`` and, where its knob model says, what it is built from (``Knobs.source``)."""
    source = credit.knob_model(name).source
    return f"{name} ({source})" if source else name


@app.command("credit", epilog=_knobs_epilog([_knob_block(_estimator_title(name), credit.knob_model(name))
                                               for name in credit.estimator_names()]))
def credit_command(
    knobs: Optional[list[str]] = typer.Argument(None, help=_KNOBS_HELP, show_default=False),
    estimator: str = typer.Option(..., "--estimator", "-e", help=f"{', '.join(credit.estimator_names())}."),
    input_path: Path = typer.Option(..., "--in", help="Trajectories (JSONL, one trajectory per line)."),
    output_path: Path = typer.Option(..., "--out", help="Scored trajectories (JSONL), written atomically."),
) -> None:
    """Score trajectories: add process_reward, step_reward and advantage to every step (nothing else changes)."""
    # unknown estimator, bad knob or unusable --out => one line before reading anything
    values = api.credit_knobs(estimator, knobs or [])
    check_input(input_path)
    check_output_file(output_path, "--out")
    scored, batch = write_out(output_path, lambda: api.score_file(input_path, output_path, estimator, values))
    shown = ", ".join(f"{k.split('/', 1)[-1]}={number(v)}" for k, v in scored.metrics.items()
                      if isinstance(v, (int, float)))
    typer.echo(f"{estimator}: scored {batch.n_traj} trajectories, {batch.n_steps} steps -> {output_path} ({shown})",
               err=True)


def number(value: float | int) -> str:
    """A metric for the summary line: counts as integers, other values to 4 significant digits."""
    if isinstance(value, numbers.Integral):
        return str(int(value))
    return f"{value:.4g}" if abs(value) < 1e4 else f"{value:.0f}"


# the estimators that declare a drawing (at registration), the first the default
DRAWN = {name: estimator_drawing(name) for name in graph_estimators()}
DEFAULT_GRAPH = next(iter(DRAWN))


def _graph_block(name: str) -> str:
    """The knobs of ``name``'s graph, titled by its drawing (the default's as "<title> graph")."""
    title = DRAWN[name].title
    return _knob_block(f"{title} graph" if name == DEFAULT_GRAPH else f"{title} (--estimator {name})",
                       DRAWN[name].knobs)


@app.command("graph", epilog=_knobs_epilog([_graph_block(name) for name in DRAWN]))
def graph_command(
    knobs: Optional[list[str]] = typer.Argument(
        None, show_default=False,
        help=f"{DRAWN[DEFAULT_GRAPH].title} graph knobs as key=value (e.g. gamma=0.5); see the list below."),
    input_path: Path = typer.Option(..., "--in", help="Trajectories (JSONL)."),
    group: Optional[str] = typer.Option(None, "--group", "-g", help="group_id to draw (default: the first)."),
    output_path: Path = typer.Option(..., "--out", help="graph.png, .svg, .pdf, .dot or .html"),
    estimator: str = typer.Option(DEFAULT_GRAPH, "--estimator", "-e",
                                  help="whose graph: " + " or ".join(f"{name} ({drawing.shade})"
                                                                     for name, drawing in DRAWN.items())
                                       + "; its knobs apply."),
) -> None:
    """Draw one group's state graph (node shade = R(s), edge colour = r~) with a legend."""
    if estimator not in DRAWN:
        raise GraphError(f"--estimator {estimator!r}: graphs are drawn for {', '.join(DRAWN)}")
    values = validate_model(DRAWN[estimator].knobs, parse_key_values(knobs or []), "graph", strings=True)
    if output_path.suffix.lower() not in FORMATS:
        raise GraphError(f"unsupported output {output_path.name!r}: use one of {', '.join(FORMATS)}")
    check_input(input_path)
    check_output_file(output_path, "--out")
    graph = write_out(output_path, lambda: api.draw_graph(input_path, output_path, group, values, estimator))
    typer.echo(f"group {graph.group_id}: {len(graph.labels)} nodes, {len(graph.edges)} edges -> {output_path}",
               err=True)


@app.command("audit")
def audit_command(
    options: Optional[list[str]] = typer.Argument(None, help="Env options as key=value (e.g. size=7 num_boxes=2).",
                                                  show_default=False),
    env: str = typer.Option("sokoban", "--env", help=ENV_HELP),
    parts: str = typer.Option("coverage,accuracy,race,rro", "--parts",
                              help="Comma-separated parts: coverage, accuracy, race, rro, bias (bias apart from "
                                   "noise: --bias-groups groups of the same tasks)."),
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
    out: Optional[Path] = typer.Option(None, "--out", help="Write every per-seed value here (JSON, written atomically; "
                                                          "its folder is made)."),
    verbose: bool = typer.Option(False, "--verbose", "-v", help="Print every arm's metrics and every paired "
                                 "difference, not only each part's reading and verdict."),
    policy: Optional[str] = typer.Option(
        None, "--policy", help="Behaviour policies, comma-separated: expert (the env's expert at each --epsilon; the "
                               "default), uniform, detour (the expert with a detour at --detour-rate of the states), "
                               "tabular (the race's tabular policy frozen at each --tabular-success)."),
    policy_model: Optional[Path] = typer.Option(
        None, "--policy-model", help="A model (or run) dir: its LM is the behaviour policy (every action of the groups "
                                     "and of the Monte-Carlo continuations sampled from it; alone unless --policy is "
                                     "given too)."),
    detour_rate: float = typer.Option(0.5, "--detour-rate", help="The detour expert's share of states that detour."),
    detour_epsilon: float = typer.Option(0.2, "--detour-epsilon", help="The detour expert's uniform share."),
    tabular_success: str = typer.Option("0.2,0.5,0.8", "--tabular-success",
                                        help="Sampled success at which each tabular snapshot is frozen."),
    subsample: Optional[int] = typer.Option(None, "--subsample", help="Steps per seed whose A^π is estimated, drawn "
                                                                      "at random (default: every step)."),
    bias_groups: int = typer.Option(8, "--bias-groups", help="Groups of every task in the bias part (K >= 2)."),
    bias_subsample: Optional[int] = typer.Option(
        None, "--bias-subsample", help="In the bias part, (task, state, action) triples per seed whose A^π is "
                                       "estimated, drawn at random from those seen in two groups or more (default: "
                                       "every step)."),
    race_lrs: str = typer.Option("0.1,0.3,1,3", "--race-lrs", help="The race's learning-rate grid: each arm runs at "
                                                                   "every rate, its own best picked on tuning seeds."),
    race_tune_seeds: int = typer.Option(10, "--race-tune-seeds", help="Tuning seeds per arm and rate (their pools "
                                                                      "apart from the reported seeds')."),
) -> None:
    """Measure every estimator's credit against the true advantage A^π (Monte Carlo from restored states) and
    race them with a tabular softmax policy: coverage, advantage accuracy, the learning race and RRO's pairs
    (docs/audit.md). Prints a line or two per part and a one-line verdict (the arms closest to A^π, ahead of those
    separated from them over the seeds); --verbose adds means over seeds [95% bootstrap] and paired differences."""
    cfg = build_config(None, config_overrides({"env.name": env}, options, prefix="env.kwargs."))
    if out is not None:
        check_output_file(out, "--out")  # before any work: a file path whose nearest existing folder is writable
    arms = csv(estimators, "--estimators") if estimators is not None else None
    chosen = {"policies": tuple(csv(policy, "--policy"))} if policy is not None else {}
    result = api.audit(cfg.env.name, env_options=cfg.env.kwargs, success_threshold=success_threshold,
                       parts=tuple(csv(parts, "--parts")), seeds=seeds, epsilons=tuple(csv(epsilon, "--epsilon", float)),
                       tasks=tasks, group_size=group_size, m=m, race_seeds=race_seeds, race_episodes=race_episodes,
                       race_pool=race_pool, estimators=arms, model=model, menu_size=menu_size,
                       policy_model=policy_model, detour_rate=detour_rate, detour_epsilon=detour_epsilon,
                       tabular_targets=tuple(csv(tabular_success, "--tabular-success", float)), subsample=subsample,
                       bias_groups=bias_groups, bias_subsample=bias_subsample, race_lrs=tuple(csv(race_lrs, "--race-lrs", float)),
                       race_tune_seeds=race_tune_seeds, **chosen, progress=lambda line: typer.echo(line, err=True))
    for line in result.lines(verbose=verbose):
        typer.echo(line)
    if out is not None:  # atomically (its folder made), and kept in a temporary file when it cannot be written
        text = json.dumps(result.record, indent=1) + "\n"
        write_results(out, lambda path: write_atomic(path, text), "per-seed results", "--out")
