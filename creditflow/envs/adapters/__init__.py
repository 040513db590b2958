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

ADAPTERS: dict[str, str] = {
    "gymnasium": "creditflow.envs.adapters.gymnasium_env:GymnasiumEnv",
    "skyrl": "creditflow.envs.adapters.skyrl_env:SkyRLEnv",
    "verifiers": "creditflow.envs.adapters.verifiers_env:VerifiersEnv",
    "trl": "creditflow.envs.adapters.trl_env:TRLEnv",
}


def split_adapter(name: str) -> tuple[str, str] | None:
    """``(adapter target "module:Class", spec)`` when ``name`` is ``<adapter>:<spec>``, else None."""
    prefix, sep, spec = name.partition(":")
    if sep and prefix in ADAPTERS:
        return ADAPTERS[prefix], spec
    return None
