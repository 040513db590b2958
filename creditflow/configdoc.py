"""The run config as commented YAML: every field with its value, its docstring and its constraints.

``creditflow config`` prints it; ``creditflow train --config`` reads it back to the same config (the comments are
YAML comments, the values are what ``yaml.safe_dump`` writes). Constraints are read off the pydantic fields, so
they say what validation enforces: bounds (``ge``/``gt``/``le``/``lt``, also inside ``Optional[...]``), finite
numbers (``allow_inf_nan=False``), the choices of a ``Literal`` and whether ``null`` is allowed.
"""

from __future__ import annotations

import textwrap
import types
import typing
from typing import Any, Literal, Union

import yaml
from pydantic import BaseModel
from pydantic.fields import FieldInfo

from creditflow.config import RunConfig

WIDTH = 100
NOT_SETTINGS = {"resumes"}  # written by creditflow (``train --resume``), not set by a user
BOUNDS = (("ge", ">="), ("gt", ">"), ("le", "<="), ("lt", "<"), ("multiple_of", "a multiple of"),
          ("min_length", "at least"), ("max_length", "at most"))


def commented_yaml(cfg: RunConfig) -> str:
    """``cfg`` as YAML with each field's docstring and constraints as comments above it."""
    lines = ["# creditflow run config: every field, as `creditflow config` prints it. Use it as is with",
             "#   creditflow train --config THIS_FILE [key=value ...]",
             "# Comments: each field's docstring, then what validation accepts (creditflow/config.py).", ""]
    lines += _section(cfg, 0)
    return "\n".join(lines) + "\n"


def _section(model: BaseModel, indent: int) -> list[str]:
    out: list[str] = []
    pad = " " * indent
    for name, info in type(model).model_fields.items():
        if name in NOT_SETTINGS:
            continue
        value = getattr(model, name)
        doc = info.description or (type(value).__doc__ if isinstance(value, BaseModel) else None)
        if out and (isinstance(value, BaseModel) or indent == 0):
            out.append("")  # a blank line before each section (and between top-level fields)
        out += _comment(doc, pad)
        if isinstance(value, BaseModel):
            out.append(f"{pad}{name}:")
            out += _section(value, indent + 2)
            continue
        rule = constraints(info, type(model).model_config)
        if rule:
            out.append(f"{pad}# {rule}")
        out += _value(name, value, pad)
    return out


def _comment(doc: str | None, pad: str) -> list[str]:
    if not doc:
        return []
    text = " ".join(doc.split())
    return [f"{pad}# {line}" for line in textwrap.wrap(text, WIDTH - len(pad) - 2, break_on_hyphens=False)]


def _value(name: str, value: Any, pad: str) -> list[str]:
    if isinstance(value, tuple):
        value = list(value)
    if isinstance(value, (dict, list)) and value:
        dumped = yaml.safe_dump({name: value}, sort_keys=False, default_flow_style=False, allow_unicode=True)
    else:
        dumped = yaml.safe_dump({name: value}, sort_keys=False, default_flow_style=True, allow_unicode=True,
                                width=10**6)[1:-2] + "\n"  # {name: value} -> name: value
    return [f"{pad}{line}" for line in dumped.rstrip("\n").split("\n")]


def constraints(info: FieldInfo, model_config: dict | None = None) -> str:
    """What validation accepts, when it is more than a plain type: ``int >= 1``, ``one of hf, vllm, openai``,
    ``float > 0, finite, or null``, ``str or null``; '' for an unconstrained field. ``model_config``: the owning
    model's pydantic config (its ``allow_inf_nan=False`` makes every float field finite)."""
    choices, nullable, nested, names = _walk(info.annotation)
    bounds = list(dict.fromkeys(_bounds(info.metadata) + _bounds(nested)))
    field_nan = [getattr(m, "allow_inf_nan") for m in [*info.metadata, *nested] if hasattr(m, "allow_inf_nan")]
    if ("float" in names and "finite" not in bounds and not field_nan
            and (model_config or {}).get("allow_inf_nan") is False):
        bounds.append("finite")
    if choices:
        text = "one of " + ", ".join("null" if c is None else str(c) for c in choices)
    elif bounds or nullable:
        finite = "finite " if "finite" in bounds else ""  # an adjective: "finite float > 0"
        bounds = [b for b in bounds if b != "finite"]
        text = finite + " or ".join(dict.fromkeys(names)) + (" " + ", ".join(bounds) if bounds else "")
    else:
        return ""
    return f"accepts: {text}" + (", or null" if nullable and (bounds or choices) else " or null" if nullable else "")


def _bounds(metadata) -> list[str]:
    out = []
    for item in metadata:
        for attr, word in BOUNDS:
            if getattr(item, attr, None) is not None:
                out.append(f"{word} {getattr(item, attr)}")
        if getattr(item, "allow_inf_nan", None) is False:
            out.append("finite")
    return out


def _walk(annotation) -> tuple[list, bool, list, list[str]]:
    """(Literal choices, whether None is allowed, constraint metadata of Annotated parts, type names) of a type."""
    origin = typing.get_origin(annotation)
    if annotation is type(None):
        return [], True, [], []
    if origin is Literal:
        return list(typing.get_args(annotation)), False, [], []
    if origin is typing.Annotated:
        base, *extra = typing.get_args(annotation)
        choices, nullable, nested, names = _walk(base)
        for item in extra:
            nested += list(item.metadata) if isinstance(item, FieldInfo) else [item]
        return choices, nullable, nested, names
    if origin in (Union, types.UnionType):
        choices, nullable, nested, names = [], False, [], []
        for arg in typing.get_args(annotation):
            c, n, m, t = _walk(arg)
            choices, nullable, nested, names = choices + c, nullable or n, nested + m, names + t
        return choices, nullable, nested, names
    name = {dict: "mapping", list: "list"}.get(origin or annotation, getattr(origin or annotation, "__name__",
                                                                               str(annotation)))
    return [], False, [], [name]
