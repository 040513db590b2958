"""The estimator registry: each name maps to a kernel and a typed knob model; knobs are checked here only.

An *estimator* is a kernel ``fn(batch: StepBatch, knobs: K) -> Credit`` over the columns of a batch (one
row per step, ``batch.py``), registered with ``@register_estimator("name", knobs=K)`` where ``K`` is a
:class:`Knobs` model (pydantic, one field per knob, documented by the field's docstring). It returns per-row
``advantage`` and ``step_reward`` (and ``process_reward`` where it has one) plus a dict of metrics to log,
grouping by ``group_id``. Every public path (``api.py``: ``compute``, ``score``, ``score_arrays``, the
``credit`` command, the verl integration) builds a batch and calls the same kernel. Kernels never check
their knobs: they receive a validated model.

:func:`get_estimator` gives the trajectory-level function the trainer calls, ``fn(trajectories, knobs) ->
metrics``, which writes the columns onto the steps in place.

Knob values are checked in one place, :func:`validate_model` (through :func:`validate_knobs` for a registered
estimator): Python values from the trainer's ``rl.credit``, :func:`compute` and :func:`score`, or the
``key=value`` strings of the CLI (:func:`parse_key_values`, ``strings=True``). A bad knob raises a one-line
:class:`CreditError` naming the knob, what it expects and what it got.
"""

from __future__ import annotations

import functools
import typing
from dataclasses import dataclass
from typing import Any, Callable, ClassVar, Iterable, Mapping, Self, Sequence, TypeVar

import annotated_types
import numpy as np
from pydantic import BaseModel, ConfigDict, ValidationError
from pydantic.fields import FieldInfo

from creditflow.credit.batch import StepBatch, batch_from_trajectories, write_step_fields
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

    presets: ClassVar[dict[str, dict[str, Any]]] = {}
    """Bundles of knob values picked by a ``preset`` knob (models that have one)."""

    def resolved(self) -> Self:
        """This model with its ``preset``'s values filled in for every knob the caller did not set (knobs set
        explicitly win); kernels read these values."""
        bundle = self.presets.get(getattr(self, "preset", None), {})
        update = {name: value for name, value in bundle.items() if name not in self.model_fields_set}
        return self.model_copy(update=update) if update else self


@dataclass
class Credit:
    """What a kernel computes for a :class:`StepBatch`: per-row columns and the metrics to log."""

    advantage: np.ndarray  # (S,) the step's advantage, broadcast by a trainer to its response tokens
    step_reward: np.ndarray  # (S,) r~_t (RewardFlow Eq. 4) or the env reward
    process_reward: np.ndarray | None  # (S,) R(s_t) / the step return, where the estimator has one
    metrics: dict

    def columns(self) -> dict[str, np.ndarray]:
        """The per-row output fields by name, in the JSONL order (``process_reward`` only where set)."""
        out = {"process_reward": self.process_reward, "step_reward": self.step_reward, "advantage": self.advantage}
        return {name: values for name, values in out.items() if values is not None}


METRIC_RULES: dict[str, str] = {"credit/groups": "sum", "credit/anchor_groups": "sum", "credit/time_ms": "max"}
"""How a kernel's metric over part of a batch combines with the other parts' (a data-parallel trainer's
processes each score their own groups; ``creditflow.train.distributed.Local``): counts add up (``sum``), the wall
time is the slowest part's (``max``), and every other metric, a mean or fraction, is the mean over the parts
weighted by their trajectories (``mean``)."""

K = TypeVar("K", bound=Knobs)
Kernel = Callable[[StepBatch, Any], Credit]
Estimator = Callable[[Sequence[Trajectory], Any], dict]


@dataclass(frozen=True)
class Registered:
    """A registered estimator: its kernel and its knob model."""

    kernel: Kernel
    knobs: type[Knobs]


_ESTIMATORS: dict[str, Registered] = {}


def register_estimator(name: str, *, knobs: type[Knobs]) -> Callable[[Kernel], Kernel]:
    """Register the kernel ``fn(batch: StepBatch, knobs: <knobs model>) -> Credit`` under ``name``."""

    def deco(fn: Kernel) -> Kernel:
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


def get_kernel(name: str) -> Kernel:
    """The kernel registered as ``name``; an unknown name is a :class:`CreditError`."""
    return _registered(name).kernel


def get_estimator(name: str) -> Estimator:
    """``fn(trajectories, knobs) -> metrics`` for estimator ``name``: sets ``advantage``, ``step_reward``
    (and ``process_reward``) on every step in place. ``knobs`` is the validated model."""
    return functools.partial(run_in_place, get_kernel(name))


def run_in_place(kernel: Kernel, trajectories: Sequence[Trajectory], knobs: Knobs) -> dict:
    """Run ``kernel`` on ``trajectories`` and write its columns onto their steps; returns the metrics."""
    batch = batch_from_trajectories(trajectories)
    credit = kernel(batch, knobs)
    write_step_fields(batch.source, **credit.columns())
    return credit.metrics


def knob_model(name: str) -> type[Knobs]:
    """The knob model of estimator ``name`` (its fields are the knobs, with defaults and docstrings)."""
    return _registered(name).knobs


def validate_knobs(name: str, knobs: Mapping[str, Any], *, strings: bool = False) -> Knobs:
    """Check the knobs of estimator ``name`` (``strings``: raw ``key=value`` text); returns its knob model."""
    return validate_model(knob_model(name), knobs, f"estimator {name!r}", strings=strings)


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
    if not error["loc"]:  # a check across knobs (a model validator): its own message
        return str(error["ctx"]["error"]) if "error" in error.get("ctx", {}) else error["msg"]
    name = str(error["loc"][0])
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
    "Credit",
    "CreditError",
    "Estimator",
    "Kernel",
    "Knobs",
    "estimator_names",
    "get_estimator",
    "get_kernel",
    "knob_lines",
    "knob_model",
    "parse_key_values",
    "register_estimator",
    "run_in_place",
    "show_value",
    "validate_knobs",
    "validate_model",
]
