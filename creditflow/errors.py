"""User-facing errors and interrupts. The CLI prints each as one line: a :class:`UserError` (what and where)
with exit code 2, an :class:`Interrupted` run (what was saved, how to continue) with exit code 130."""

from __future__ import annotations

import difflib


class UserError(ValueError):
    """Bad input from the user: unknown name, bad option, malformed file, missing path. A ``ValueError``, so a
    program calling the Python API catches it as one; an argument of the wrong type is a :class:`UserTypeError`."""


class UserTypeError(UserError, TypeError):
    """An argument of the wrong type (a Python API call): a ``TypeError`` naming the argument and what it takes."""


def noted(exc: UserError, note: str) -> UserError:
    """``exc`` with ``note`` added to its line, of the same type where that type takes a message (an API caller's
    ``except ValueError`` still catches it)."""
    message = f"{exc}; {note}"
    try:
        again = type(exc)(message)
    except Exception:
        return UserError(message)
    return again if str(again) == message else UserError(message)


class Interrupted(Exception):
    """A run stopped by Ctrl-C or SIGTERM. ``saved``: what is on disk now; ``resume``: the command that
    continues it, ``None`` when nothing can be continued, or :data:`RERUN` for "the same command again"."""

    def __init__(self, saved: str, resume: str | None = None):
        self.saved, self.resume = saved, resume
        super().__init__(saved)


RERUN = "<the same command>"  # Interrupted.resume: running the command again continues (RRO collection)


def did_you_mean(word: str, choices, prefix: str = "") -> str:
    """`` (did you mean 'x'?)`` for the choice closest to ``word`` (difflib's ratio above 0.6; ``prefix`` goes in
    front of it), else ``""``: what a one-line error adds after an unknown name."""
    close = difflib.get_close_matches(str(word), [str(c) for c in choices], n=1)
    return f" (did you mean {prefix + close[0]!r}?)" if close else ""
