"""Deprecated alias of :mod:`creditflow.pairs.collect` (see :mod:`creditflow.process`)."""

import sys

from creditflow.pairs import collect as _module

sys.modules[__name__] = _module
