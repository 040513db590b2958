"""A chain whose Q^π has a closed form: positions 0..N, "left" / "right", success on reaching N."""

import random
from functools import lru_cache

ACTIONS = ["left", "right"]


class ChainEnv:
    """Start at 0; "right" moves up, "left" down (0 stays); reaching ``n`` wins; ``max_steps`` steps."""

    name = "chain"

    def __init__(self, n: int = 4, max_steps: int = 6, slip: float = 0.0):
        self.n, self.max_steps, self.slip = n, max_steps, slip
        self.pos = self.steps = 0
        self.done = True
        self.rng = random.Random(0)

    def reset(self, *, seed=None, options=None):
        self.pos, self.steps, self.done = 0, 0, False
        return self._obs(), self._info()

    def step(self, action):
        assert not self.done
        if self.slip and self.rng.random() < self.slip:  # not deterministic: replay cannot restore it
            action = "left"
        self.steps += 1
        self.pos = min(self.n, self.pos + 1) if action == "right" else max(0, self.pos - 1)
        won = self.pos == self.n
        truncated = not won and self.steps >= self.max_steps
        self.done = won or truncated
        return self._obs(), float(won), won, truncated, self._info()

    def _obs(self):
        return f"at {self.pos} of {self.n}"

    def _info(self):
        won = self.pos == self.n
        return {"task": "reach the end", "admissible_actions": list(ACTIONS), "action_valid": True, "won": won,
                "score": float(won), "state_key": str(self.pos)}

    def expert_actions(self):
        return ["right"] * (self.n - self.pos)


class SnapshotChain(ChainEnv):
    def snapshot(self):
        return (self.pos, self.steps, self.done)

    def restore(self, snap):
        self.pos, self.steps, self.done = snap
        return self._obs(), self._info()


def exact_q(n: int, max_steps: int, p_right) -> callable:
    """Q^π(pos, steps_taken, action) = P(success), π(right | pos) = p_right(pos), by backward induction."""

    @lru_cache(maxsize=None)
    def v(pos: int, t: int) -> float:
        if pos == n:
            return 1.0
        if t >= max_steps:
            return 0.0
        p = p_right(pos)
        return p * q(pos, t, "right") + (1 - p) * q(pos, t, "left")

    @lru_cache(maxsize=None)
    def q(pos: int, t: int, action: str) -> float:
        nxt = min(n, pos + 1) if action == "right" else max(0, pos - 1)
        return v(nxt, t + 1)

    return q, v


class FreeTextChain(SnapshotChain):
    """A chain whose even positions offer no admissible actions (free text, as WebShop's search page):
    "right" and "left" still act there, anything else is a no-op."""

    def step(self, action):
        if action not in ACTIONS:
            self.steps += 1
            truncated = self.steps >= self.max_steps
            self.done = truncated
            return self._obs(), 0.0, False, truncated, {**self._info(), "action_valid": False}
        return super().step(action)

    def _info(self):
        info = super()._info()
        if self.pos % 2 == 0:
            info["admissible_actions"] = None
        return info
