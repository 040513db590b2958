"""Training kernels: losses, the RL step, SFT / DPO through TRL, checkpoints, metrics, data parallelism.

``creditflow.train`` is also the Python API's ``train`` function: calling this package,
``creditflow.train(config, env=...)``, runs :func:`creditflow.api.train` (the package keeps its name; a
function of the same name on ``creditflow`` would be replaced by the package the first time it is imported).
"""

from __future__ import annotations

import sys
import types


class _CallablePackage(types.ModuleType):
    def __call__(self, *args, **kwargs):
        """``creditflow.train(config=None, *, env=None, overrides=(), resume=None)``: :func:`creditflow.api.train`."""
        from creditflow import api  # the API layer above; the one upward import (pyproject.toml ignore_imports)

        return api.train(*args, **kwargs)


sys.modules[__name__].__class__ = _CallablePackage
