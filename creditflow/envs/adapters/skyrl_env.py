"""SkyRL-Gym envs (``skyrl_gym.envs.base_text_env.BaseTextEnv``) as creditflow envs: ``--env skyrl:<env id>``
(``skyrl:gsm8k_multi_turn``) or ``skyrl:<module>:<Class>``, with the tasks of a SkyRL dataset file
(docs/env_adapters.md).

An episode is what SkyRL's generator runs for one dataset row: the env is made with ``skyrl_gym.make(id,
env_config=..., extras=row)`` (the row without ``prompt`` and ``env_class``, plus ``max_turns``, as the generator
passes them), ``init(prompt)`` gives the first chat, and every action is one LLM turn given to ``step``, whose
``observations`` (chat messages), ``reward`` and ``done`` make the next observation, the step's reward and the end.
``reset(seed=z)`` plays row ``z % len(rows)``.

Text: the task is the contents of the chat ``init`` returns (system and user messages: the question and its answer
format); the first observation is empty, as SkyRL has none before the first turn; later observations are the
contents of the messages ``step`` returns. ``score`` is the episode's return (SkyRL envs reward the turn that
answers); ``won`` is False, so the run's ``env.success_threshold`` decides success.
"""

from __future__ import annotations

from typing import Callable

from creditflow.envs.adapters.common import (AdapterEnv, Outcome, import_package, load_object, load_rows,
                                             messages_text)
from creditflow.envs.base import EnvError

DEFAULT_MAX_STEPS = 5  # SkyRL's multi-turn examples use max_turns=5


class SkyRLEnv(AdapterEnv):
    """SkyRL-Gym text envs (BaseTextEnv: init/step), one task per row of a SkyRL dataset file."""

    adapter = "skyrl"
    example = "gsm8k_multi_turn"

    def __init__(self, spec: str, data: str | None = None, env_config: dict | None = None,
                 state_key: str | Callable[..., object] | None = None, max_steps: int = DEFAULT_MAX_STEPS):
        super().__init__(spec, state_key=state_key)
        self._skyrl = import_package("skyrl_gym", self.name, "skyrl")
        self._set_max_steps(max_steps)
        if data is None:
            raise EnvError(f"env {self.name!r} needs its tasks: env.kwargs.data=<a SkyRL dataset file (.parquet, "
                           ".json or .jsonl) whose rows have a 'prompt' (chat messages) and what the env reads, e.g. "
                           "'reward_spec'>")
        self._rows = load_rows(data, f"env {self.name!r}: data")
        bad = next((i for i, row in enumerate(self._rows) if not isinstance(row.get("prompt"), (list, str))), None)
        if bad is not None:
            raise EnvError(f"env {self.name!r}: data {data!r} row {bad + 1} has no 'prompt' (a list of chat messages)")
        from omegaconf import OmegaConf  # a skyrl-gym dependency; SkyRL envs read their config as a DictConfig

        self._env_config = OmegaConf.create(dict(env_config or {}))
        module, sep, attr = spec.partition(":")
        if sep:
            self._creator = load_object(spec, f"env {self.name!r}")
        else:
            if spec not in self._skyrl.registry:
                raise EnvError(f"env {self.name!r}: skyrl_gym has no env {spec!r}; registered: "
                               f"{', '.join(sorted(self._skyrl.registry))} (or give 'module:Class')")
            self._creator = None
        self.description = f"the SkyRL-Gym environment {spec}"
        self._env = None
        self._make(self._split(self._rows[0])[1]).close()  # a row the env cannot take fails now, in one line

    def _split(self, row: dict) -> tuple[list[dict], dict]:
        """A dataset row as SkyRL's generator uses it: the prompt as chat messages, and the env's ``extras``
        (the other fields, without ``env_class``, plus ``max_turns``)."""
        extras = dict(row)
        prompt = extras.pop("prompt")
        extras.pop("env_class", None)
        extras["max_turns"] = self.max_steps
        chat = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else [dict(m) for m in prompt]
        return chat, extras

    def _make(self, extras: dict):
        try:
            if self._creator is None:
                env = self._skyrl.make(self.spec, env_config=self._env_config, extras=extras)
            else:
                env = self._creator(env_config=self._env_config, extras=extras)
        except (AssertionError, KeyError, TypeError, ValueError, FileNotFoundError) as exc:
            raise EnvError(f"env {self.name!r} cannot be made for this task: {type(exc).__name__}: {exc}") from None
        if not callable(getattr(env, "init", None)) or not callable(getattr(env, "step", None)):
            raise EnvError(f"env {self.name!r}: {type(env).__name__} is not a SkyRL-Gym env (init/step)")
        return env

    # -- AdapterEnv ---------------------------------------------------------------------------------
    def _native(self):
        return self._env

    def _begin(self, seed, options) -> str:
        self.close()
        chat, extras = self._split(self._rows[(seed or 0) % len(self._rows)])
        self._env = self._make(extras)
        chat, _ = self._env.init(chat)
        self._task = messages_text(chat)
        return ""

    def _act(self, action: str) -> Outcome:
        out = self._env.step(action)
        metadata = out.get("metadata") or {}
        return Outcome(messages_text(out.get("observations") or []), float(out.get("reward") or 0.0),
                       bool(out.get("done")), info={"skyrl_metadata": metadata} if metadata else {})

    def _end(self, terminated: bool) -> tuple[float, bool, float]:
        return self._return, False, 0.0

    def close(self) -> None:
        if self._env is not None:
            self._env.close()
            self._env = None
