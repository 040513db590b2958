"""What a policy needs at inference besides its weights and tokenizer, saved with the model.

A policy learns the prompt layout it was trained on: the template (``policy.template``), the multi-turn
layout (``rollout.history``) and the history window (``rollout.history_length``). The tokenizer's chat template
already travels in ``tokenizer_config.json`` and the action parser is the same for every policy; these three do
not, so every model directory creditflow writes (``sft_model``, each checkpoint, RRO's DPO model, ``export``)
holds them in ``creditflow_inference.json``, and every command that loads a model uses them unless the command
sets one explicitly (then one line says the two differ). A checkpoint written before the file existed reads
them from its run's ``config.yaml``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from creditflow.atomic import write_atomic
from creditflow.config import PolicyConfig, RolloutConfig
from creditflow.errors import UserError

FILE = "creditflow_inference.json"
KEYS: tuple[tuple[str, str], ...] = (("policy", "template"), ("rollout", "history"), ("rollout", "history_length"))
SECTIONS = {"policy": PolicyConfig, "rollout": RolloutConfig}
"""The config section of each key's first part, in the run config's order (which one's error is said first)."""


def settings_of(policy: PolicyConfig, rollout: RolloutConfig) -> dict[str, Any]:
    """The inference settings of a run's ``policy`` and ``rollout`` sections, as ``{"policy.template": ..., ...}``."""
    sections = {"policy": policy, "rollout": rollout}
    return {f"{section}.{name}": getattr(sections[section], name) for section, name in KEYS}


def save(model_dir: str | Path, settings: dict[str, Any]) -> None:
    """Write the inference ``settings`` (:func:`settings_of`) into ``model_dir`` (atomically)."""
    write_atomic(Path(model_dir) / FILE, json.dumps({"inference": settings}, indent=2) + "\n")


def load(model_dir: str | Path) -> tuple[dict[str, Any], Path] | None:
    """``(settings, where they were read)`` of a model directory: its ``creditflow_inference.json``, else, for a
    checkpoint ``RUN/checkpoints/step_N``, the run's ``config.yaml``; None when neither exists (a model from
    elsewhere: the command's own settings apply). Every value is checked as the config checks it: a file that is no
    such JSON, or a value the setting does not take (an unknown template, a negative history length), is a one-line
    UserError naming the file and the key. Keys of no inference setting are left out (a newer creditflow's)."""
    model_dir = Path(model_dir)
    path = model_dir / FILE
    if path.is_file():
        try:
            values = json.loads(path.read_text(encoding="utf-8"))["inference"]
            if not isinstance(values, dict):
                raise TypeError
        except (ValueError, KeyError, TypeError, UnicodeDecodeError):
            raise UserError(f"{path}: not a creditflow inference file (a JSON object with an 'inference' "
                            "mapping); delete it to use the command's own settings") from None
        known = {f"{s}.{n}" for s, n in KEYS}
        values = {k: v for k, v in values.items() if k in known}
        return _checked(values, path, "fix the value or delete the file to use the command's own settings"), path
    run_config = model_dir.parent.parent / "config.yaml"
    if model_dir.parent.name == "checkpoints" and run_config.is_file():
        try:
            data = yaml.safe_load(run_config.read_text(encoding="utf-8")) or {}
        except (yaml.YAMLError, UnicodeDecodeError):
            return None
        values = {f"{s}.{n}": data[s][n] for s, n in KEYS
                  if isinstance(data.get(s), dict) and n in data[s]}
        return (_checked(values, run_config, "fix the value there or give the setting"), run_config) if values else None
    return None


def _checked(values: dict[str, Any], path: Path, fix: str) -> dict[str, Any]:
    """``values`` (``{"policy.template": ...}``) validated as the run config validates those settings; the first
    bad one is one line: the file, the key, what it takes and the value read."""
    nested: dict[str, dict] = {}
    for key, value in values.items():
        section, name = key.split(".")
        nested.setdefault(section, {})[name] = value
    for section, model in SECTIONS.items():
        try:
            model.model_validate(nested.get(section, {}))
        except ValidationError as exc:
            err = exc.errors()[0]
            key = ".".join(str(part) for part in (section, *err["loc"]))
            msg = str(err["ctx"]["error"]) if err["type"] == "value_error" else err["msg"]
            raise UserError(f"{path}: {key}: {msg} (got {err.get('input')!r}); {fix}") from None
    return values
