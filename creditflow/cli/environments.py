"""``creditflow envs`` (list the environments and their options) and ``creditflow envs check``."""

from __future__ import annotations

import inspect
from typing import Optional

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from creditflow import api, envs
from creditflow.arguments import check_number
from creditflow.cli.options import config_overrides
from creditflow.cli.root import app
from creditflow.config import build_config
from creditflow.envs import adapters
from creditflow.errors import UserError

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
    cfg = build_config(None, config_overrides({"env.name": name}, options, prefix="env.kwargs."))
    check_number(success_threshold, "--success-threshold", optional=True)  # NaN or inf: no score reaches it
    checks = api.env_checks(cfg.env.name, cfg.env.kwargs, seeds, success_threshold)
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
