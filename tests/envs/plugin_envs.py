"""Small envs for the plug-in, check and API tests: one that keeps the protocol and one per broken rule."""

from __future__ import annotations

import random

INFO = ("task", "admissible_actions", "action_valid", "won", "score", "state_key")


class WalkEnv:
    """Walk right to the end of a short line (a plug-in env that keeps the protocol)."""

    name = "walk"
    max_steps = 6

    def __init__(self, length: int = 3, max_steps: int = 6):
        self.length, self.max_steps = length, max_steps
        self.pos, self.steps, self.goal = 0, 0, length

    def reset(self, *, seed=None, options=None):
        self.goal = self.length + random.Random(seed).randint(0, 1)
        self.pos, self.steps = 0, 0
        return self._obs(), self._info(True)

    def step(self, action):
        self.steps += 1
        valid = isinstance(action, str) and action in ("left", "right")
        if valid:
            self.pos = max(0, self.pos + (1 if action == "right" else -1))
        won = self.pos == self.goal
        return self._obs(), float(won), won, not won and self.steps >= self.max_steps, self._info(valid)

    def _obs(self):
        return f"at {self.pos} of {self.goal}"

    def _info(self, valid):
        won = self.pos == self.goal
        return {"task": "walk to the end", "admissible_actions": ["left", "right"], "action_valid": valid,
                "won": won, "score": float(won), "state_key": f"{self.pos}/{self.goal}"}

    def snapshot(self):
        return (self.pos, self.steps, self.goal)

    def restore(self, snap):
        self.pos, self.steps, self.goal = snap
        return self._obs(), self._info(True)

    def expert_actions(self):
        return ["right"] * (self.goal - self.pos)


def make_walk(length: int = 3):
    """A factory function: its keyword arguments are the env's options."""
    return WalkEnv(length=length)


class NoStep:
    """Has reset() but no step()."""

    def reset(self, *, seed=None, options=None):
        return "", {}


class NoStateKey(WalkEnv):
    """Its info lacks state_key."""

    def _info(self, valid):
        info = super()._info(valid)
        del info["state_key"]
        return info


class NoMaxSteps(WalkEnv):
    """No turn limit of its own."""

    max_steps = None

    def __init__(self):
        super().__init__()
        self.max_steps = None


class NoExpert(WalkEnv):
    """No expert_actions(): it trains only from a given policy."""

    expert_actions = None


class Flaky(WalkEnv):
    """Not deterministic: the observation depends on the global RNG."""

    def _obs(self):
        return f"at {self.pos} of {self.goal} (noise {random.random():.6f})"


class BadScore(WalkEnv):
    """score is a string."""

    def _info(self, valid):
        return {**super()._info(valid), "score": "high"}


class BadRestore(WalkEnv):
    """restore() forgets the position."""

    def restore(self, snap):
        self.steps, self.goal = snap[1], snap[2]
        return self._obs(), self._info(True)


class UnstableKey(WalkEnv):
    """state_key carries a counter that grows across envs (replay gives other keys)."""

    made = 0

    def _info(self, valid):
        UnstableKey.made += 1
        return {**super()._info(valid), "state_key": f"{self.pos}#{UnstableKey.made}"}


class ExecutesInvalid(WalkEnv):
    """Treats any text as valid (the engine's '<invalid>...' actions too)."""

    def step(self, action):
        obs, reward, term, trunc, info = super().step(action if action in ("left", "right") else "right")
        return obs, reward, term, trunc, {**info, "action_valid": True}


class CrashesOnNonText(WalkEnv):
    """Raises on actions that are not text."""

    def step(self, action):
        return super().step(action.strip())


class LosingExpert(WalkEnv):
    """An expert that never reaches the goal."""

    def expert_actions(self):
        return ["left"]


class EmptyKeys(WalkEnv):
    """state_key is always empty."""

    def _info(self, valid):
        return {**super()._info(valid), "state_key": ""}


class Uncopyable(WalkEnv):
    """Holds something deepcopy cannot copy."""

    def __init__(self):
        super().__init__()
        import threading

        self.lock = threading.Lock()


