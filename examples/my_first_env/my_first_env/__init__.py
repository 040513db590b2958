"""An example creditflow env package: ``reach`` (see README.md)."""

from my_first_env.env import ReachEnv

__all__ = ["ReachEnv"]
