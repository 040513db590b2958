"""Adapters from the env standards the field already uses to creditflow's text-env protocol
(``creditflow.envs.base``): ``--env <adapter>:<their env id or class>`` on every command, and the same string in
the Python API.

``ADAPTERS`` maps an adapter's prefix to ``"module:Class"``. The class is an env of the protocol (``reset``/
``step``, the info keys of ``creditflow.envs.base.INFO_KEYS``) built as ``Class(spec, **options)``: ``spec`` is
the text after the first ``:`` (an env id, or ``module:Class``), ``options`` are the run's ``env.kwargs`` and are
listed and type-checked like a built-in env's (from the class's ``__init__`` signature after ``spec``). Each
adapter module imports its package where the env is built, so listing adapters never imports them.
"""

from __future__ import annotations

import importlib.metadata

VERIFIERS_03 = "creditflow.envs.adapters.verifiers_env:VerifiersEnv"  # verifiers 0.3.x: MultiTurnEnv, Rubric
VERIFIERS_04 = "creditflow.envs.adapters.verifiers_v1_env:VerifiersV1Env"  # verifiers 0.4: verifiers.v1


def verifiers_adapter() -> str:
    """The ``verifiers:`` adapter for the installed release (read from its metadata, without importing it):
    0.4 and later get the ``verifiers.v1`` adapter, anything else (0.3.x, or none: its error says what to
    install) the 0.3 one."""
    try:
        release = tuple(int(part) for part in importlib.metadata.version("verifiers").split(".")[:2])
    except (importlib.metadata.PackageNotFoundError, ValueError):
        return VERIFIERS_03
    return VERIFIERS_04 if release >= (0, 4) else VERIFIERS_03


ADAPTERS: dict[str, str] = {
    "gymnasium": "creditflow.envs.adapters.gymnasium_env:GymnasiumEnv",
    "skyrl": "creditflow.envs.adapters.skyrl_env:SkyRLEnv",
    "verifiers": verifiers_adapter(),
    "trl": "creditflow.envs.adapters.trl_env:TRLEnv",
}


def split_adapter(name: str) -> tuple[str, str] | None:
    """``(adapter target "module:Class", spec)`` when ``name`` is ``<adapter>:<spec>``, else None."""
    prefix, sep, spec = name.partition(":")
    if sep and prefix in ADAPTERS:
        return ADAPTERS[prefix], spec
    return None
