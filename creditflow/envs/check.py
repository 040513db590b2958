"""What an env must provide, checked: ``creditflow envs check NAME`` and the checks every run makes before any
work on an env that is not built in.

:func:`check_env` plays a few seeds with a zero-argument env factory and returns one :class:`Check` per
protocol rule (docs/environments.md, "Your own environment"): the return values of ``reset``/``step``, the
info keys and their types, determinism under a seed, ``snapshot``/``restore`` (or verified replay), a
``state_key`` that replay reproduces, invalid and non-text actions handled without an exception, an expert
(``expert_actions()``, when the env has one) that reaches ``won``, the optional ``truncate()`` hook, and a warning
when episodes can run longer than :data:`LONG_EPISODE` turns. :func:`first_reset_problem` is the quick
part a run checks on the first reset.
"""

from __future__ import annotations

import copy
import math
import numbers
import random
from dataclasses import dataclass
from typing import Any, Callable, Literal

from creditflow.config import RolloutConfig
from creditflow.envs.base import INFO_KEYS, INVALID_ACTION_PREFIX, ReplayMismatch, check_determinism, has_snapshot, replay

Status = Literal["pass", "fail", "warn", "skip"]

PROBE_ACTION = "look"
"""The action played by envs that show no admissible actions and have no expert."""

NON_TEXT_ACTIONS: tuple = (None, 42, ["up"], b"up")
"""Actions that are not text: every env must answer them as invalid actions, never with an exception."""

LONG_EPISODE = 30
"""``envs check`` warns when an env's ``max_steps`` is above this many turns. Every turn is one generation for each
episode still running, and the episodes of a policy that does not solve the task (every policy at first) run to the
limit, so a training step's rollouts cost up to tasks x group x max_steps generations; above 30 that is more than
twice the built-in Sokoban's and WebShop's (15 turns, their papers' horizon)."""


@dataclass(frozen=True)
class Check:
    name: str
    status: Status
    detail: str = ""


def _is_bool(value: Any) -> bool:
    return isinstance(value, bool) or type(value).__name__ == "bool_"  # NumPy's bool too


def _is_number(value: Any) -> bool:
    return isinstance(value, numbers.Real) and not _is_bool(value) and math.isfinite(float(value))


_INFO_TYPES: dict[str, tuple[Callable[[Any], bool], str]] = {
    "task": (lambda v: isinstance(v, str), "a string"),
    "admissible_actions": (lambda v: v is None or (isinstance(v, (list, tuple)) and all(isinstance(a, str) for a in v)),
                           "a list of strings or None"),
    "action_valid": (_is_bool, "true or false"),
    "won": (_is_bool, "true or false"),
    "score": (_is_number, "a finite number"),
    "state_key": (lambda v: isinstance(v, str) and not v.startswith("\x00"),
                  "a string (not starting with NUL, which creditflow's own graph nodes do)"),
}


def info_problem(info: Any) -> str | None:
    """What is wrong with an ``info`` dict (the first missing key, or a key of the wrong type), else None."""
    if not isinstance(info, dict):
        return f"info is {type(info).__name__}, not a dict"
    for key in INFO_KEYS:
        if key not in info:
            return f"info has no {key!r} key (every info needs {', '.join(INFO_KEYS)})"
        ok, expected = _INFO_TYPES[key]
        if not ok(info[key]):
            return f"info[{key!r}] must be {expected}, got {_short(info[key])}"
    return None


def _short(value: Any, n: int = 40) -> str:
    text = repr(value)
    return text if len(text) <= n else text[: n - 3] + "..."


def _shape(result: Any) -> str:
    """A returned value that is not the tuple asked for: a tuple by its length, else its repr."""
    if isinstance(result, (tuple, list)):
        return f"a {type(result).__name__} of {len(result)} value(s): {_short(result)}"
    return _short(result)


def _reset_problem(result: Any) -> str | None:
    if not (isinstance(result, tuple) and len(result) == 2):
        return f"reset() must return (observation, info), got {_shape(result)}"
    if not isinstance(result[0], str):
        return f"reset() returned an observation of type {type(result[0]).__name__}, not a string"
    return None


