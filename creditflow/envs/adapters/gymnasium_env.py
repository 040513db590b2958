"""gymnasium envs as creditflow envs: ``--env gymnasium:<env id>`` (``gymnasium:FrozenLake-v1``) or
``gymnasium:<module>:<Class>`` (docs/env_adapters.md).

Two kinds of gymnasium env are text envs:

* **Text spaces.** An observation space ``gymnasium.spaces.Text`` gives the observation text as it is; an action
  space ``Text`` takes the action text when the space contains it (its charset and lengths), else the action is
  invalid.
* **Discrete actions and an ``ansi`` render** (gymnasium's toy-text envs FrozenLake, Taxi, CliffWalking): the
  observation is ``env.render()`` in ``ansi`` mode (with its ANSI colour codes, which is how these renders mark
  the player), and the actions are names: ``action_names`` (one per action, in order), or for the toy-text envs
  the names their docs give. The names are the admissible actions.

``score`` is the episode's return. ``won`` is ``info["is_success"]`` where the env reports it (the convention of
gymnasium-robotics and Stable-Baselines3), else "terminated on a step whose reward is at least
``success_reward``" (FrozenLake: 1, Taxi: 20, CliffWalking: -1, the rewards of their goal step), else False; the
run's ``env.success_threshold`` then applies to the score. The state key is the gymnasium observation itself
(its text for Text spaces, else its value as text, e.g. FrozenLake's cell index): the ansi render also prints the
previous action, so the same cell reached two ways would render two ways.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from creditflow.envs.adapters.common import AdapterEnv, Outcome, import_package, load_object
from creditflow.envs.base import EnvError


@dataclass(frozen=True)
class _ToyText:
    actions: tuple[str, ...]  # the Discrete actions 0..n-1, named as the env's docs name them
    success_reward: float  # the reward of the step that reaches the goal (and terminates)
    task: str


# gymnasium's toy-text envs with an ansi render, by class (so every id and option of the class is covered)
TOY_TEXT = {
    "gymnasium.envs.toy_text.frozen_lake.FrozenLakeEnv": _ToyText(
        ("left", "down", "right", "up"), 1.0,
        "walk from the start S to the goal G over the frozen lake without falling into a hole H; the highlighted "
        "cell is where you stand, and the ice may be slippery"),
    "gymnasium.envs.toy_text.taxi.TaxiEnv": _ToyText(
        ("south", "north", "east", "west", "pickup", "dropoff"), 20.0,
        "drive the taxi (highlighted) to the passenger (the blue letter), pick them up, drive to the destination "
        "(the magenta letter) and drop them off"),
    "gymnasium.envs.toy_text.cliffwalking.CliffWalkingEnv": _ToyText(
        ("up", "right", "down", "left"), -1.0,
        "walk from your position x to the goal T without stepping onto the cliff C"),
}
TURN_CAP = 20
"""The default ``max_steps``: the id's ``max_episode_steps`` capped at this many turns, or this many without one.
gymnasium's time limits count the cheap steps of agents that explore at random (FrozenLake 100, FrozenLake8x8 and
Taxi 200); every step of an LLM policy is a generation, and an untrained policy's episodes run to the limit. The
toy-text envs' shortest solutions take at most 18 steps (Taxi; FrozenLake 6, FrozenLake8x8 14, CliffWalking 13),
so at 20 every task is winnable. ``max_steps=N`` sets another limit, up to the env's own time limit."""


