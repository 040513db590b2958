"""creditflow: credit assignment for multi-turn LLM agents trained on terminal rewards.

The Python API (``creditflow.api``), loaded on first use so that ``import creditflow`` stays light (no torch)::

    import creditflow
    result = creditflow.train(["rl.algo=rewardflow"], env="sokoban")   # also sft, evaluate, rro, audit

``train``, ``sft``, ``evaluate``, ``rro`` and ``audit`` are the functions of :mod:`creditflow.api`; no subpackage
shares their names (the training kernels are ``creditflow.trainer``, RRO's pairs ``creditflow.pairs``, the
audit's parts ``creditflow.auditing``), so importing a subpackage never replaces one of them.
"""

from __future__ import annotations

import importlib

__version__ = "0.2.0"

_API = ("train", "sft", "evaluate", "rro", "audit", "RunResult", "EvalResult", "load_config")


def __getattr__(name: str):
    if name in _API:
        return getattr(importlib.import_module("creditflow.api"), name)
    raise AttributeError(f"module 'creditflow' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *_API])
