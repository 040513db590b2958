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
