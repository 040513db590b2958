"""The ``creditflow`` typer app that every command module adds its commands to, and its launch rule.

Launched as N processes (``accelerate launch``, ``torchrun``), ``train``, ``sft`` and ``rro train`` are data
parallel and rank 0 prints their results; every other command refuses in one line (it would run N copies).
"""

from __future__ import annotations

from typing import Optional

import typer

from creditflow import world

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    help="Train LLM agents on multi-turn tasks with terminal rewards: RewardFlow, CRPS, RRO and baselines.",
)


DATA_PARALLEL = {"train", "sft", "rro train"}
"""The commands that run as N launched processes (data parallel); the others refuse to."""


def check_launch(command: Optional[str]) -> None:
    """The launch rule: ``command`` runs as N launched processes only where it is data parallel."""
    if command is not None and command not in DATA_PARALLEL and command != "rro":  # rro: its subcommand decides
        world.refuse_copies(command)


@app.callback()
def _root(ctx: typer.Context) -> None:
    """creditflow: credit assignment for multi-turn LLM agents (RewardFlow, CRPS, RRO, baselines)."""
    check_launch(ctx.invoked_subcommand)
