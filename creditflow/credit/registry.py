"""The estimator registry: each name maps to a function and a typed knob model; knobs are checked here only.

An *estimator* is a function ``fn(trajectories: list[Trajectory], knobs: K) -> dict``, registered with
``@register_estimator("name", knobs=K)`` where ``K`` is a :class:`Knobs` model (pydantic, one field per knob,
documented by the field's docstring). It sets ``step.advantage`` (and, where it has them,
``step.process_reward`` / ``step.step_reward``) on every step of every trajectory, grouping by ``group_id``,
and returns a dict of metrics to log. Estimators never check their knobs: they receive a validated model.

Knob values are checked in one place, :func:`validate_model` (through :func:`validate_knobs` for a registered
estimator): Python values from the trainer's ``rl.credit``, :func:`compute` and :func:`score`, or the
``key=value`` strings of the CLI (:func:`parse_key_values`, ``strings=True``). A bad knob raises a one-line
:class:`CreditError` naming the knob, what it expects and what it got.
"""

from __future__ import annotations

import copy
import typing
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping, TypeVar

import annotated_types
from pydantic import BaseModel, ConfigDict, ValidationError
from pydantic.fields import FieldInfo

from creditflow.errors import UserError
from creditflow.rollout.trajectory import Trajectory


class CreditError(UserError):
    """Bad estimator name or knob."""


class Knobs(BaseModel):
    """Base of every knob model: unknown knobs are errors, values are never coerced, and instances are frozen.

    Strict means ``"abc"`` is no number, ``6.5`` no integer and ``1`` no bool; an integer is still a valid
    float (``gamma=1``). NaN and infinities are rejected.
    """

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True, allow_inf_nan=False,
                              use_attribute_docstrings=True)


K = TypeVar("K", bound=Knobs)
Estimator = Callable[[list[Trajectory], Any], dict]


@dataclass(frozen=True)
class Registered:
    """A registered estimator: its function and its knob model."""

    fn: Estimator
    knobs: type[Knobs]


_ESTIMATORS: dict[str, Registered] = {}


def register_estimator(name: str, *, knobs: type[Knobs]) -> Callable[[Estimator], Estimator]:
    """Register ``fn(trajectories, knobs: <knobs model>) -> dict`` under ``name``."""

    def deco(fn: Estimator) -> Estimator:
        _ESTIMATORS[name] = Registered(fn, knobs)
        return fn

    return deco


def estimator_names() -> list[str]:
    """Registered estimator names, sorted."""
    return sorted(_ESTIMATORS)


def _registered(name: str) -> Registered:
    if name not in _ESTIMATORS:
        raise CreditError(f"unknown estimator {name!r}; available: {', '.join(estimator_names())}")
    return _ESTIMATORS[name]


def get_estimator(name: str) -> Estimator:
    """The function registered as ``name``; an unknown name is a :class:`CreditError`."""
    return _registered(name).fn


def knob_model(name: str) -> type[Knobs]:
    """The knob model of estimator ``name`` (its fields are the knobs, with defaults and docstrings)."""
    return _registered(name).knobs


def validate_knobs(name: str, knobs: Mapping[str, Any], *, strings: bool = False) -> Knobs:
    """Check the knobs of estimator ``name`` (``strings``: raw ``key=value`` text); returns its knob model."""
    return validate_model(knob_model(name), knobs, f"estimator {name!r}", strings=strings)


def compute(name: str, trajectories: list[Trajectory], **knobs) -> dict:
    """Run estimator ``name`` in place on ``trajectories``; returns its metrics."""
    return get_estimator(name)(trajectories, validate_knobs(name, knobs))


def score(trajectories: Iterable[Trajectory | dict], estimator: str = "grpo", **knobs) -> list[Trajectory]:
    """Score copies of ``trajectories`` (``Trajectory`` objects or dicts in the JSONL schema)."""
    trajs = [
        copy.deepcopy(t) if isinstance(t, Trajectory) else Trajectory.from_dict(t, f"trajectory {i}")
        for i, t in enumerate(trajectories)
    ]
    compute(estimator, trajs, **knobs)
    return trajs


# --------------------------------------------------------------------------------------------------
# validation and its one-line errors
# --------------------------------------------------------------------------------------------------

NONE_WORDS = ("none", "null")  # ``key=none`` for a knob that may be None


def parse_key_values(items: Iterable[str]) -> dict[str, str]:
    """Split ``["gamma=0.9", "prune=false"]`` into ``{"gamma": "0.9", "prune": "false"}`` (values unchecked)."""
    out: dict[str, str] = {}
    for item in items:
        key, sep, raw = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise CreditError(f"expected key=value, got {item!r}")
        out[key] = raw.strip()
    return out


