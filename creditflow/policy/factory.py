"""The policy's parts a run config builds: the prompt builder on an env, the run's settings completed with those
saved beside a model (``policy/inference.py``), and the tiny default policy (its vocabulary size and its build
from a corpus, with the env's tokenizer hints). Which process builds it, and from which expert text, is the
SFT recipe's (``creditflow.recipes.sft``): this layer knows nothing of processes or rollouts."""

from __future__ import annotations

from pathlib import Path
from typing import Iterable

from creditflow.config import RunConfig
from creditflow.policy import inference
from creditflow.policy.tiny import build_tiny_policy
from creditflow.policy.prompts import PromptBuilder, environment_description

TINY_CORPUS_SEEDS = range(900_000, 900_400)
"""The expert episodes whose prompts and actions train the tiny default policy's tokenizer."""


def prompt_builder(cfg: RunConfig, env) -> PromptBuilder:
    """The run's prompts on ``env``: ``policy.template``, ``rollout.history`` and ``rollout.history_length``."""
    return PromptBuilder(environment=environment_description(env), history_length=cfg.rollout.history_length,
                         template=cfg.policy.template, history=cfg.rollout.history)


def with_model_settings(cfg: RunConfig, model_dir: str | Path | None, log=print) -> RunConfig:
    """``cfg`` with the inference settings saved with the model in ``model_dir`` (``policy/inference.py``: its
    template, history layout and window) in place of the defaults. A setting the command gave explicitly wins,
    with one line when it differs from the model's."""
    found = inference.load(model_dir) if model_dir else None
    if not found:
        return cfg
    saved, where = found
    updates: dict[str, dict] = {}
    for key, value in saved.items():
        section_name, name = key.split(".")
        section = getattr(cfg, section_name)
        current = getattr(section, name)
        if name in section.model_fields_set:
            if current != value:
                log(f"note: {key}={current} as given; the model in {model_dir} was trained with {key}={value} "
                    f"({where.name}), which it may need")
        elif current != value:
            updates.setdefault(section_name, {})[name] = value
    if not updates:
        return cfg
    data = cfg.model_dump()
    for section_name, values in updates.items():
        data[section_name].update(values)
    new = RunConfig.model_validate(data)
    for section_name in type(cfg).model_fields:  # what the command set stays "set" (dump_config, resume)
        explicit = getattr(cfg, section_name)
        if hasattr(explicit, "model_fields_set"):
            getattr(new, section_name).model_fields_set.intersection_update(explicit.model_fields_set)
    new.model_fields_set.intersection_update(cfg.model_fields_set)
    return new


def tiny_vocab_size(cfg: RunConfig, env) -> int:
    """``policy.tiny_vocab_size``, else the env's own suggestion (``tiny_vocab_size``), else 1024."""
    return int(cfg.policy.tiny_vocab_size or getattr(env, "tiny_vocab_size", 0) or 1024)


def build_tiny_default(cfg: RunConfig, tiny_dir: Path, env, texts: list[str], words: Iterable[str] = ()) -> None:
    """The tiny default policy in ``tiny_dir``: a tokenizer trained on ``texts`` with ``env``'s hints (characters
    kept apart, lowercase, whole words, plus ``words``) and a ``policy.tiny_*`` sized model, seeded by ``seed``."""
    build_tiny_policy(tiny_dir, texts, vocab_size=tiny_vocab_size(cfg, env), seed=cfg.seed,
                      isolate_chars=getattr(env, "tokenizer_isolate_chars", ""),
                      lowercase=bool(getattr(env, "tokenizer_lowercase", False)),
                      words=(*getattr(env, "tokenizer_words", ()), *words),
                      hidden_size=cfg.policy.tiny_hidden_size, num_hidden_layers=cfg.policy.tiny_layers)
