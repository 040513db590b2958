"""Every value a user's env returns during a run, checked where the run receives it, on every step.

``creditflow envs check`` and a run's first-reset check see what an env does on its first episodes; a user's
env can still break a rule on step 2 or in episode 5 (a ``step`` that raises, gym's old 4-tuple, a NaN reward,
an info that loses ``won``, a ``state_key`` that turns into a list, a ``bytes`` observation). A run therefore
makes its envs of a non-built-in env through :class:`CheckedFactory`, whose :class:`CheckedEnv` checks every
``reset``/``restore``/``step``/``truncate`` result against the rules ``envs check`` applies (:func:`reset_problem`,
:func:`step_problem`: types, the tuple's shape, every info key of its type, a finite reward, a text and so
hashable ``state_key``) and turns an exception raised by the env into the same kind of error. Each is one
:class:`EnvRuleError` naming the env, the episode's task (``name/seed``, as trajectories record it), the step
(counted from 1 after ``reset``) and the rule, e.g.::

    env 'mypkg.envs:MyEnv': task mypkg.envs:MyEnv/3, step 2 (action 'up'): step() returned a reward nan, not
    a finite number (creditflow envs check mypkg.envs:MyEnv runs every check)

The cost is a few ``isinstance`` checks per step. Built-in envs are not wrapped (their tests keep them to
the protocol, and an exception in one is creditflow's bug, shown as such).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from creditflow.envs.base import EnvError
from creditflow.envs.check import _short, last_line, reset_problem, step_problem, truncate_problem


class EnvRuleError(EnvError):
    """A user's env broke a protocol rule during a run (one line: env, task, step, rule)."""


@dataclass(frozen=True)
class CheckedFactory:
    """A zero-argument, picklable factory of :class:`CheckedEnv` around ``factory()``'s envs. ``name`` is the env's
    name (tasks are ``name/seed``), ``label`` how messages name the env (``env 'x' (plug-in of package P)``)."""

    factory: Callable[[], Any]
    name: str
    label: str

    def __call__(self) -> "CheckedEnv":
        return CheckedEnv(self.factory(), self.name, self.label)


_CHECKED_CALLS = ("restore", "snapshot", "expert_actions", "truncate")


class CheckedEnv:
    """``env`` with every ``reset``/``restore``/``step`` result checked (see the module docstring). Everything
    else (``max_steps``, ``snapshot``, ``expert_actions``, an env's own attributes) is the env's: ``snapshot``,
    ``restore``, ``expert_actions`` and ``truncate`` exist exactly when the env has them."""

    def __init__(self, env: Any, name: str, label: str):
        self.__dict__.update(_env=env, _name=name, _label=label, _seed=None, _t=0)

    @property
    def unwrapped(self) -> Any:
        return self._env

    @property
    def name(self) -> str:
        """The env's ``name``, else its class's name (what prompts call it)."""
        name = getattr(self._env, "name", None)
        return name if isinstance(name, str) and name else type(self._env).__name__

    def __getattr__(self, attr: str) -> Any:
        if attr.startswith("__") or attr in ("_env", "_name", "_label", "_seed", "_t"):
            raise AttributeError(attr)
        value = getattr(self._env, attr)
        if attr in _CHECKED_CALLS and callable(value):
            return _Call(self, attr, value)
        return value

    def __setattr__(self, attr: str, value: Any) -> None:
        setattr(self._env, attr, value)

    def at_step(self, t: int) -> None:
        """The env was brought to step ``t`` of its episode without ``step`` calls (``restore``)."""
        self.__dict__["_t"] = t

    def fail(self, where: str, rule: str) -> EnvRuleError:
        seed = "" if self._seed is None else f"/{self._seed}"
        return EnvRuleError(f"{self._label}: task {self._name}{seed}, {where}: {rule} (creditflow envs check "
                            f"{self._name} runs every check)")

    def fail_here(self, rule: str) -> EnvRuleError:
        """:meth:`fail` where the episode stands: after its reset, or after step ``t``."""
        return self.fail(self._here(), rule)

    def _here(self) -> str:
        return f"step {self._t}" if self._t else "reset"

    def reset(self, **kwargs):
        seed = kwargs.get("seed")
        self.__dict__.update(_seed=seed, _t=0)
        try:
            result = self._env.reset(**kwargs)  # the arguments as given (an env may take no options)
        except EnvRuleError:
            raise
        except Exception as exc:
            raise self.fail("reset", f"reset(seed={seed}) raised {last_line(exc)}") from None
        problem = reset_problem(result)
        if problem is not None:
            raise self.fail("reset", problem)
        return result

    def step(self, action: str):
        t = self._t + 1
        self.__dict__["_t"] = t
        where = f"step {t} (action {_short(action)})"
        try:
            result = self._env.step(action)
        except EnvRuleError:
            raise
        except Exception as exc:
            raise self.fail(where, f"step() raised {last_line(exc)}") from None
        problem = step_problem(result)
        if problem is not None:
            raise self.fail(where, problem)
        return result


@dataclass(frozen=True)
class _Call:
    env: CheckedEnv
    attr: str
    call: Callable[..., Any]

    def __call__(self, *args, **kwargs):
        where = self.env._here()
        try:
            result = self.call(*args, **kwargs)
        except EnvRuleError:
            raise
        except Exception as exc:
            raise self.env.fail(where, f"{self.attr}() raised {last_line(exc)}") from None
        if self.attr == "restore":
            problem = reset_problem(result)
            if problem is not None:
                raise self.env.fail(f"{where}, restore", problem.replace("reset()", "restore()"))
        elif self.attr == "truncate":
            problem = truncate_problem(result)
            if problem is not None:
                raise self.env.fail(f"{where}, truncate", problem)
        elif self.attr == "expert_actions":
            if result is not None and (not isinstance(result, (list, tuple)) or
                                       not all(isinstance(a, str) for a in result)):
                raise self.env.fail(where, f"expert_actions() must return a list of strings, got {_short(result)}")
        return result
