"""How a benchmark starts another benchmark process: ``python -m benchmarks.X``, with this checkout importable.

The benchmarks are a package run as modules (``python -m benchmarks.credit_learning``), never as script paths,
so a child process names its module, and its environment puts this checkout first on ``PYTHONPATH``: the child
imports this checkout's ``benchmarks`` and ``creditflow`` from whatever working directory it was started in.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def module_command(module: str, *args: str, python: str = sys.executable) -> list[str]:
    """The command line that runs benchmark ``module`` (``benchmarks.X``) with ``args``."""
    return [python, "-m", module, *args]


def child_env(tree: Path = ROOT, base: dict | None = None, **extra: str) -> dict:
    """``base`` (default: this process's environment) with ``tree`` first on ``PYTHONPATH`` and ``extra`` set."""
    env = dict(os.environ if base is None else base)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(tree), env.get("PYTHONPATH", "")) if p)
    return {**env, **extra}
