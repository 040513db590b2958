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
# credit, graph
# --------------------------------------------------------------------------------------------------

_KNOBS_HELP = "Estimator knobs as key=value (e.g. gamma=0.9 state_fn=observation); see the list below."


def _knob_epilog() -> str:
    from creditflow import credit

    parts = []
    for name in credit.estimator_names():
        knobs = ", ".join(f"{k}={v!r}" for k, v in credit.estimator_knobs(name).items()) or "none"
        parts.append(f"{name}: {knobs}")
    return "Knobs (defaults): " + " | ".join(parts)


@app.command("credit", epilog=_knob_epilog())
def credit_command(
    knobs: Optional[list[str]] = typer.Argument(None, help=_KNOBS_HELP, show_default=False),
    estimator: str = typer.Option(..., "--estimator", "-e", help="grpo, rloo, gigpo or rewardflow."),
    input_path: Path = typer.Option(..., "--in", help="Trajectories (JSONL, one trajectory per line)."),
    output_path: Path = typer.Option(..., "--out", help="Scored trajectories (JSONL), written atomically."),
) -> None:
    """Score trajectories: add process_reward, step_reward and advantage to every step."""
    from creditflow import credit
    from creditflow.credit.knobs import parse_knob_args
    from creditflow.rollout.trajectory import read_jsonl, write_jsonl

    credit.get_estimator(estimator)  # unknown name => one line before reading anything
    values = parse_knob_args(knobs or [], credit.estimator_knobs(estimator), where=f"estimator {estimator!r}")
    if not input_path.is_file():
        raise UserError(f"--in {str(input_path)!r}: no such file")
    trajs = read_jsonl(input_path)
    metrics = credit.compute(estimator, trajs, **values)
    write_jsonl(output_path, trajs)
    steps = sum(len(t.steps) for t in trajs)
    shown = ", ".join(f"{k.split('/', 1)[-1]}={v:.4g}" for k, v in metrics.items() if isinstance(v, (int, float)))
    typer.echo(f"{estimator}: scored {len(trajs)} trajectories, {steps} steps -> {output_path} ({shown})", err=True)


@app.command("graph")
def graph_command(
    knobs: Optional[list[str]] = typer.Argument(
        None, show_default=False,
        help="RewardFlow knobs as key=value: gamma, distance, state_fn, similarity, success_threshold, prune, "
             "noop_feedback, max_hops."),
    input_path: Path = typer.Option(..., "--in", help="Trajectories (JSONL)."),
    group: Optional[str] = typer.Option(None, "--group", "-g", help="group_id to draw (default: the first)."),
    output_path: Path = typer.Option(..., "--out", help="graph.png, .svg, .pdf, .dot or .html"),
) -> None:
    """Draw one group's RewardFlow state graph (node shade = R(s), edge colour = r~) with a legend."""
    from creditflow import credit
    from creditflow.credit.draw import GRAPH_KNOBS, group_graph, write_graph
    from creditflow.credit.knobs import parse_knob_args
    from creditflow.credit.rewardflow import check_knobs
    from creditflow.rollout.trajectory import read_jsonl

    defaults = {k: v for k, v in credit.estimator_knobs("rewardflow").items() if k in GRAPH_KNOBS}
    values = parse_knob_args(knobs or [], defaults, where="graph")
    check_knobs(**{**credit.estimator_knobs("rewardflow"), **values})
    from creditflow.credit.draw import FORMATS, GraphError

    if output_path.suffix.lower() not in FORMATS:
        raise GraphError(f"unsupported output {output_path.name!r}: use one of {', '.join(FORMATS)}")
    if not input_path.is_file():
        raise UserError(f"--in {str(input_path)!r}: no such file")
    graph = group_graph(read_jsonl(input_path), group, **values)
    write_graph(graph, output_path)
    typer.echo(f"group {graph.group_id}: {len(graph.labels)} nodes, {len(graph.edges)} edges -> {output_path}",
               err=True)


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
