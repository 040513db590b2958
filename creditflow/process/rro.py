"""Deprecated alias of :mod:`creditflow.pairs.rro` (see :mod:`creditflow.process`): its public names, the very
same objects. Import :mod:`creditflow.pairs.rro` instead; this module goes in the next release."""

from creditflow.pairs.rro import (NO_CONTRAST, NO_RISING, StepSampling, fixed_size_sampler, rising_sampler,
                                  sample_step)

__all__ = ["NO_CONTRAST", "NO_RISING", "StepSampling", "fixed_size_sampler", "rising_sampler", "sample_step"]
