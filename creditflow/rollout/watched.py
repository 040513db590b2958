"""An engine that shows its rollouts as a bar of turns, through the engine's own ``on_turn`` hook."""

from __future__ import annotations

from typing import Protocol

from creditflow.rollout.engine import RolloutEngine


class Bars(Protocol):
    """What shows the bars (``creditflow.recipes.progress.RunProgress``): ``bar(description, total, keep=...,
    unit=...)`` is a context manager that yields ``update(completed, info)``."""

    def bar(self, description: str, total: int | None, *, completed: int = 0, keep: bool = True,
            unit: str = ""): ...


class WatchedEngine(RolloutEngine):
    """A :class:`RolloutEngine` that shows each rollout as a bar of turns (``watch``: description or None).

    The bar counts turns up to the episode cap, with the episodes still running; it uses the engine's own
    ``on_turn`` hook and changes nothing else. ``keep_bar``: the bar stays when the rollout ends.
    """

    watch: str | None = None
    progress: Bars | None = None
    turn_limit: int | None = None
    keep_bar: bool = False

    def rollout_groups(self, specs, group_size=1, **kwargs):
        if self.watch is None or self.progress is None:
            return super().rollout_groups(specs, group_size, **kwargs)
        episodes = len(specs) * group_size
        limit = kwargs.get("max_turns") or self.turn_limit
        caller = kwargs.get("on_turn")
        with self.progress.bar(self.watch, limit, keep=self.keep_bar, unit="turns") as update:
            def on_turn(turn: int, active: int) -> None:
                update(turn, f"{active}/{episodes} episodes running")
                if caller is not None:
                    caller(turn, active)

            kwargs["on_turn"] = on_turn
            result = super().rollout_groups(specs, group_size, **kwargs)
            update(limit or 0, f"{episodes} episodes done")
            return result
