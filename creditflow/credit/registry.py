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
from creditflow.credit.graph import GraphNodes
from creditflow.errors import UserError
from creditflow.rollout.trajectory import Trajectory


class CreditError(UserError, ValueError):
    """Bad estimator name or knob, or credit that cannot be computed as a finite number."""


class CreditTypeError(CreditError, TypeError):
    """An estimator name that is no string."""


class Knobs(BaseModel):
    """Base of every knob model: unknown knobs are errors, values are never coerced, and instances are frozen.

    Strict means ``"abc"`` is no number, ``6.5`` no integer and ``1`` no bool; an integer is still a valid
    float (``gamma=1``). NaN and infinities are rejected.
    """

    source: ClassVar[str] = ""
    """What the estimator is built from and checked against, one line (``creditflow credit --help`` shows it)."""

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
        return {name: values for name, values in self.all_columns().items() if values is not None}

    def all_columns(self) -> dict[str, np.ndarray | None]:
        """Every credit field by name, None for one the estimator does not compute (writers clear it)."""
        return {"process_reward": self.process_reward, "step_reward": self.step_reward, "advantage": self.advantage}


METRIC_RULES: dict[str, str] = {"credit/groups": "sum", "credit/anchor_groups": "sum", "credit/time_ms": "max"}
"""How a kernel's metric over part of a batch combines with the other parts' (a data-parallel trainer's
processes each score their own groups; ``creditflow.trainer.distributed.Local``): counts add up (``sum``), the wall
time is the slowest part's (``max``), and every other metric, a mean or fraction, is the mean over the parts
weighted by their trajectories (``mean``)."""

K = TypeVar("K", bound=Knobs)
Kernel = Callable[[StepBatch, Any], Credit]
Estimator = Callable[[Sequence[Trajectory], Any], dict]


Need = typing.Literal["state", "success"]
NEEDS: tuple[str, ...] = typing.get_args(Need)
"""What an estimator can declare it reads beyond the rollouts' rewards: ``state`` (each step's state key: state
groups, graphs) and ``success`` (each trajectory's outcome, beyond its rewards). Integrations ask
:func:`estimator_needs` instead of naming estimators."""


@dataclass(frozen=True)
class Drawing:
    """How an estimator that builds a state graph draws one group's (``creditflow graph``, ``credit/draw.py``),
    declared where it is registered (``draws=``)."""

    title: str  # whose graph, in the drawing and the help ("RewardFlow")
    shade: str  # what a node's shade and the edges are, for ``--estimator``'s help
    knobs: type[Knobs]  # the graph's knob model (``creditflow graph KEY=VALUE``)
    nodes: Callable[[list[Trajectory], Any], GraphNodes]  # the group's graph; knobs None: their defaults


@dataclass(frozen=True)
class Registered:
    """A registered estimator: its kernel, its knob model, what it needs from the data and how it draws its graph
    (None: it draws none)."""

    kernel: Kernel
    knobs: type[Knobs]
    needs: frozenset = frozenset()
    draws: Drawing | None = None


_ESTIMATORS: dict[str, Registered] = {}


def register_estimator(name: str, *, knobs: type[Knobs], needs: Iterable[str] = (),
                       draws: Drawing | None = None) -> Callable[[Kernel], Kernel]:
    """Register the kernel ``fn(batch: StepBatch, knobs: <knobs model>) -> Credit`` under ``name``; ``needs``
    declares what it reads beyond rewards (:data:`NEEDS`), ``draws`` how it draws its state graph, if it has one."""
    needs = frozenset(needs)
    if not needs <= set(NEEDS):
        raise ValueError(f"needs must be a subset of {NEEDS}, got {sorted(needs)}")

    def deco(fn: Kernel) -> Kernel:
        _ESTIMATORS[name] = Registered(fn, knobs, needs, draws)
        return fn

    return deco


def estimator_needs(name: str) -> frozenset:
    """What the registered estimator ``name`` reads beyond rewards (``state``, ``success``); unknown: empty."""
    entry = _ESTIMATORS.get(name)
    return entry.needs if entry else frozenset()


def graph_estimators() -> list[str]:
    """The estimators that draw a state graph, in the order they were registered (the first is ``creditflow
    graph``'s default: importing ``creditflow.credit`` registers RewardFlow's module before the others)."""
    return [name for name, entry in _ESTIMATORS.items() if entry.draws is not None]


def estimator_drawing(name: str) -> Drawing | None:
    """How the registered estimator ``name`` draws its state graph; None where it draws none (or is unknown)."""
    entry = _ESTIMATORS.get(name)
    return entry.draws if entry else None


def estimator_names() -> list[str]:
    """Registered estimator names, sorted."""
    return sorted(_ESTIMATORS)


def _registered(name: str) -> Registered:
    if not isinstance(name, str):
        raise CreditTypeError(f"estimator must be a name (str), one of {', '.join(estimator_names())}; "
                          f"got {name!r} ({type(name).__name__})")
    if name not in _ESTIMATORS:
        raise CreditError(f"unknown estimator {name!r}; available: {', '.join(estimator_names())}")
    return _ESTIMATORS[name]


