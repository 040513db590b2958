"""Deprecated alias of :mod:`creditflow.pairs.mc` (see :mod:`creditflow.process`): its public names, the very
same objects. Import :mod:`creditflow.pairs.mc` instead; this module goes in the next release."""

from creditflow.pairs.mc import MCProcessReward, MCStats, PrefixRestoreError

__all__ = ["MCProcessReward", "MCStats", "PrefixRestoreError"]
