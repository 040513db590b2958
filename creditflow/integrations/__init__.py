"""Bridges to training frameworks that creditflow does not run itself: ``verl`` (its advantage-estimator
registry, DataProto layout and v1 trainer: ``verl``, ``verl_v1``) and SkyRL (``skyrl``, ``skyrl_main``), on
the framework-free row layout of ``rows``. Each bridge imports its framework at module top; import it only
where the framework is installed (``make verl``, ``make skyrl``)."""
