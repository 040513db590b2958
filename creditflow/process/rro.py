"""Deprecated alias of :mod:`creditflow.pairs.rro` (see :mod:`creditflow.process`)."""

import sys

from creditflow.pairs import rro as _module

sys.modules[__name__] = _module