def validate_model(model: type[K], values: Mapping[str, Any], where: str, *, strings: bool = False) -> K:
    """Build ``model`` from ``values``: Python values, or with ``strings`` the text of ``key=value`` arguments
    (numbers and bools parsed by pydantic, ``none``/``null`` for a knob that may be None).

    Raises a one-line :class:`CreditError`: ``<where> has no knob 'x'; knobs: ...`` for unknown names, else
    ``knob x <expects ...>, got <value>`` for each bad value.
    """
    try:
        if not strings:
            return model.model_validate(dict(values))
        nones = {k for k, v in values.items()
                 if k in model.model_fields and _optional(model.model_fields[k]) and v.lower() in NONE_WORDS}
        parsed = model.model_validate_strings({k: v for k, v in values.items() if k not in nones}, strict=True)
        return parsed.model_copy(update=dict.fromkeys(nones))  # None is a valid value of these fields
    except ValidationError as exc:
        raise CreditError(_one_line(model, exc, where)) from None


def _optional(field: FieldInfo) -> bool:
    return type(None) in typing.get_args(field.annotation)


_EXPECTS = {
    "float_parsing": "expects a number", "float_type": "expects a number",
    "int_parsing": "expects an integer", "int_type": "expects an integer", "int_from_float": "expects an integer",
    "bool_parsing": "expects true or false", "bool_type": "expects true or false",
    "string_type": "expects a string", "finite_number": "expects a finite number",
}
_BOUNDS = ("greater_than", "greater_than_equal", "less_than", "less_than_equal")


def _one_line(model: type[Knobs], exc: ValidationError, where: str) -> str:
    errors = exc.errors()
    unknown = [str(e["loc"][0]) for e in errors if e["type"] == "extra_forbidden"]
    if unknown:
        names = ", ".join(repr(k) for k in unknown)
        return (f"{where} has no knob{'s' if len(unknown) > 1 else ''} {names}; "
                f"knobs: {', '.join(model.model_fields) or 'none'}")
    return "; ".join(_value_error(model, e) for e in errors)


def _value_error(model: type[Knobs], error: dict) -> str:
    name = str(error["loc"][0]) if error["loc"] else "?"
    field = model.model_fields.get(name)
    kind = error["type"]
    if field is not None and kind == "literal_error":
        options = [a for a in typing.get_args(field.annotation) if a is not None]
        expects = f"must be one of {', '.join(map(str, options))}"
    elif field is not None and kind in _BOUNDS:
        expects = f"must be in {_interval(field)}"
    elif kind in _EXPECTS:
        expects = _EXPECTS[kind] + (" or none" if field is not None and _optional(field) else "")
    else:
        expects = error["msg"][0].lower() + error["msg"][1:]
    return f"knob {name} {expects}, got {error['input']!r}"


def _interval(field: FieldInfo) -> str:
    """``(0, 1]``-style range from the field's ``gt``/``ge``/``lt``/``le`` constraints."""
    low, high, low_open, high_open = "-inf", "inf", True, True
    for bound in field.metadata:
        if isinstance(bound, annotated_types.Gt):
            low, low_open = bound.gt, True
        elif isinstance(bound, annotated_types.Ge):
            low, low_open = bound.ge, False
        elif isinstance(bound, annotated_types.Lt):
            high, high_open = bound.lt, True
        elif isinstance(bound, annotated_types.Le):
            high, high_open = bound.le, False
    return f"{'(' if low_open else '['}{low}, {high}{')' if high_open else ']'}"


# --------------------------------------------------------------------------------------------------
# help text
# --------------------------------------------------------------------------------------------------


def show_value(value: Any) -> str:
    """A knob value as it is typed on the command line: ``true``, ``none``, ``0.9``, ``min``, ``'Nothing happens'``."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "none"
    if isinstance(value, str) and value.isidentifier():
        return value
    return repr(value)


def knob_lines(model: type[Knobs]) -> list[str]:
    """One line per knob: ``name=default  docstring``."""
    return [f"{name}={show_value(field.default)}  {' '.join((field.description or '').split())}"
            for name, field in model.model_fields.items()]


__all__ = [
    "CreditError",
    "Estimator",
    "Knobs",
    "compute",
    "estimator_names",
    "get_estimator",
    "knob_lines",
    "knob_model",
    "parse_key_values",
    "register_estimator",
    "score",
    "show_value",
    "validate_knobs",
    "validate_model",
]
