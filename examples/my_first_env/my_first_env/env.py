"""Reach the target number: start at a small number and reach the target with "add 1", "add 2" and "double".

Going past the target loses. A creditflow env in plain Python: ``reset`` and ``step`` with the info keys of the
protocol, ``snapshot``/``restore``, and an expert (a shortest plan, found by breadth-first search) for SFT.
"""

import random
from collections import deque

ACTIONS = {"add 1": lambda n: n + 1, "add 2": lambda n: n + 2, "double": lambda n: n * 2}


class ReachEnv:
    """Reach the target number with add 1, add 2 and double (an example plug-in env)."""

    name = "reach"
    description = "a number puzzle"

    def __init__(self, max_steps: int = 6, max_moves: int = 4):
        if not 1 <= max_moves <= max_steps:
            raise ValueError(f"need 1 <= max_moves <= max_steps, got max_moves={max_moves}, max_steps={max_steps}")
        self.max_steps, self.max_moves = max_steps, max_moves
        self.value = self.target = self.steps = 0
        self.done = True  # until the first reset

    def reset(self, *, seed=None, options=None):
        rng = random.Random(seed)  # a local RNG: the same seed gives the same task in any process
        self.value = self.target = rng.randint(1, 5)
        while self.target == self.value:  # a random walk of 1..max_moves moves sets the target
            for _ in range(rng.randint(1, self.max_moves)):
                self.target = ACTIONS[rng.choice(sorted(ACTIONS))](self.target)
        self.steps, self.done = 0, False
        return self._observation(), self._info(valid=True)

    def step(self, action):
        if self.done:
            raise RuntimeError("step() after the episode ended; call reset()")
        self.steps += 1
        valid = isinstance(action, str) and action in ACTIONS  # "<invalid>..." and non-text actions too
        if valid:
            self.value = ACTIONS[action](self.value)
        won = self.value == self.target
        terminated = won or self.value > self.target
        truncated = not terminated and self.steps >= self.max_steps
        self.done = terminated or truncated
        return self._observation(), float(won), terminated, truncated, self._info(valid)

    def _observation(self):
        return f"Number: {self.value}. Target: {self.target}."

    def _info(self, valid):
        won = self.value == self.target
        return {
            "task": f"reach {self.target} with add 1, add 2 or double, without going past it",
            "admissible_actions": sorted(ACTIONS),
            "action_valid": valid,
            "won": won,
            "score": float(won),
            "state_key": f"{self.value}/{self.target}",  # RewardFlow and GiGPO group steps by this key
        }

    def snapshot(self):
        return (self.value, self.target, self.steps, self.done)

    def restore(self, snapshot):
        self.value, self.target, self.steps, self.done = snapshot
        return self._observation(), self._info(valid=True)

    def expert_actions(self):
        """A shortest plan from the current number to the target (breadth-first search)."""
        paths, queue = {self.value: []}, deque([self.value])
        while queue:
            n = queue.popleft()
            if n == self.target:
                return paths[n]
            for action, apply in sorted(ACTIONS.items()):
                m = apply(n)
                if m <= self.target and m not in paths:
                    paths[m] = paths[n] + [action]
                    queue.append(m)
        return []
