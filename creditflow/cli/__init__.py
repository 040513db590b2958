"""The ``creditflow`` command line (typer).

User errors (:class:`creditflow.errors.UserError`) and usage errors (unknown option, bad flag value) become
one line on stderr and exit code 2; commands write their outputs atomically so a failed run leaves nothing
half-written. Ctrl-C or SIGTERM ends a command with one line, what was saved and how to continue (exit
130, or 143 for SIGTERM), at any moment: also while the imports below run (the first seconds) and while the
command exits (:mod:`creditflow.cli.runtime`). Warnings from third-party libraries that a user cannot act on
are not shown.

Launched as N processes (``accelerate launch``, ``torchrun``), ``train``, ``sft`` and ``rro train`` are data
parallel and rank 0 prints their results; every other command refuses in one line (it would run N copies).

The package: ``runtime`` (exit codes and signals), ``root`` (the typer app and its launch rule), ``options``
(shared options, flags -> ``key=value`` overrides, file checks), and the commands, each calling
:mod:`creditflow.api`: ``environments`` (``envs``), ``runs`` (``train``, ``sft``, ``config``, ``eval``,
``export``, ``demo``), ``credit`` (``credit``, ``graph``, ``audit``) and ``rro``.
"""

from __future__ import annotations

from creditflow.cli import runtime  # first: its start-up guard covers the imports below (seconds)

# the command modules add their commands to ``app`` in this order, the order of ``creditflow --help``
from creditflow.cli import environments, runs, credit, rro  # noqa: E402,F401,I001
from creditflow.cli.root import app  # noqa: E402

__all__ = ["app", "main"]


def main(argv: list[str] | None = None) -> None:
    """Console entry point: every user or usage error is one line + exit 2, an interrupt one line + exit 130
    (143 for SIGTERM). Called without ``argv`` (the ``creditflow`` command), Ctrl-C or SIGTERM after the
    command has ended end the process at once (with one line when it had succeeded), and the interpreter's
    final teardown ignores them; with ``argv`` (in a program) the signal handlers are put back as they were."""
    runtime.main(app, argv)


runtime.started()  # the imports are done: from here on, main() and the commands handle Ctrl-C and SIGTERM
