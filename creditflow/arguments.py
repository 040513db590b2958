"""The checks of a Python API call's arguments: types first, one :class:`~creditflow.errors.UserTypeError` (a
``TypeError``) naming the argument and what it takes; then values, one :class:`~creditflow.errors.UserError` (a
``ValueError``, or the caller's subclass of it) naming the argument and the value.

``creditflow.train``, ``sft``, ``evaluate``, ``rro`` and ``audit`` (``creditflow.api``) and the audit's settings
(``creditflow.auditing.AuditSettings``) check theirs with these. A selection (``parts``, ``estimators``,
``epsilons``) takes a list or tuple, or one item alone as a one-item selection: a string is one name, never split
into its characters.
"""

from __future__ import annotations

import math
import numbers
import os
from typing import Any, Sequence

from creditflow.errors import UserError, UserTypeError


def shown(value: Any) -> str:
    """``value`` as an error line shows it: its repr (cut at 60 characters) and its type."""
    text = repr(value)
    return f"{text[:57] + '...' if len(text) > 60 else text} ({type(value).__name__})"


def _is_int(value: Any) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool) and type(value).__name__ != "bool_"


def _is_real(value: Any) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool) and type(value).__name__ != "bool_"


def check_int(value: Any, name: str, minimum: int = 1, what: str = "", error: type[UserError] = UserError,
              type_only: bool = False) -> int:
    """``value`` as an ``int`` of at least ``minimum``: a ``bool``, a float (``2.5``, ``2.0``) or a string is a
    :class:`UserTypeError`, a smaller one an ``error`` (``type_only``: not judged yet). ``what`` says what it
    counts, e.g. "(Monte-Carlo continuations per estimate)"."""
    kind = "a positive integer" if minimum == 1 else f"an integer of at least {minimum}"
    label = f"{name} {what}".rstrip()
    if not _is_int(value):
        raise UserTypeError(f"{label} must be {kind} (int), got {shown(value)}")
    if not type_only and value < minimum:
        raise error(f"{label} must be at least {minimum}, got {value}")
    return int(value)


def check_number(value: Any, name: str, low: float | None = None, high: float | None = None,
                 optional: bool = False, positive: bool = False, error: type[UserError] = UserError,
                 type_only: bool = False) -> float | None:
    """``value`` as a finite ``float`` (in ``[low, high]`` where given; above 0 with ``positive``); ``None`` too
    with ``optional``. Not a number: a :class:`UserTypeError`; NaN, infinite or out of range: an ``error``
    (``type_only``: not judged yet)."""
    if value is None and optional:
        return None
    if not _is_real(value):
        kind = "a number" + (" or None" if optional else "")
        raise UserTypeError(f"{name} must be {kind} (int or float), got {shown(value)}")
    number = float(value)
    if type_only:
        return number
    if not math.isfinite(number):
        raise error(f"{name} must be a finite number, got {value!r}")
    if positive and not number > 0:
        raise error(f"{name} must be above 0, got {value!r}")
    if (low is not None and number < low) or (high is not None and number > high):
        raise error(f"{name} must be in [{low:g}, {high:g}], got {value!r}" if low is not None and high is not None
                    else f"{name} must be at least {low:g}, got {value!r}" if low is not None
                    else f"{name} must be at most {high:g}, got {value!r}")
    return number


def check_names(value: Any, name: str, choices: Sequence[str] | None = None, what: str = "name",
                error: type[UserError] = UserError) -> tuple[str, ...]:
    """A selection of names: a list or tuple of strings, or one string (a one-name selection, never its
    characters); at least one; each of ``choices`` where given (``what``: "part", "estimator", ...)."""
    items = (value,) if isinstance(value, str) else value
    if not isinstance(items, (list, tuple)):
        raise UserTypeError(f"{name} must be a list or tuple of {what}s (or one {what} as a str), got {shown(value)}")
    for i, item in enumerate(items):
        if not isinstance(item, str):
            raise UserTypeError(f"{name}[{i}] must be a {what} (str), got {shown(item)}")
    if not items:
        raise error(f"{name} is empty: give at least one {what}" + (f" ({', '.join(choices)})" if choices else ""))
    if choices is not None:
        bad = [item for item in items if item not in choices]
        if bad:
            plural = what[:-1] + "ies" if what.endswith("y") else what + "s"
            raise error(f"unknown {what} {bad[0]!r} in {name}; {plural}: {', '.join(choices)}")
    return tuple(items)


def check_numbers(value: Any, name: str, low: float | None = None, high: float | None = None,
                  error: type[UserError] = UserError) -> tuple[float, ...]:
    """A selection of numbers: a list or tuple of finite numbers in ``[low, high]``, or one number alone; at least
    one."""
    items = (value,) if _is_real(value) else value
    if not isinstance(items, (list, tuple)):
        raise UserTypeError(f"{name} must be a list or tuple of numbers (or one number), got {shown(value)}")
    if not items:
        raise error(f"{name} is empty: give at least one number")
    return tuple(check_number(item, f"{name}[{i}]", low, high, error=error) for i, item in enumerate(items))


def check_path(value: Any, name: str, what: str) -> None:
    """``value`` is a ``str`` or ``os.PathLike`` (``what`` it names), or None."""
    if value is not None and (isinstance(value, bool) or not isinstance(value, (str, os.PathLike))):
        raise UserTypeError(f"{name} must be {what} (a str or os.PathLike) or None, got {shown(value)}")


def check_lines(items: Any, name: str, what: str = "'key=value' string") -> list[str]:
    """``items`` as a list: a list or tuple of strings (``key=value`` overrides); one string alone is refused
    with the list to pass instead, never split into characters."""
    if not isinstance(items, (list, tuple)):
        hint = f" (pass [{items!r}])" if isinstance(items, str) else ""
        raise UserTypeError(f"{name} must be a list or tuple of {what}s, got {shown(items)}{hint}")
    for i, item in enumerate(items):
        if not isinstance(item, str):
            raise UserTypeError(f"{name}[{i}] must be a {what}, got {shown(item)}")
    return list(items)


def check_callable(value: Any, name: str, what: str, optional: bool = True) -> None:
    """``value`` can be called (``what`` says how it is called), or is None with ``optional``."""
    if not (callable(value) or (optional and value is None)):
        raise UserTypeError(f"{name} must be {what}" + (" or None" if optional else "") + f", got {shown(value)}")


def check_mapping(value: Any, name: str, what: str) -> dict:
    """``value`` as a dict with string keys (``what`` it holds), or ``{}`` for None."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise UserTypeError(f"{name} must be a dict of {what} or None, got {shown(value)}")
    for key in value:
        if not isinstance(key, str):
            raise UserTypeError(f"{name} keys must be {what} names (str), got {shown(key)}")
    return dict(value)
