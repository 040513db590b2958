"""Deprecated: ``creditflow.process`` is now :mod:`creditflow.pairs` (RRO's process rewards, samplers and
preference pairs; "process" means OS processes elsewhere in creditflow). This alias goes in the next release.

``import creditflow.process.rro`` (or ``mc``, ``collect``, ``preferences``) gives the module of
``creditflow.pairs`` itself, with a ``DeprecationWarning``.
"""

import warnings

warnings.warn("creditflow.process is renamed creditflow.pairs; the old name goes in the next release",
              DeprecationWarning, stacklevel=2)