class GymnasiumEnv(AdapterEnv):
    """gymnasium envs with Text spaces, or Discrete actions and an ansi render (FrozenLake, Taxi, CliffWalking)."""

    adapter = "gymnasium"
    example = "FrozenLake-v1"

    def __init__(self, spec: str, make_kwargs: dict | None = None, action_names: list[str] | None = None,
                 task: str | None = None, success_reward: float | None = None,
                 state_key: str | Callable[..., object] | None = None, max_steps: int | None = None):
        super().__init__(spec, state_key=state_key)
        gym = import_package("gymnasium", self.name, "gymnasium")
        self._env = self._build(gym, dict(make_kwargs or {}))
        try:
            self._adapt(gym, action_names, task, success_reward, max_steps)
        except EnvError:
            self._env.close()
            raise

    def _adapt(self, gym, action_names, task, success_reward, max_steps) -> None:
        """Read the spaces, names, task, success rule, limit and expert of the wrapped env."""
        spec = self.spec
        known = TOY_TEXT.get(_class_path(self._env.unwrapped))
        self._text_obs = isinstance(self._env.observation_space, gym.spaces.Text)
        if not self._text_obs and getattr(self._env, "render_mode", None) != "ansi":
            modes = ", ".join(self._env.metadata.get("render_modes", [])) or "none"
            raise EnvError(f"env {self.name!r}: its observation space {self._env.observation_space} is not Text and "
                           f"it has no 'ansi' render (render modes: {modes}); wrap it in a gymnasium "
                           "ObservationWrapper with a Text observation space")
        space = self._env.action_space
        self._text_actions = isinstance(space, gym.spaces.Text)
        if self._text_actions:
            self._names: list[str] | None = None
        elif isinstance(space, gym.spaces.Discrete):
            names = list(action_names) if action_names is not None else (list(known.actions) if known else None)
            if names is None:
                raise EnvError(f"env {self.name!r}: its actions are {space}; name them with "
                               f"env.kwargs.action_names=[...] ({int(space.n)} names, in the order of the actions)")
            if len(names) != int(space.n) or len({n.strip().lower() for n in names}) != len(names) \
                    or not all(n.strip() for n in names):
                raise EnvError(f"env {self.name!r}: action_names must be {int(space.n)} distinct non-empty names "
                               f"(its actions are {space}), got {names}")
            self._names = [n.strip() for n in names]
            self._index = {n.lower(): i for i, n in enumerate(self._names)}
            self._start = int(space.start)
        else:
            raise EnvError(f"env {self.name!r}: its action space {space} is neither Text nor Discrete")
        self._admissible = self._names
        self._task = task if task is not None else (known.task if known else
                                                     f"maximise the return of the {spec} episode")
        self.description = f"the gymnasium environment {spec}"
        self._success_reward = success_reward if success_reward is not None else (
            known.success_reward if known else None)
        limit = getattr(self._env.spec, "max_episode_steps", None) if self._env.spec is not None else None
        self._set_max_steps(max_steps if max_steps is not None else min(limit or TURN_CAP, TURN_CAP))
        self._last_obs: Any = None
        self._last_info: dict = {}
        self._last_reward = 0.0
        if self._names is not None and self._success_reward is not None and _deterministic_table(self._env):
            self.expert_actions = self._shortest_plan  # an expert only where a plan is sure to win

    def _shortest_plan(self) -> list[str]:
        """The shortest action list from the current state to a goal step (a terminating transition whose
        reward is at least ``success_reward``), by breadth-first search over the env's transition table ``P``
        (gymnasium's toy-text envs publish it; offered only when every transition in it is certain)."""
        table, start = self._env.unwrapped.P, int(self._env.unwrapped.s)
        parents: dict[int, tuple[int, int] | None] = {start: None}
        queue = deque([start])
        while queue:
            state = queue.popleft()
            for action in range(len(self._names)):
                (_, nxt, reward, done), = table[state][self._start + action]
                if done and reward >= self._success_reward:
                    plan, at = [action], state
                    while parents[at] is not None:
                        at, previous = parents[at]
                        plan.append(previous)
                    return [self._names[a] for a in reversed(plan)]
                if not done and nxt not in parents:
                    parents[nxt] = (state, action)
                    queue.append(nxt)
        return []

    def _build(self, gym, kwargs: dict):
        """The wrapped env: ``gymnasium.make(id)``, or the class / factory a ``module:Class`` spec names; with
        ``render_mode="ansi"`` when its observations are not Text and the env renders ansi."""
        module, _, attr = self.spec.partition(":")
        creator = None
        if attr and all(part.isidentifier() for part in attr.split(".")):
            creator = load_object(self.spec, f"env {self.name!r}")
        # else: an env id, or gymnasium's own "module:EnvId" (the module registers the id when imported)

        def make(**extra):
            try:
                if creator is None:
                    return gym.make(self.spec, **kwargs, **extra)
                return creator(**kwargs, **extra)
            except (gym.error.Error, ImportError, TypeError, ValueError) as exc:
                raise EnvError(f"env {self.name!r}: {type(exc).__name__}: {exc}") from None

        env = make()
        if not isinstance(getattr(env, "observation_space", None), gym.spaces.Space) or \
                not isinstance(getattr(env, "action_space", None), gym.spaces.Space):
            raise EnvError(f"env {self.name!r}: {type(env).__name__} is not a gymnasium env (no observation and "
                           "action spaces)")
        if not isinstance(env.observation_space, gym.spaces.Text) and "render_mode" not in kwargs \
                and "ansi" in env.metadata.get("render_modes", []):
            env.close()
            env = make(render_mode="ansi")
        return env

    # -- AdapterEnv ---------------------------------------------------------------------------------
    def _native(self):
        return self._env

    def _key(self, observation: str) -> str:
        if self._state_key is not None:
            return super()._key(observation)
        return observation if self._text_obs else _value_text(self._last_obs)

    def _text(self, obs) -> str:
        if self._text_obs:
            return str(obs)
        shown = self._env.render()
        return shown if isinstance(shown, str) else str(shown)

    def _begin(self, seed, options) -> str:
        self._last_obs, self._last_info = self._env.reset(seed=seed, options=options)
        self._last_reward = 0.0
        return self._text(self._last_obs)

    def _act(self, action: str) -> Outcome | None:
        if self._text_actions:
            if not self._env.action_space.contains(action):
                return None
            native = action
        else:
            index = self._index.get(" ".join(action.split()).lower())
            if index is None:
                return None
            native = self._start + index
        obs, reward, terminated, truncated, info = self._env.step(native)
        self._last_obs, self._last_info, self._last_reward = obs, dict(info), float(reward)
        return Outcome(self._text(obs), float(reward), bool(terminated), bool(truncated))

    def _end(self, terminated: bool) -> tuple[float, bool, float]:
        if "is_success" in self._last_info:
            won = bool(self._last_info["is_success"])
        else:
            won = terminated and self._success_reward is not None and self._last_reward >= self._success_reward
        return self._return, bool(won), 0.0

    def close(self) -> None:
        self._env.close()