class CutWalk(WalkEnv):
    """Told when the run cuts its episode (truncate()): scores the share of the way walked, and gives it as the last
    step's reward."""

    def __init__(self, length: int = 3, max_steps: int = 6):
        super().__init__(length=length, max_steps=max_steps)
        self.cuts = 0

    def truncate(self):
        self.cuts += 1
        share = self.pos / self.goal
        return share, {**self._info(self.last_valid), "score": share}

    def step(self, action):
        result = super().step(action)
        self.last_valid = result[4]["action_valid"]
        return result


class BadTruncate(WalkEnv):
    """truncate() returns the info alone."""

    def truncate(self):
        return self._info(True)


class MovingTruncate(WalkEnv):
    """truncate() moves the walker to the goal."""

    def truncate(self):
        self.pos = self.goal
        return 1.0, self._info(True)


class LongWalk(WalkEnv):
    """Episodes of up to 40 turns."""

    def __init__(self):
        super().__init__(max_steps=40)


class SpecEnv(WalkEnv):
    """An adapter-shaped class: built as ``SpecEnv(spec, **options)``."""

    def __init__(self, spec: str, length: int = 3):
        super().__init__(length=length)
        self.spec = spec


class Misbehaves(WalkEnv):
    """Keeps the protocol until the ``episode``-th reset in this process (counted over every instance: the run's
    own first-reset checks count too), then breaks the rule ``fault`` at step ``step`` of that episode and every
    later one (``step=0``: at the reset itself). Tests set ``Misbehaves.resets = 0`` first."""

    resets = 0
    FAULTS = ("raises", "four-tuple", "list state_key", "nan reward", "inf reward", "no won", "bytes observation",
              "reset raises", "info not a dict", "reward text", "nul state_key")

    def __init__(self, fault: str = "raises", episode: int = 1, step: int = 1, max_steps: int = 6):
        super().__init__(max_steps=max_steps)
        self.fault, self.episode, self.at = fault, episode, step
        self.broken = False

    def reset(self, *, seed=None, options=None):
        Misbehaves.resets += 1
        self.broken = Misbehaves.resets >= self.episode
        if self.broken and self.at == 0:
            raise RuntimeError("the database connection dropped")
        return super().reset(seed=seed, options=options)

    def step(self, action):
        obs, reward, terminated, truncated, info = super().step(action)
        if not self.broken or self.steps != self.at:
            return obs, reward, terminated, truncated, info
        fault = self.fault
        if fault == "raises":
            raise RuntimeError("the database connection dropped")
        if fault == "four-tuple":
            return obs, reward, terminated or truncated, info
        if fault == "list state_key":
            return obs, reward, terminated, truncated, {**info, "state_key": [self.pos, self.goal]}
        if fault == "nan reward":
            return obs, float("nan"), terminated, truncated, info
        if fault == "inf reward":
            return obs, float("inf"), terminated, truncated, info
        if fault == "no won":
            return obs, reward, terminated, truncated, {k: v for k, v in info.items() if k != "won"}
        if fault == "bytes observation":
            return obs.encode(), reward, terminated, truncated, info
        if fault == "info not a dict":
            return obs, reward, terminated, truncated, list(info.items())
        if fault == "nul state_key":
            return obs, reward, terminated, truncated, {**info, "state_key": "\x00success"}
        if fault == "reward text":
            return obs, str(reward), terminated, truncated, info
        raise ValueError(f"unknown fault {fault!r}")


class BadExpert(WalkEnv):
    """An expert that breaks a rule (issue 89): ``fault`` is ``raises``, ``a string`` (its plan ``"right"``: a
    string, not a list of actions), ``a dict``, or ``not offered`` (a first action the state does not offer)."""

    FAULTS = ("raises", "a string", "a dict", "not offered")

    def __init__(self, fault: str = "raises", max_steps: int = 6):
        super().__init__(max_steps=max_steps)
        self.fault = fault

    def expert_actions(self):
        if self.fault == "raises":
            raise RuntimeError("the planner crashed")
        if self.fault == "a string":
            return "right"
        if self.fault == "a dict":
            return {"right": 1}
        if self.fault == "not offered":
            return ["jump"] + super().expert_actions()
        raise ValueError(f"unknown fault {self.fault!r}")
