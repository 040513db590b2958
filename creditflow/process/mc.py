"""Deprecated alias of :mod:`creditflow.pairs.mc` (see :mod:`creditflow.process`)."""

import sys

from creditflow.pairs import mc as _module

sys.modules[__name__] = _module