def _step_problem(result: Any) -> str | None:
    if not (isinstance(result, tuple) and len(result) == 5):
        return f"step() must return (observation, reward, terminated, truncated, info), got {_shape(result)}"
    obs, reward, terminated, truncated, _ = result
    if not isinstance(obs, str):
        return f"step() returned an observation of type {type(obs).__name__}, not a string"
    if not _is_number(reward):
        return f"step() returned a reward {_short(reward)}, not a finite number"
    if not (_is_bool(terminated) and _is_bool(truncated)):
        return f"step() must return terminated and truncated as true/false, got {_short(terminated)}, {_short(truncated)}"
    return None


def reset_problem(result: Any) -> str | None:
    """What is wrong with a value ``reset()`` (or ``restore()``) returned: its shape, its observation, an info key
    missing or of the wrong type; None when it keeps the protocol. The rule as ``envs check`` prints it."""
    return _reset_problem(result) or info_problem(result[1])


def step_problem(result: Any) -> str | None:
    """What is wrong with a value ``step()`` returned: the 5-tuple, a text observation, a finite reward, bool flags,
    and every info key of the right type (a text ``state_key``, so it is hashable); None when it keeps the
    protocol. The rule as ``envs check`` prints it."""
    return _step_problem(result) or info_problem(result[4])


def truncate_problem(result: Any) -> str | None:
    """What is wrong with a value ``truncate()`` returned: ``(reward, info)``, a finite reward and every info key of
    the right type; None when it keeps the protocol."""
    if not (isinstance(result, tuple) and len(result) == 2):
        return f"truncate() must return (reward, info), got {_shape(result)}"
    if not _is_number(result[0]):
        return f"truncate() returned a reward {_short(result[0])}, not a finite number"
    return info_problem(result[1])


def first_reset_problem(env: Any, seed: int = 0) -> str | None:
    """The first problem of ``env``'s first reset (its return value, an info key missing or of the wrong type),
    else None. An exception raised by ``reset`` is a problem too."""
    try:
        result = env.reset(seed=seed)
    except Exception as exc:
        return f"reset(seed={seed}) raised {_last_line(exc)}"
    problem = _reset_problem(result)
    if problem is None:
        problem = info_problem(result[1])
        problem = problem and f"first reset: {problem}"
    return problem


def last_line(exc: BaseException) -> str:
    """``Type: message`` of an exception, its last line only."""
    return _last_line(exc)


