"""Environment registry: ``creditflow.envs.make(name, **kwargs)``.

Entries are ``"module:Class"`` strings so that heavy optional dependencies (TextWorld, ALFWorld) are
imported only when that env is made.

``make`` checks every option against the type annotation of the env's constructor (pydantic, strict: no
``6.5`` -> ``6``, no ``"maybe"`` -> ``True``; ints are accepted where a float is expected and path objects
where a string path is) and says what it expected in one line. Bounds are the env's own checks.
"""

from __future__ import annotations

import importlib
import inspect
import math
import numbers
import os
import types
import typing
from dataclasses import dataclass

from pydantic import TypeAdapter, ValidationError

from creditflow.envs import adapters
from creditflow.envs.base import (
    INFO_KEYS,
    INVALID_ACTION_PREFIX,
    BaseTextEnv,
    EnvError,
    ReplayMismatch,
    ReplayResult,
    TextEnv,
    check_determinism,
    has_snapshot,
    replay,
)

__all__ = [
    "INFO_KEYS",
    "INVALID_ACTION_PREFIX",
    "BaseTextEnv",
    "EnvError",
    "EnvTypeError",
    "ReplayMismatch",
    "ReplayResult",
    "TextEnv",
    "check_determinism",
    "has_snapshot",
    "replay",
    "register",
    "make",
    "env_names",
    "env_class",
    "env_options",
    "option_types",
    "check_options",
]


class EnvTypeError(EnvError, TypeError):
    """An env name that is no string."""


@dataclass(frozen=True)
class _Entry:
    target: str
    summary: str


_REGISTRY: dict[str, _Entry] = {}


def register(name: str, target: str, summary: str = "") -> None:
    """Register an env class under ``name``; ``target`` is ``"package.module:ClassName"``."""
    _REGISTRY[name] = _Entry(target, summary)


def env_names() -> list[str]:
    return sorted(_REGISTRY)


def _target(name: str) -> str:
    """``"module:Class"`` of a registered env or of an adapter (``<adapter>:<spec>``, see ``envs.adapters``)."""
    if name in _REGISTRY:
        return _REGISTRY[name].target
    adapted = adapters.split_adapter(name)
    if adapted is not None:
        return adapted[0]
    raise EnvError(f"unknown env {name!r}; available: {', '.join(env_names())}")


def _spec_args(name: str) -> tuple:
    """The positional ``spec`` an adapter class is built with (nothing for a registered env)."""
    adapted = None if name in _REGISTRY else adapters.split_adapter(name)
    return () if adapted is None else (adapted[1],)


def env_class(name: str) -> type:
    module, _, cls = _target(name).partition(":")
    try:
        mod = importlib.import_module(module)
    except ImportError as exc:  # optional dependency missing
        raise EnvError(f"env {name!r} needs a package that is not installed: {exc}") from None
    return getattr(mod, cls)


def env_options(name: str) -> dict[str, object]:
    """Constructor options of an env and their defaults (``inspect.Parameter.empty`` if required)."""
    sig = inspect.signature(env_class(name).__init__)
    skip = {"self", "spec"} if _spec_args(name) else {"self"}
    return {
        p.name: p.default
        for p in sig.parameters.values()
        if p.name not in skip and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
    }


def option_types(name: str) -> dict[str, object]:
    """The annotated type of each constructor option of env ``name`` (options without one are absent)."""
    init = env_class(name).__init__
    try:
        hints = typing.get_type_hints(init)
    except (NameError, TypeError):  # an annotation that cannot be resolved: the env checks that option itself
        return {}
    return {key: hint for key, hint in hints.items() if key in env_options(name)}


def _type_name(hint) -> str:
    """``int``, ``int or None``, ``one of 'train', 'test'``, ``list``: what an option expects, in words."""
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        return " or ".join(_type_name(arg) for arg in typing.get_args(hint))
    if origin is typing.Literal:
        return "one of " + ", ".join(repr(arg) for arg in typing.get_args(hint))
    if hint is type(None):
        return "None"
    names = {int: "an integer", float: "a number", bool: "true or false", str: "a string"}
    if hint in names:
        return names[hint]
    return getattr(origin or hint, "__name__", str(hint))


def _checked_value(value):
    """The value as the type check sees it: integer-like numbers (NumPy's too) as ``int``, paths as ``str``."""
    if isinstance(value, numbers.Integral) and not isinstance(value, bool):
        return int(value)
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    return value


def check_options(name: str, kwargs: dict) -> None:
    """Unknown options and options of the wrong type raise one-line :class:`EnvError`s; nothing is converted."""
    allowed = env_options(name)
    unknown = sorted(set(kwargs) - set(allowed))
    if unknown:
        raise EnvError(
            f"env {name!r} has no option(s) {', '.join(unknown)}; options: {', '.join(allowed) or 'none'}"
        )
    hints = option_types(name)
    for key, value in kwargs.items():
        if isinstance(value, float) and not math.isfinite(value):
            raise EnvError(f"env {name!r}: option {key} must be a finite number, got {value!r}")
        if key not in hints:
            continue
        try:
            TypeAdapter(hints[key]).validate_python(_checked_value(value), strict=True)
        except ValidationError:
            raise EnvError(f"env {name!r}: option {key} must be {_type_name(hints[key])}, got {value!r}") from None


def make(name: str, **kwargs) -> TextEnv:
    """Instantiate a registered env; unknown options, options of the wrong type and non-finite numbers raise
    :class:`EnvError` naming them (:func:`check_options`)."""
    if not isinstance(name, str):
        raise EnvTypeError(f"env name must be a string (one of {', '.join(env_names())}), got {name!r} "
                           f"({type(name).__name__})")
    cls = env_class(name)
    check_options(name, kwargs)
    try:
        return cls(*_spec_args(name), **kwargs)
    except TypeError as exc:
        raise EnvError(f"env {name!r}: {exc}") from None


def summary(name: str) -> str:
    return _REGISTRY[name].summary


register("sokoban", "creditflow.envs.sokoban:SokobanEnv", "Box pushing on a text grid (built-in generator and BFS solver).")
register("sql", "creditflow.envs.sql:SqlEnv", "InterCode-style SQL on SQLite (built-in suite, custom JSONL, Spider/InterCode loaders).")
register("household", "creditflow.envs.household:HouseholdEnv", "ALFWorld-like household tasks on TextWorld games generated offline (needs creditflow[household]).")
register("webshop", "creditflow.envs.webshop:WebShopEnv", "WebShop-style shopping: search, results, item pages and WebShop's graded purchase reward (generated catalog or WebShop's data files).")
register("alfworld", "creditflow.envs.alfworld:AlfworldEnv", "ALFWorld text games (needs the alfworld package and ALFWORLD_DATA).")
