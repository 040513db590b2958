"""Environment registry: ``creditflow.envs.make(name, **kwargs)``.

A name resolves, in this order, to

1. a built-in env (``creditflow envs`` lists them), or one registered in this process with :func:`register`;
2. a plug-in: an entry point of the ``creditflow.envs`` group, declared by an installed package
   (``[project.entry-points."creditflow.envs"] myenv = "mypkg.envs:MyEnv"``);
3. an adapter, ``<adapter>:<spec>`` (``creditflow.envs.adapters``; an adapter prefix wins over a module of the
   same name), built as ``Class(spec, **options)``;
4. ``module:Class`` (or ``module:factory``): any importable class or function, no packaging needed. A module
   that is not on the path is looked for in the current directory too (as ``uvicorn module:app`` does).

Built-ins and plug-ins are ``"module:Class"`` strings, so heavy optional dependencies (TextWorld, ALFWorld) and
plug-in packages are imported only when that env is made. A plug-in whose name is also a built-in's, a module
that fails to import, or a class without ``reset``/``step`` is a one-line :class:`EnvError` when it is used.

``make`` checks every option against the type annotation of the env's constructor (pydantic, strict: no
``6.5`` -> ``6``, no ``"maybe"`` -> ``True``; ints are accepted where a float is expected and path objects
where a string path is) and says what it expected in one line. Bounds are the env's own checks.
:func:`factory` gives the picklable zero-argument factory the engine makes its envs with.
"""

from __future__ import annotations

import copy
import functools
import importlib
import importlib.metadata
import inspect
import math
import numbers
import os
import types
import typing
from dataclasses import dataclass, field
from typing import Any, Callable

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
from creditflow.envs.loading import import_target_module
from creditflow.errors import did_you_mean

__all__ = [
    "ENTRY_POINT_GROUP",
    "INFO_KEYS",
    "INVALID_ACTION_PREFIX",
    "BaseTextEnv",
    "EnvError",
    "EnvCopies",
    "EnvFactory",
    "EnvTypeError",
    "ReplayMismatch",
    "ReplayResult",
    "TextEnv",
    "check_determinism",
    "has_snapshot",
    "replay",
    "register",
    "make",
    "factory",
    "env_names",
    "plugin_names",
    "is_builtin",
    "source",
    "summary",
    "env_class",
    "env_options",
    "option_types",
    "check_options",
]

ENTRY_POINT_GROUP = "creditflow.envs"
"""The entry-point group plug-in packages declare their envs in."""

Target = typing.Union[str, Callable[..., Any]]
"""``"module:attr"`` (a class or a factory function, imported when used) or the class / factory itself."""


class EnvTypeError(EnvError, TypeError):
    """An env name that is no string."""


@dataclass(frozen=True)
class _Entry:
    target: Target
    summary: str = ""


_BUILTIN: dict[str, _Entry] = {}
_REGISTERED: dict[str, _Entry] = {}  # register() calls of this process


def _builtin(name: str, target: str, summary: str) -> None:
    _BUILTIN[name] = _Entry(target, summary)


def register(name: str, target: Target, summary: str = "") -> None:
    """Make ``name`` an env in this process: ``target`` is ``"package.module:ClassName"``, an env class, or a
    factory (a callable whose keyword arguments are the env's options and which returns an env).

    Python code only: the ``creditflow`` command runs in its own process, where a plug-in (entry point
    ``creditflow.envs``) or ``--env module:Class`` names the env instead. A built-in env's name is refused."""
    if not isinstance(name, str) or not name.strip() or name != name.strip():
        raise EnvError(f"env name must be a non-empty string without surrounding spaces, got {name!r}")
    if name in _BUILTIN:
        raise EnvError(f"env name {name!r} is a built-in env; register yours under another name")
    if not isinstance(target, str) and not callable(target):
        raise EnvError(f"env {name!r}: target must be 'module:Class', a class or a factory, got {target!r}")
    _REGISTERED[name] = _Entry(target, summary)


@functools.cache
def _entry_points() -> dict[str, list[importlib.metadata.EntryPoint]]:
    """The ``creditflow.envs`` entry points of the installed packages, by name (read once per process)."""
    found: dict[str, list[importlib.metadata.EntryPoint]] = {}
    for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        found.setdefault(ep.name, []).append(ep)
    return found


def _package(ep: importlib.metadata.EntryPoint) -> str:
    dist = getattr(ep, "dist", None)
    return dist.name if dist is not None else "an installed package"


def plugin_names() -> list[str]:
    """Names declared by installed packages in the ``creditflow.envs`` entry-point group."""
    return sorted(_entry_points())


def env_names() -> list[str]:
    """Built-in, registered and plug-in env names."""
    return sorted(set(_BUILTIN) | set(_REGISTERED) | set(_entry_points()))


def is_builtin(name: str) -> bool:
    return name in _BUILTIN


