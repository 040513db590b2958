"""A small grid whose Q^π and V^π have a closed form by dynamic programming: branching moves, dead ends (pits that
end the episode in failure), walls that make a move a self-loop, and a step limit."""

from __future__ import annotations

from collections import deque
from functools import lru_cache

import numpy as np

MOVES = {"up": (-1, 0), "down": (1, 0), "left": (0, -1), "right": (0, 1)}


class GridEnv:
    """``size`` x ``size`` cells, start (0, 0), goal at the far corner, ``pits`` end the episode unsolved;
    moving into the border leaves the agent where it is (a valid no-op). ``state_key`` is the cell."""

    name = "grid"

    def __init__(self, size: int = 4, pits=((1, 1), (2, 3)), max_steps: int = 10):
        self.size, self.pits, self.max_steps = size, frozenset(map(tuple, pits)), max_steps
        self.goal = (size - 1, size - 1)
        self.pos, self.t, self.done = (0, 0), 0, True

    def reset(self, *, seed=None, options=None):
        self.pos, self.t, self.done = (0, 0), 0, False
        return self._obs(), self._info()

    def move(self, pos, action):
        dr, dc = MOVES[action]
        r, c = pos[0] + dr, pos[1] + dc
        return (r, c) if 0 <= r < self.size and 0 <= c < self.size else pos

    def step(self, action):
        assert not self.done
        self.t += 1
        self.pos = self.move(self.pos, action) if action in MOVES else self.pos
        won, fell = self.pos == self.goal, self.pos in self.pits
        truncated = not (won or fell) and self.t >= self.max_steps
        self.done = won or fell or truncated
        return self._obs(), float(won), won or fell, truncated, self._info(valid=action in MOVES)

    def _obs(self):
        return f"at {self.pos}"

    def _info(self, valid=True):
        won = self.pos == self.goal
        return {"task": "reach the corner", "admissible_actions": list(MOVES), "action_valid": valid, "won": won,
                "score": float(won), "state_key": key_of(self.pos)}

    def snapshot(self):
        return (self.pos, self.t, self.done)

    def restore(self, snap):
        self.pos, self.t, self.done = snap
        return self._obs(), self._info()

    def distance(self, pos):
        """Moves to the goal avoiding pits (None: no way)."""
        seen, queue = {pos: 0}, deque([pos])
        while queue:
            p = queue.popleft()
            if p == self.goal:
                return seen[p]
            for a in MOVES:
                q = self.move(p, a)
                if q not in seen and q not in self.pits:
                    seen[q] = seen[p] + 1
                    queue.append(q)
        return None

    def expert_actions(self):
        """A shortest plan avoiding pits (the first move in MOVES order that shortens the distance)."""
        if self.pos in self.pits:
            return None
        plan, pos = [], self.pos
        while pos != self.goal:
            d = self.distance(pos)
            if d is None:
                return None
            step = next(a for a in MOVES if self.move(pos, a) not in self.pits
                        and self.distance(self.move(pos, a)) == d - 1)
            plan.append(step)
            pos = self.move(pos, step)
        return plan

    def cells(self):
        return [(r, c) for r in range(self.size) for c in range(self.size)]


def key_of(pos) -> str:
    return f"{pos[0]},{pos[1]}"


class TablePolicy:
    """A policy that differs in every state: π(·|cell) drawn once per cell (a softmax of normal logits, with the
    expert's move pushed up by ``lean`` so that success is neither rare nor sure)."""

    name = "table"

    def __init__(self, env: GridEnv, seed: int = 0, lean: float = 2.5):
        rng = np.random.default_rng(seed)
        self.table = {}
        for cell in env.cells():
            logits = rng.normal(size=len(MOVES))
            env.pos = cell
            plan = env.expert_actions() if cell != env.goal else None
            if plan:
                logits[list(MOVES).index(plan[0])] += lean
            p = np.exp(logits - logits.max())
            self.table[key_of(cell)] = p / p.sum()

    def probs(self, item):
        return self.table[item[1]]

    def act(self, items, rng):
        return [item[2][int(rng.choice(len(item[2]), p=self.probs(item)))] for item in items]


def exact(env: GridEnv, policy):
    """(q, v): Q^π(cell, t, action) and V^π(cell, t) by backward induction; ``policy.probs((0, key, actions,
    env))`` with ``env`` put in the cell first (for an expert that plans from it)."""
    actions = list(MOVES)

    @lru_cache(maxsize=None)
    def probs(cell):
        env.pos, env.done = cell, False
        return tuple(policy.probs((0, key_of(cell), actions, env)))

    @lru_cache(maxsize=None)
    def v(cell, t):
        if cell == env.goal:
            return 1.0
        if cell in env.pits or t >= env.max_steps:
            return 0.0
        return sum(p * q(cell, t, a) for p, a in zip(probs(cell), actions))

    @lru_cache(maxsize=None)
    def q(cell, t, action):
        return v(env.move(cell, action), t + 1)

    return q, v
