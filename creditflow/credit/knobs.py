"""Estimator knobs: value checks used by the estimators, and ``key=value`` parsing for the CLI.

Knob names are user-facing (``creditflow credit ... gamma=0.9``, trainer config ``credit.gamma=0.9``);
a bad value raises :class:`creditflow.credit.CreditError` naming the knob, what it expects and what it got.
"""

from __future__ import annotations

import math
from typing import Any, Iterable

from creditflow.errors import UserError


class KnobError(UserError):
    """A knob value of the wrong type or out of range, or a malformed ``key=value`` argument."""


def choice(name: str, value: Any, options: Iterable[str]) -> str:
    options = tuple(options)
    if value not in options:
        raise KnobError(f"knob {name} must be one of {', '.join(options)}, got {value!r}")
    return value


def number(name: str, value: Any, *, low: float | None = None, high: float | None = None,
           low_open: bool = False, high_open: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise KnobError(f"knob {name} must be a finite number, got {value!r}")
    bad = (low is not None and (value < low or (low_open and value == low))) or \
          (high is not None and (value > high or (high_open and value == high)))
    if bad:
        lo = "-inf" if low is None else f"{low}"
        hi = "inf" if high is None else f"{high}"
        rng = f"{'(' if low_open else '['}{lo}, {hi}{')' if high_open else ']'}"
        raise KnobError(f"knob {name} must be in {rng}, got {value!r}")
    return float(value)


def integer(name: str, value: Any, *, low: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise KnobError(f"knob {name} must be an integer, got {value!r}")
    if low is not None and value < low:
        raise KnobError(f"knob {name} must be >= {low}, got {value!r}")
    return int(value)


def flag(name: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise KnobError(f"knob {name} must be true or false, got {value!r}")
    return value


# --------------------------------------------------------------------------------------------------
# key=value parsing (CLI)
# --------------------------------------------------------------------------------------------------

_TRUE = {"true", "yes", "on", "1"}
_FALSE = {"false", "no", "off", "0"}
_NONE = {"none", "null", "~"}


def parse_knob_args(items: Iterable[str], defaults: dict[str, Any], where: str = "estimator") -> dict[str, Any]:
    """Turn ``["gamma=0.9", "prune=false"]`` into typed values, using each knob's default for its type.

    Unknown knob names and malformed items raise :class:`KnobError` (one line, listing the knobs).
    """
    out: dict[str, Any] = {}
    for item in items:
        key, sep, raw = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise KnobError(f"expected key=value, got {item!r}")
        if key not in defaults:
            raise KnobError(f"{where} has no knob {key!r}; knobs: {', '.join(defaults) or 'none'}")
        out[key] = _typed(key, raw.strip(), defaults[key])
    return out


def _typed(key: str, raw: str, default: Any) -> Any:
    low = raw.lower()
    if isinstance(default, bool):
        if low in _TRUE:
            return True
        if low in _FALSE:
            return False
        raise KnobError(f"knob {key} expects true or false, got {raw!r}")
    if isinstance(default, int):
        try:
            return int(raw)
        except ValueError:
            raise KnobError(f"knob {key} expects an integer, got {raw!r}") from None
    if isinstance(default, float):
        try:
            return float(raw)
        except ValueError:
            raise KnobError(f"knob {key} expects a number, got {raw!r}") from None
    if default is None:  # optional number
        if low in _NONE:
            return None
        try:
            return float(raw)
        except ValueError:
            raise KnobError(f"knob {key} expects a number or none, got {raw!r}") from None
    return raw
