"""Deprecated alias of :mod:`creditflow.pairs.collect` (see :mod:`creditflow.process`): its public names, the very
same objects. Import :mod:`creditflow.pairs.collect` instead; this module goes in the next release."""

from creditflow.pairs.collect import PreferenceCollector, task_seed

__all__ = ["PreferenceCollector", "task_seed"]