@dataclass(frozen=True)
class _Resolved:
    name: str
    target: Target
    where: str  # how the name resolved, for messages: "", "plug-in of package P", "mypkg.envs:MyEnv", ...
    spec: tuple = ()  # the positional spec of an adapter env
    summary: str = ""
    builtin: bool = False


def _plugin(name: str) -> _Resolved:
    eps = _entry_points()[name]
    if len(eps) > 1:
        packages = " and ".join(sorted(_package(ep) for ep in eps))
        raise EnvError(f"plug-in env {name!r} is declared by two packages ({packages}); uninstall one")
    ep = eps[0]
    return _Resolved(name, ep.value, f"plug-in of package {_package(ep)}: {ep.value}")


def _resolve(name: str) -> _Resolved:
    """Where env ``name`` comes from (see the module docstring for the order)."""
    if not isinstance(name, str):
        raise EnvError(f"env name must be a string, got {name!r}")
    if name in _BUILTIN:
        if name in _entry_points():
            clash = ", ".join(f"{_package(ep)} ({ep.value})" for ep in _entry_points()[name])
            raise EnvError(f"plug-in env {name!r} of {clash} has the name of a built-in env; rename its "
                           f"[project.entry-points.\"{ENTRY_POINT_GROUP}\"] entry")
        return _Resolved(name, _BUILTIN[name].target, "", summary=_BUILTIN[name].summary, builtin=True)
    if name in _REGISTERED:
        entry = _REGISTERED[name]
        return _Resolved(name, entry.target, "registered in this process", summary=entry.summary)
    if name in _entry_points():
        return _plugin(name)
    adapted = adapters.split_adapter(name)
    if adapted is not None:
        return _Resolved(name, adapted[0], f"adapter {name.partition(':')[0]}", spec=(adapted[1],))
    module, sep, attr = name.partition(":")
    if sep and module and attr:
        return _Resolved(name, name, "")
    names = env_names()
    raise EnvError(f"unknown env {name!r}{did_you_mean(name, names)}; available: {', '.join(names)} (or "
                   f"module:Class, an importable env class)")


def _label(res: _Resolved) -> str:
    return f"env {res.name!r}" + (f" ({res.where})" if res.where else "")


def _import(res: _Resolved, module: str) -> types.ModuleType:
    """Import a plug-in's or a ``module:Class`` target's module (the current directory too:
    :func:`creditflow.envs.loading.import_target_module`); any failure is one line naming it."""
    try:
        return import_target_module(module)
    except Exception as exc:  # not found, a syntax error, or an exception raised at the module's top level
        last = f"{type(exc).__name__}: {exc}".splitlines()[-1]
        raise EnvError(f"{_label(res)}: cannot import module {module!r}: {last}") from None


def _load(res: _Resolved) -> Callable[..., Any]:
    """The class or factory of a resolved env; a class must have ``reset`` and ``step``."""
    target = res.target
    if isinstance(target, str):
        module, _, attr = target.partition(":")
        if res.builtin:
            try:
                mod = importlib.import_module(module)
            except ImportError as exc:  # optional dependency missing
                raise EnvError(f"env {res.name!r} needs a package that is not installed: {exc}") from None
        else:
            mod = _import(res, module)
        target = mod
        for part in attr.split("."):
            if not hasattr(target, part):
                raise EnvError(f"{_label(res)}: module {module!r} has no attribute {attr!r}")
            target = getattr(target, part)
        if not callable(target):
            raise EnvError(f"{_label(res)}: {attr} is not a class or a factory function")
    if inspect.isclass(target):
        missing = [m for m in ("reset", "step") if not callable(getattr(target, m, None))]
        if missing:
            raise EnvError(f"{_label(res)}: class {target.__name__} has no {' or '.join(f'{m}()' for m in missing)} "
                           f"method; an env needs reset() and step() (docs/environments.md)")
    return target


def _target(name: str) -> Target:
    """The target of env ``name``: ``"module:Class"`` of a built-in, plug-in, adapter or ``module:Class`` name,
    or the class / factory :func:`register` was given."""
    return _resolve(name).target


def _spec_args(name: str) -> tuple:
    """The positional ``spec`` an adapter class is built with (nothing for other envs)."""
    return _resolve(name).spec


def env_class(name: str) -> Callable[..., Any]:
    """The env class (or factory) of ``name``, imported."""
    return _load(_resolve(name))


def source(name: str) -> str:
    """Where ``name`` comes from, in words: ``built-in``, ``plug-in of package P: mod:Class``, ..."""
    res = _resolve(name)
    return "built-in" if res.builtin else res.where or name


def summary(name: str) -> str:
    """The registry's one-line summary, else the first line of the class's (or factory's) docstring."""
    res = _resolve(name)
    if res.summary:
        return res.summary
    doc = inspect.getdoc(_load(res)) or ""
    return doc.strip().splitlines()[0] if doc.strip() else ""


