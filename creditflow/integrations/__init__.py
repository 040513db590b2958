"""Bridges to training frameworks that creditflow does not run itself: ``verl`` (its advantage-estimator
registry, DataProto layout and v1 trainer: ``verl``, ``verl_v1``), SkyRL (``skyrl``, ``skyrl_main``), both on the
framework-free row layout of ``rows``, and ``trl`` (``CreditGRPOTrainer``: TRL's GRPOTrainer with per-turn
advantages; docs/trl.md). Each bridge imports its framework at module top; import it only where the framework
is installed (``make verl``, ``make skyrl``; TRL is in the main environment)."""
