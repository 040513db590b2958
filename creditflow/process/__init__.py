"""Deprecated: ``creditflow.process`` is now :mod:`creditflow.pairs` (RRO's process rewards, samplers and
preference pairs; "process" means OS processes elsewhere in creditflow). This alias goes in the next release.

``creditflow.process.rro`` (or ``mc``, ``collect``, ``preferences``) is a plain module that re-exports the public
names of its :mod:`creditflow.pairs` namesake (the very same objects); importing it warns (``DeprecationWarning``).
"""

import warnings

warnings.warn("creditflow.process is renamed creditflow.pairs; the old name goes in the next release",
              DeprecationWarning, stacklevel=2)
