"""Deprecated alias of :mod:`creditflow.pairs.preferences` (see :mod:`creditflow.process`): its public names, the
very same objects. Import :mod:`creditflow.pairs.preferences` instead; this module goes in the next release."""

from creditflow.pairs.preferences import (CARD, HEADLINE, PAIRS, RESUMABLE_SETTINGS, ROLES, SUMMARY, TASKS,
                                          TRAJECTORIES, TRL_COLUMNS, PreferenceWriter, aggregate, check_collection,
                                          chosen_valid, preference_record, read_preferences)

__all__ = ["CARD", "HEADLINE", "PAIRS", "RESUMABLE_SETTINGS", "ROLES", "SUMMARY", "TASKS", "TRAJECTORIES",
           "TRL_COLUMNS", "PreferenceWriter", "aggregate", "check_collection", "chosen_valid", "preference_record",
           "read_preferences"]
