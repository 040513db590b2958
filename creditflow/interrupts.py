"""Ctrl-C and SIGTERM where no command handles them: while the CLI's imports run (its first seconds) and
while it exits.

Nothing is being written then, so the process ends at once with one line on stderr, ``interrupted ...``,
and exit code 130 (Ctrl-C) or 143 (SIGTERM), instead of a ``KeyboardInterrupt`` traceback from whatever
module was being imported. At the very end, once the exit handlers have run, the interpreter's own teardown
(it collects every object and unloads every module: seconds, with torch loaded, on a busy machine) ignores
them: Python puts its handlers back to the defaults there, which would end the process without a word.
This module imports nothing heavy: it is the first thing ``creditflow.cli`` runs.
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