def _parameters(name: str) -> list[inspect.Parameter]:
    """The options of env ``name``: the constructor's (or factory's) keyword parameters, after ``spec``."""
    res = _resolve(name)
    target = _load(res)
    try:
        params = list(inspect.signature(target).parameters.values())
    except (TypeError, ValueError):  # a callable without a signature: no options known
        return []
    if res.spec and params:
        params = params[1:]
    return [p for p in params if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD, p.POSITIONAL_ONLY)]


def env_options(name: str) -> dict[str, object]:
    """Constructor options of an env and their defaults (``inspect.Parameter.empty`` if required)."""
    return {p.name: p.default for p in _parameters(name)}


def option_types(name: str) -> dict[str, object]:
    """The annotated type of each constructor option of env ``name`` (options without one are absent)."""
    target = _load(_resolve(name))
    try:
        hints = typing.get_type_hints(target.__init__ if inspect.isclass(target) else target)
    except Exception:  # an annotation that cannot be resolved: the env checks that option itself
        return {}
    options = env_options(name)
    return {key: hint for key, hint in hints.items() if key in options}


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
        except Exception:  # a hint pydantic cannot build a validator for: the env checks that option itself
            continue


def _build(res: _Resolved, target: Callable[..., Any], kwargs: dict) -> TextEnv:
    try:
        env = target(*res.spec, **kwargs)
    except EnvError:
        raise
    except TypeError as exc:
        raise EnvError(f"env {res.name!r}: {exc}") from None
    except Exception as exc:
        if res.builtin:
            raise
        last = f"{type(exc).__name__}: {exc}".splitlines()[-1] if str(exc) else type(exc).__name__
        raise EnvError(f"{_label(res)}: building the env raised {last}") from None
    if not res.builtin:
        missing = [m for m in ("reset", "step") if not callable(getattr(env, m, None))]
        if missing:
            raise EnvError(f"{_label(res)}: the factory returned {type(env).__name__!r}, which has no "
                           f"{' or '.join(f'{m}()' for m in missing)} method; an env needs reset() and step()")
    return env


def make(name: str, **kwargs) -> TextEnv:
    """Instantiate an env by name (see the module docstring for the names); unknown options, options of the
    wrong type and non-finite numbers raise :class:`EnvError` naming them (:func:`check_options`)."""
    if not isinstance(name, str):
        raise EnvTypeError(f"env name must be a string (one of {', '.join(env_names())}), got {name!r} "
                           f"({type(name).__name__})")
    res = _resolve(name)
    target = _load(res)
    check_options(name, kwargs)
    return _build(res, target, kwargs)


@dataclass(frozen=True)
class EnvFactory:
    """A zero-argument, picklable env factory: ``EnvFactory("sokoban", {"size": 5})()`` is
    ``make("sokoban", size=5)``.

    A name is resolved again in each process that calls it (plug-ins and ``module:Class`` envs must be
    importable there, as they are in Ray workers on this machine); an env :func:`register`-ed in this process
    travels with the factory as its class or factory object (pickled by value when it lives in ``__main__``)."""

    name: str
    kwargs: dict = field(default_factory=dict)
    target: Callable[..., Any] | None = None

    def __call__(self) -> TextEnv:
        if self.target is None:
            return make(self.name, **self.kwargs)
        res = _Resolved(self.name, self.target, "registered in this process")
        return _build(res, self.target, self.kwargs)


@dataclass(frozen=True)
class EnvCopies:
    """A factory of deep copies of one env object (the Python API's ``env=<an env object>``): every env a run
    makes is a copy, so no two rollouts share state; the object must be deep-copyable (and picklable for Ray)."""

    template: Any

    def __call__(self) -> TextEnv:
        return copy.deepcopy(self.template)


def factory(name: str, **kwargs) -> EnvFactory:
    """The :class:`EnvFactory` of env ``name`` with ``kwargs``; options are checked now."""
    res = _resolve(name)
    target = _load(res)
    check_options(name, kwargs)
    return EnvFactory(name, dict(kwargs), target if name in _REGISTERED else None)


_builtin("sokoban", "creditflow.envs.sokoban:SokobanEnv", "Box pushing on a text grid (built-in generator and BFS solver).")
_builtin("sql", "creditflow.envs.sql:SqlEnv", "InterCode-style SQL on SQLite (built-in suite, custom JSONL, Spider/InterCode loaders).")
_builtin("household", "creditflow.envs.household:HouseholdEnv", "ALFWorld-like household tasks on TextWorld games generated offline (needs creditflow[household]).")
_builtin("webshop", "creditflow.envs.webshop:WebShopEnv", "WebShop-style shopping: search, results, item pages and WebShop's graded purchase reward (generated catalog or WebShop's data files).")
_builtin("alfworld", "creditflow.envs.alfworld:AlfworldEnv", "ALFWorld text games (needs the alfworld package and ALFWORLD_DATA).")