def get_kernel(name: str) -> Kernel:
    """The kernel registered as ``name``; an unknown name is a :class:`CreditError`."""
    return _registered(name).kernel


def get_estimator(name: str) -> Estimator:
    """``fn(trajectories, knobs) -> metrics`` for estimator ``name``: sets ``advantage``, ``step_reward``
    (and ``process_reward``) on every step in place. ``knobs`` is the validated model."""
    get_kernel(name)
    return functools.partial(run_in_place, name)


def run_in_place(name: str, trajectories: Sequence[Trajectory], knobs: Knobs) -> dict:
    """Run estimator ``name`` on ``trajectories`` and write its columns onto their steps (a credit field it
    does not compute is set to None); returns the metrics."""
    batch = batch_from_trajectories(trajectories)
    credit = run_kernel(name, batch, knobs)
    write_step_fields(batch.source, **credit.all_columns())
    return credit.metrics


def run_kernel(name: str, batch: StepBatch, knobs: Knobs) -> Credit:
    """The kernel of estimator ``name`` on ``batch`` with validated ``knobs``, its output checked: every value
    it returns is a finite number, else a one-line :class:`CreditError` naming the trajectory and why (a
    float64 overflow, e.g. rewards of 1e308 whose sum or variance is infinite). Every path runs this."""
    kernel = get_kernel(name)
    try:  # an overflow stops at once; NaN from inf - inf is found in the output below
        with np.errstate(over="raise", invalid="ignore", divide="ignore"):
            credit = kernel(batch, knobs)
    except FloatingPointError:
        raise CreditError(_not_finite(name, batch, knobs=knobs)) from None
    for field, column in credit.columns().items():
        bad = ~np.isfinite(column)
        if bad.any():
            row = int(np.argmax(bad))
            raise CreditError(_not_finite(name, batch, (field, row, float(column[row])), knobs))
    return credit


def _not_finite(name: str, batch: StepBatch, found: tuple[str, int, float] | None = None,
                knobs: Knobs | None = None) -> str:
    """Why estimator ``name`` has no finite credit for ``batch``: names the trajectory (the one with the
    non-finite ``found = (field, row, value)``, else the one holding the largest magnitude) and what in its
    group is too large for float64, or, where its values are moderate, the knobs set away from their defaults
    (with their values) that scale the credit beyond it."""
    with np.errstate(over="ignore", invalid="ignore"):
        returns = np.abs(batch.total_rewards())
        rewards = np.zeros(batch.n_traj)
        np.maximum.at(rewards, batch.step_traj, np.abs(batch.reward))
        scores = np.abs(batch.score)
    if found is not None:
        traj = int(np.searchsorted(batch.traj_first, found[1], side="right") - 1)
        what = f"its {found[0]} would be {found[2]!r}"
    else:
        traj = int(np.argmax(np.maximum(np.maximum(returns, rewards), scores)))
        what = "its credit overflows float64"
    group = batch.traj_group == batch.traj_group[traj]
    name_g = batch.group_ids[traj]
    largest = max(float(rewards[group].max()), float(scores[group].max()), float(returns[group].max()))
    if not np.isfinite(returns[group]).all():
        why = (f"the rewards of its group {name_g!r} (up to {float(rewards[group].max()):.3g}) sum beyond the "
               "largest float64")
    elif largest > 1e150:
        why = (f"its group {name_g!r} holds rewards, returns or scores up to {largest:.3g} in magnitude; the "
               "estimator's means and variances overflow float64 above about 1e154")
    else:
        why = f"the largest reward, return or score of its group {name_g!r} is {largest:.3g}"
        changed = _changed_numbers(knobs)
        if changed:
            return (f"{batch.where(traj)}: estimator {name!r} cannot give it finite credit: {what} with knob(s) "
                    f"{', '.join(f'{k}={v:g}' for k, v in changed.items())} ({why}); bring them nearer their "
                    f"defaults ({', '.join(f'{k}={type(knobs).model_fields[k].default!r}' for k in changed)})")
    return f"{batch.where(traj)}: estimator {name!r} cannot give it finite credit: {what} ({why}; rescale them)"


def _changed_numbers(knobs: Knobs | None) -> dict[str, float]:
    """The numeric knobs set away from their defaults (what can scale credit beyond float64)."""
    if knobs is None:
        return {}
    out = {}
    for key, info in type(knobs).model_fields.items():
        value = getattr(knobs, key, None)
        if isinstance(value, (int, float)) and not isinstance(value, bool) and value != info.default:
            out[key] = value
    return out


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
    if not isinstance(values, Mapping):
        raise CreditTypeError(f"{where}: knobs must be a mapping of knob names to values, got "
                              f"{type(values).__name__}")
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
    "CreditTypeError",
    "Drawing",
    "Estimator",
    "Kernel",
    "Knobs",
    "estimator_drawing",
    "estimator_names",
    "get_estimator",
    "graph_estimators",
    "get_kernel",
    "knob_lines",
    "knob_model",
    "parse_key_values",
    "register_estimator",
    "run_in_place",
    "run_kernel",
    "show_value",
    "validate_knobs",
    "validate_model",
]
