"""Environment registry: ``creditflow.envs.make(name, **kwargs)``.

Entries are ``"module:Class"`` strings so that heavy optional dependencies (TextWorld, ALFWorld) are
imported only when that env is made.
"""

from __future__ import annotations

import importlib
import inspect
from dataclasses import dataclass

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
]


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


def env_class(name: str) -> type:
    if name not in _REGISTRY:
        raise EnvError(f"unknown env {name!r}; available: {', '.join(env_names())}")
    module, _, cls = _REGISTRY[name].target.partition(":")
    try:
        mod = importlib.import_module(module)
    except ImportError as exc:  # optional dependency missing
        raise EnvError(f"env {name!r} needs a package that is not installed: {exc}") from None
    return getattr(mod, cls)


def env_options(name: str) -> dict[str, object]:
    """Constructor options of an env and their defaults (``inspect.Parameter.empty`` if required)."""
    sig = inspect.signature(env_class(name).__init__)
    return {
        p.name: p.default
        for p in sig.parameters.values()
        if p.name != "self" and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
    }


def make(name: str, **kwargs) -> TextEnv:
    """Instantiate a registered env; unknown options raise :class:`EnvError` naming them."""
    cls = env_class(name)
    allowed = env_options(name)
    unknown = sorted(set(kwargs) - set(allowed))
    if unknown:
        raise EnvError(
            f"env {name!r} has no option(s) {', '.join(unknown)}; options: {', '.join(allowed) or 'none'}"
        )
    try:
        return cls(**kwargs)
    except TypeError as exc:
        raise EnvError(f"env {name!r}: {exc}") from None


def summary(name: str) -> str:
    return _REGISTRY[name].summary


register("sokoban", "creditflow.envs.sokoban:SokobanEnv", "Box pushing on a text grid (built-in generator and BFS solver).")
register("sql", "creditflow.envs.sql:SqlEnv", "InterCode-style SQL on SQLite (built-in suite, custom JSONL, Spider/InterCode loaders).")
register("household", "creditflow.envs.household:HouseholdEnv", "ALFWorld-like household tasks on TextWorld games generated offline (needs creditflow[household]).")
register("webshop", "creditflow.envs.webshop:WebShopEnv", "WebShop-style shopping: search, results, item pages and WebShop's graded purchase reward (generated catalog or WebShop's data files).")
register("alfworld", "creditflow.envs.alfworld:AlfworldEnv", "ALFWorld text games (needs the alfworld package and ALFWORLD_DATA).")
