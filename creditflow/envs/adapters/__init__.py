"""Adapters from the env standards the field already uses to creditflow's text-env protocol
(``creditflow.envs.base``): ``--env <adapter>:<their env id or class>`` on every command, and the same string in
the Python API.

``ADAPTERS`` maps an adapter's prefix to ``"module:function"``. The function is called as
``function(spec, **kwargs)``: ``spec`` is the text after the first ``:`` (an env id, or ``module:Class``), and
``kwargs`` are the run's ``env.kwargs``; it returns an object that follows the protocol (``reset``/``step``, the
info keys of ``creditflow.envs.base.INFO_KEYS``). Each adapter module imports its package where the env is built,
so listing adapters never imports them.
"""

from __future__ import annotations

ADAPTERS: dict[str, str] = {}