def _last_line(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    return text.splitlines()[-1]


class _Failed(Exception):
    """A protocol rule broken while playing (the message says what and where)."""


def _max_steps(env: Any) -> int | None:
    value = getattr(env, "max_steps", None)
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 1 else None


@dataclass
class _Episode:
    seed: int
    actions: list[str]
    observations: list[str]
    infos: list[dict]
    done: bool


class _Probe:
    """Plays episodes and turns every broken rule into :class:`_Failed`."""

    def __init__(self, make_env: Callable[[], Any], horizon: int):
        self.make_env, self.horizon = make_env, horizon

    def reset(self, env, seed: int) -> tuple[str, dict]:
        try:
            result = env.reset(seed=seed)
        except Exception as exc:
            raise _Failed(f"reset(seed={seed}) raised {_last_line(exc)}") from None
        problem = reset_problem(result)
        if problem:
            raise _Failed(f"seed {seed}, reset: {problem}")
        return result

    def step(self, env, seed: int, t: int, action: Any) -> tuple:
        try:
            result = env.step(action)
        except Exception as exc:
            raise _Failed(f"seed {seed}, step {t} ({_short(action)}): step() raised {_last_line(exc)}") from None
        problem = step_problem(result)
        if problem:
            raise _Failed(f"seed {seed}, step {t} ({_short(action)}): {problem}")
        return result

    def plan(self, env, seed: int, info: dict) -> list[str]:
        """The expert's plan when the env has one, else admissible actions drawn with ``Random(seed)``, else
        :data:`PROBE_ACTION` (at most ``horizon`` actions)."""
        if callable(getattr(env, "expert_actions", None)):
            try:
                plan = env.expert_actions()
            except Exception as exc:
                raise _Failed(f"seed {seed}: expert_actions() raised {_last_line(exc)}") from None
            if plan:
                return [str(a) for a in plan][: self.horizon]
        rng = random.Random(seed)
        admissible = info.get("admissible_actions")
        return [rng.choice(admissible) if admissible else PROBE_ACTION for _ in range(self.horizon)]

    def play(self, seed: int, actions: list[str] | None = None) -> _Episode:
        """One episode from ``seed`` on a fresh env: ``actions``, else :meth:`plan`'s, until it ends."""
        env = self.make_env()
        obs, info = self.reset(env, seed)
        plan = list(actions) if actions is not None else self.plan(env, seed, info)
        episode = _Episode(seed, [], [obs], [info], False)
        for t, action in enumerate(plan):
            obs, _, terminated, truncated, info = self.step(env, seed, t, action)
            episode.actions.append(action)
            episode.observations.append(obs)
            episode.infos.append(info)
            if terminated or truncated:
                episode.done = True
                break
        return episode


def check_env(make_env: Callable[[], Any], seeds: tuple[int, ...] | list[int] = (0, 1, 2),
              success_threshold: float | None = None) -> list[Check]:
    """Every protocol check on envs from ``make_env`` (a zero-argument factory), played from ``seeds``. The
    expert succeeds on ``won``, or on ``score >= success_threshold`` when one is given (a run's success rule)."""
    seeds = list(seeds)
    try:
        env = make_env()
    except Exception as exc:
        return [Check("env builds", "fail", _last_line(exc))]
    checks = [_attributes(env)]
    probe = _Probe(make_env, _max_steps(env) or 20)
    episodes: list[_Episode] = []
    try:
        episodes = [probe.play(seed) for seed in seeds]
    except _Failed as exc:
        checks.append(Check("reset/step values and info keys", "fail", str(exc)))
    else:
        steps = sum(len(e.actions) for e in episodes)
        checks.append(Check("reset/step values and info keys", "pass",
                            f"{len(seeds)} seed(s), {steps} step(s): every info key, of the right type"))
    if not episodes:
        return checks + [Check(name, "skip", "the env cannot play an episode") for name in
                         ("determinism", "snapshot/restore or replay", "state_key", "invalid actions", "expert",
                          "truncate", "episode length")]
    checks.append(_determinism(make_env, episodes))
    checks.append(_restore(probe, env, episodes))
    checks.append(_state_keys(probe, episodes))
    checks.append(_invalid(probe, seeds[0]))
    checks.append(_expert(probe, env, seeds, success_threshold))
    checks.append(_truncate(probe, env, seeds[0]))
    checks.append(_episode_length(env, episodes))
    return checks


def _attributes(env: Any) -> Check:
    name = getattr(env, "name", None)
    if _max_steps(env) is None:
        return Check("name and max_steps", "fail", f"max_steps is {_short(getattr(env, 'max_steps', None))}: an env "
                     "needs a turn limit, a positive integer max_steps (or every run sets rollout.max_steps)")
    if not isinstance(name, str) or not name:
        return Check("name and max_steps", "warn", f"no name attribute (prompts call it "
                     f"'{type(env).__name__}'); max_steps={env.max_steps}")
    return Check("name and max_steps", "pass", f"name={name!r}, max_steps={env.max_steps}")


def _determinism(make_env, episodes: list[_Episode]) -> Check:
    for episode in episodes:
        try:
            check_determinism(make_env, episode.seed, episode.actions)
        except AssertionError as exc:
            return Check("determinism", "fail", f"seed {episode.seed}: {exc}")
        except Exception as exc:
            return Check("determinism", "fail", f"seed {episode.seed}: {_last_line(exc)}")
    return Check("determinism", "pass", "same seed and actions on two fresh envs: the same episode")


def _restore(probe: _Probe, env: Any, episodes: list[_Episode]) -> Check:
    """A snapshot taken mid-episode, restored into a fresh env, continues exactly as the episode did; without
    snapshots, verified replay of the episode in a fresh env reproduces its observations."""
    if not has_snapshot(env):
        try:
            for e in episodes:
                replay(probe.make_env(), e.seed, e.actions, e.observations)
        except ReplayMismatch as exc:
            return Check("snapshot/restore or replay", "fail", f"seed {e.seed}: no snapshot(); verified {exc}")
        except Exception as exc:
            return Check("snapshot/restore or replay", "fail", f"seed {e.seed}: replay raised {_last_line(exc)}")
        return Check("snapshot/restore or replay", "pass", "no snapshot()/restore(); verified replay reproduces every "
                     "observation")
    for e in episodes:
        t = len(e.actions) // 2
        try:
            source = probe.make_env()
            probe.reset(source, e.seed)
            for i, action in enumerate(e.actions[:t]):
                probe.step(source, e.seed, i, action)
            snap = copy.deepcopy(source.snapshot())
            target = probe.make_env()
            probe.reset(target, e.seed)
            obs, info = target.restore(snap)
        except _Failed as exc:
            return Check("snapshot/restore or replay", "fail", str(exc))
        except Exception as exc:
            return Check("snapshot/restore or replay", "fail", f"seed {e.seed}: snapshot/restore at step {t} raised "
                         f"{_last_line(exc)}")
        if obs != e.observations[t] or info.get("state_key") != e.infos[t].get("state_key"):
            return Check("snapshot/restore or replay", "fail", f"seed {e.seed}: restore() at step {t} gives another "
                         f"state than the episode had there (observation or state_key differs)")
        try:
            for i, action in enumerate(e.actions[t:], start=t):
                got = probe.step(target, e.seed, i, action)
                if got[0] != e.observations[i + 1] or got[4].get("state_key") != e.infos[i + 1].get("state_key"):
                    return Check("snapshot/restore or replay", "fail", f"seed {e.seed}: after restore() at step {t}, "
                                 f"step {i} differs from the episode")
        except _Failed as exc:
            return Check("snapshot/restore or replay", "fail", f"after restore(): {exc}")
    return Check("snapshot/restore or replay", "pass", "a mid-episode snapshot restored in a fresh env continues exactly")


def _state_keys(probe: _Probe, episodes: list[_Episode]) -> Check:
    for e in episodes:
        try:
            again = probe.play(e.seed, e.actions)
        except _Failed as exc:
            return Check("state_key", "fail", f"replay: {exc}")
        first = [i.get("state_key") for i in e.infos]
        second = [i.get("state_key") for i in again.infos]
        if first != second:
            t = next(i for i, (a, b) in enumerate(zip(first, second)) if a != b) if len(first) == len(second) else \
                min(len(first), len(second))
            return Check("state_key", "fail", f"seed {e.seed}: replaying the same actions gives another state_key at "
                         f"step {t}: RewardFlow and GiGPO could not group equal states")
    keys = {i.get("state_key") for e in episodes for i in e.infos}
    if keys <= {""}:
        return Check("state_key", "warn", "state_key is always empty: RewardFlow and GiGPO would see one state; "
                     "set it, or use rl.credit.state_fn=observation (GRPO and RLOO ignore it)")
    return Check("state_key", "pass", f"stable across replay; {len(keys)} distinct key(s) seen")


def _invalid(probe: _Probe, seed: int) -> Check:
    """``INVALID_ACTION_PREFIX + text`` is an invalid action that leaves the state as it was; actions that are not
    text are answered (as invalid actions), never with an exception."""
    try:
        env = probe.make_env()
        _, info = probe.reset(env, seed)
        *_, after = probe.step(env, seed, 0, INVALID_ACTION_PREFIX + "xyzzy")
        if _is_bool(after["action_valid"]) and after["action_valid"]:
            return Check("invalid actions", "fail", f"an action starting with {INVALID_ACTION_PREFIX!r} (what the engine "
                         "sends for an unparseable response) must be action_valid=False")
        if after["state_key"] != info["state_key"]:
            return Check("invalid actions", "fail", f"an action starting with {INVALID_ACTION_PREFIX!r} changed the "
                         "state_key; invalid actions must leave the state as it was")
        for action in NON_TEXT_ACTIONS:
            env = probe.make_env()
            probe.reset(env, seed)
            *_, after = probe.step(env, seed, 0, action)
            if after["action_valid"]:
                return Check("invalid actions", "fail", f"the non-text action {_short(action)} must be "
                             "action_valid=False")
    except _Failed as exc:
        return Check("invalid actions", "fail", str(exc))
    return Check("invalid actions", "pass", f"'{INVALID_ACTION_PREFIX}...', None, 42, a list, bytes: invalid, state kept, "
                 "no exception")


def _expert(probe: _Probe, env: Any, seeds: list[int], threshold: float | None) -> Check:
    if not callable(getattr(env, "expert_actions", None)):
        return Check("expert", "skip", "no expert_actions(): `creditflow sft` needs one; train from a given --model")
    won = 0
    unoffered = None  # the first action of a plan that its state does not offer
    for seed in seeds:
        fresh = probe.make_env()
        try:
            _, info = probe.reset(fresh, seed)
            plan = fresh.expert_actions()
        except _Failed as exc:
            return Check("expert", "fail", str(exc))
        except Exception as exc:
            return Check("expert", "fail", f"seed {seed}: expert_actions() raised {_last_line(exc)}")
        if not isinstance(plan, (list, tuple)) or not all(isinstance(a, str) for a in plan):
            return Check("expert", "fail", f"seed {seed}: expert_actions() must return a list of strings, got "
                         f"{_short(plan)}")
        try:
            episode = probe.play(seed, list(plan))
        except _Failed as exc:
            return Check("expert", "fail", str(exc))
        last = episode.infos[-1]
        won += bool(last["won"]) or (threshold is not None and float(last["score"]) >= threshold)
        offered = [(t, a) for t, (a, info) in enumerate(zip(episode.actions, episode.infos))
                   if info["admissible_actions"] and a not in info["admissible_actions"]]
        if offered and unoffered is None:
            unoffered = f"seed {seed}, step {offered[0][0] + 1}: the plan plays {_short(offered[0][1])}, which the " \
                        "state does not offer (admissible_actions); the credit audit's ε-expert needs offered actions"
    status: Status = "pass" if won == len(seeds) else "warn" if won else "fail"
    goal = "won" if threshold is None else f"won or score >= {threshold:g}"
    detail = (f"the expert's plan reaches {goal} on {won} of {len(seeds)} seed(s)"
              + ("" if won else ": SFT would have no demonstration"))
    if unoffered is not None:
        return Check("expert", "warn" if status == "pass" else status, f"{detail}; {unoffered}")
    return Check("expert", status, detail)


def _truncate(probe: _Probe, env: Any, seed: int) -> Check:
    """``truncate()``, where the env has it, ends the episode after a step: ``(reward, info)`` of the protocol's
    types, the state (``state_key``) unchanged."""
    if not callable(getattr(env, "truncate", None)):
        return Check("truncate", "skip", "no truncate(): an episode that rollout.max_steps cuts is recorded as "
                     "truncated, with the env's info of its last step; the env is not told")
    try:
        fresh = probe.make_env()
        probe.reset(fresh, seed)
        *_, terminated, truncated, info = probe.step(fresh, seed, 0, INVALID_ACTION_PREFIX + "xyzzy")
        if terminated or truncated:
            return Check("truncate", "skip", "the episode ended at its first step; nothing to cut")
        result = fresh.truncate()
    except _Failed as exc:
        return Check("truncate", "fail", str(exc))
    except Exception as exc:
        return Check("truncate", "fail", f"seed {seed}: truncate() after step 1 raised {_last_line(exc)}")
    problem = truncate_problem(result)
    if problem:
        return Check("truncate", "fail", f"seed {seed}, after step 1: {problem}")
    reward, after = result
    if after["state_key"] != info["state_key"]:
        return Check("truncate", "fail", f"seed {seed}: truncate() changed the state_key; it ends the episode where "
                     "it stands")
    return Check("truncate", "pass", f"after step 1 it ends the episode: reward {float(reward):g}, score "
                 f"{float(after['score']):g}, won {bool(after['won'])}")


def _episode_length(env: Any, episodes: list[_Episode]) -> Check:
    """A warning when episodes can run longer than :data:`LONG_EPISODE` turns (what a step of training costs)."""
    n = _max_steps(env)
    if n is None:
        return Check("episode length", "skip", "no max_steps")
    played = max(len(e.actions) for e in episodes)
    rollout = RolloutConfig()
    if n <= LONG_EPISODE:
        return Check("episode length", "pass", f"at most {n} turns an episode (warns above {LONG_EPISODE})")
    return Check("episode length", "warn", f"episodes can run {n} turns (the episodes played here: at most "
                 f"{played}): an episode that does not end sooner, as an untrained policy's, costs {n} generations, "
                 f"and a training step at the default {rollout.tasks_per_step} x {rollout.group_size} rollouts up to "
                 f"{rollout.tasks_per_step * rollout.group_size * n:,}; shorten them with rollout.max_steps=N (the "
                 f"env is told where it cuts when it has truncate()) or the env's own max_steps option")
