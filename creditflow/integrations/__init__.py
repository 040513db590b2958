"""Bridges to training frameworks that creditflow does not run itself: ``verl`` (its advantage-estimator
registry and DataProto layout) and ``trl`` (``CreditGRPOTrainer``: TRL's GRPOTrainer with per-turn
advantages; docs/trl.md). Each bridge imports its framework at module top; import it only where the
framework is installed (``make verl``)."""
