"""How the ``creditflow`` command starts, ends and reports: exit codes and signals.

Every user or usage error is one line on stderr and exit code 2; an interrupted command says in one line what
it saved and how to continue (exit 130, or 143 for SIGTERM). Ctrl-C and SIGTERM are handled at any moment:

- while the commands import (the first seconds) and while the command exits, nothing is being written, so
  the process ends at once with one line, ``interrupted ...`` (:func:`exit_on_interrupt`), instead of a
  ``KeyboardInterrupt`` traceback from whatever module was being imported;
- while a command runs, SIGTERM stops it the way Ctrl-C does, and the command's own handlers say what they
  saved (:func:`main`);
- at the very end, once the exit handlers have run, the interpreter's own teardown (it collects every object
  and unloads every module: seconds, with torch loaded, on a busy machine) ignores them
  (:func:`ignore_in_final_teardown`): Python puts its handlers back to the defaults there, which would end the
  process without a word.

The signal primitives use the standard library alone and come first: importing this module (the first thing
:mod:`creditflow.cli` does) installs the start-up guard before anything heavy loads, and
:mod:`creditflow.cli` undoes it (:data:`started`) once every command has been imported.
"""

from __future__ import annotations

import atexit
import os
import signal
import sys
import threading
from typing import Callable


def exit_on_interrupt(what: str | None) -> Callable[[], None]:
    """Until the returned function is called, Ctrl-C or SIGTERM write ``interrupted {what}`` (nothing for
    None) to stderr and end the process at once with 128 + the signal's number. Main thread only (elsewhere
    signals cannot be handled and this does nothing)."""
    if threading.current_thread() is not threading.main_thread():
        return lambda: None

    def stop(signum, _frame) -> None:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        except (OSError, ValueError):  # a closed or broken stream: the line below still goes out
            pass
        if what is not None:
            os.write(2, f"interrupted {what}\n".encode())
        os._exit(128 + signum)

    previous = {signum: signal.signal(signum, stop) for signum in (signal.SIGINT, signal.SIGTERM)}

    def restore() -> None:
        for signum, handler in previous.items():
            signal.signal(signum, signal.SIG_DFL if handler is None else handler)

    return restore


def ignore_in_final_teardown() -> None:
    """From the moment this process's exit handlers registered before this call start running (the last
    ones), Ctrl-C and SIGTERM are ignored: only the interpreter's own teardown is left, and its exit code is
    the command's. (Python keeps an ignored signal ignored through its teardown; any other handler goes back
    to the default action.) Exit handlers registered later run before, under the handlers in force."""
    atexit.register(_ignore_interrupts)


def _ignore_interrupts() -> None:
    if threading.current_thread() is threading.main_thread():
        for signum in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, signal.SIG_IGN)


started = exit_on_interrupt("while starting; nothing saved")
"""Undoes the start-up guard; :mod:`creditflow.cli` calls it once the commands are imported (that takes seconds,
and the imports below are the first of them)."""

import difflib  # noqa: E402  (every import from here on runs under the start-up guard)
import shlex  # noqa: E402
import warnings  # noqa: E402
from typing import Optional  # noqa: E402

import typer  # noqa: E402

from creditflow import world  # noqa: E402
from creditflow.errors import RERUN, Interrupted, UserError  # noqa: E402
from creditflow.spill import disk_full_line  # noqa: E402

try:  # typer >= 0.20 ships its own copy of click as typer._click; older typer runs on click itself
    from typer._click import exceptions as click_errors
except ImportError:
    from click import exceptions as click_errors

# Third-party warnings a user cannot act on (deprecations inside transformers / TRL / torch and the like).
_QUIET_MODULES = r"(transformers|trl|torch|accelerate|peft|datasets|huggingface_hub|tokenizers|jericho|textworld)(\.|$)"


def quiet_third_party_warnings() -> None:
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


def run(app: typer.Typer, argv: list[str]) -> int:
    """Run ``app``; returns the exit code after printing the one line of any error or interrupt."""
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
        if world.reports_errors():
            typer.echo(f"error: {exc}", err=True)
        return 2
    except Interrupted as exc:
        if world.current().main:  # every process stops; rank 0 says what was saved
            typer.echo(_interrupt_line(exc, argv), err=True)
        return 130
    except Exception as exc:  # a full disk anywhere is one line too
        line = disk_full_line(exc)
        if line is None:
            raise
        if world.reports_errors():
            typer.echo(f"error: {line}", err=True)
        return 2
    if code == 130:  # an interrupt outside a run: typer turns KeyboardInterrupt into exit code 130
        typer.echo("interrupted; nothing saved", err=True)
    return code if isinstance(code, int) else 0


def main(app: typer.Typer, argv: Optional[list[str]] = None) -> None:
    """Run ``app`` as the ``creditflow`` command and exit with its code (see :func:`creditflow.cli.main`)."""
    entry = argv is None
    if entry:  # the process ends with this command
        ignore_in_final_teardown()
    argv = list(sys.argv[1:] if argv is None else argv)
    _SIGNALS.clear()
    in_main_thread = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, _on_sigterm) if in_main_thread else None
    code = 130
    try:
        quiet_third_party_warnings()
        code = run(app, argv)
    except KeyboardInterrupt:  # outside the command (while a line was being written, say): nothing more to save
        typer.echo("interrupted", err=True)
    finally:
        code = 128 + signal.SIGTERM if code == 130 and _SIGNALS else code
        exiting = exit_on_interrupt("while exiting; the command had finished" if code == 0 else None)
        world.shutdown()
        if not entry:
            exiting()
            if in_main_thread:
                signal.signal(signal.SIGTERM, previous)
    sys.exit(code)