def _deterministic_table(env) -> bool:
    """Whether the env publishes a transition table ``P`` (state -> action -> [(p, next, reward, done)]) whose
    every transition is certain (FrozenLake with is_slippery=False, Taxi, CliffWalking; not slippery ones).
    Taxi's fickle passenger changes the destination outside ``P``, so that option has no sure plan either."""
    table = getattr(env.unwrapped, "P", None)
    if not isinstance(table, dict) or getattr(env.unwrapped, "fickle_passenger", False):
        return False
    try:
        return all(len(moves) == 1 and float(moves[0][0]) == 1.0
                   for actions in table.values() for moves in actions.values())
    except (AttributeError, TypeError, IndexError, ValueError):
        return False


def _class_path(env) -> str:
    cls = type(env)
    return f"{cls.__module__}.{cls.__qualname__}"


def _value_text(value) -> str:
    """A gymnasium observation as text: integers plainly, arrays by their values (no dtype noise)."""
    if isinstance(value, (bool, np.bool_)):
        return str(bool(value))
    if isinstance(value, (int, np.integer)):
        return str(int(value))
    if isinstance(value, np.ndarray):
        return np.array2string(value, separator=",", threshold=np.inf, max_line_width=np.inf)
    if isinstance(value, (tuple, list)):
        return "(" + ",".join(_value_text(v) for v in value) + ")"
    if isinstance(value, dict):
        return "{" + ",".join(f"{k}:{_value_text(v)}" for k, v in sorted(value.items())) + "}"
    return str(value)
