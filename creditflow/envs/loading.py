"""Importing the module of a user's ``module:name`` target, the one way every env name does it.

``--env module:Class``, ``--env trl:module:Class`` (and the other adapters' ``module:Class`` specs), an adapter's
``state_key=module:fn`` option and a plug-in's target all import their module here: ``importlib`` first, then,
when the module's top package is not importable but sits in the current working directory, once more with that
directory on ``sys.path`` (as ``uvicorn module:app`` does), so a command run from the folder that holds
``my_env.py`` finds it whichever way the env is named.
"""

from __future__ import annotations

import importlib
import os
import sys
import types


def import_target_module(module: str) -> types.ModuleType:
    """``importlib.import_module(module)``, retried with the current directory on ``sys.path`` when the module's
    top-level package is missing and the current directory holds it (``top.py`` or ``top/``). Raises what the
    import raises."""
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as exc:
        top, here = module.split(".")[0], os.getcwd()
        if exc.name != top or here in sys.path or not holds_module(here, top):
            raise
        sys.path.append(here)  # `creditflow ...` run from the directory that holds the module
        return importlib.import_module(module)


def holds_module(directory: str, top: str) -> bool:
    """``directory`` holds a module or package named ``top``."""
    return os.path.isfile(os.path.join(directory, top + ".py")) or os.path.isdir(os.path.join(directory, top))
