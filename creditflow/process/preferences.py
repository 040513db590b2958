"""Deprecated alias of :mod:`creditflow.pairs.preferences` (see :mod:`creditflow.process`)."""

import sys

from creditflow.pairs import preferences as _module

sys.modules[__name__] = _module
