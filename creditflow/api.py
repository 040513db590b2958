"""The Python API: ``creditflow.train``, ``creditflow.sft``, ``creditflow.evaluate``, ``creditflow.rro`` and
``creditflow.audit``.

Each takes a config and an env and returns what the run made::

    import creditflow
    result = creditflow.train(["rl.algo=rewardflow", "rl.steps=20"], env=MyEnv)
    result.run_dir, result.model, result.metrics["eval/success_rate"]

``config`` is a :class:`~creditflow.config.RunConfig`, a dict of its sections, a list of ``"key=value"``
overrides, or the path of a YAML file; ``overrides`` (``"key=value"`` strings) apply on top of it. ``env`` is
an env name (built-in, plug-in, ``<adapter>:<spec>`` or ``module:Class``), an env class, a factory (a callable
whose keyword arguments are the env's options), or an env object. The ``creditflow`` commands call these same
functions. User errors are :class:`~creditflow.errors.UserError` (one line, as the CLI prints them), an
interrupted run an :class:`~creditflow.errors.Interrupted` saying what was saved. Every function checks the
types of its arguments first: one of the wrong type is a ``TypeError`` (:class:`~creditflow.errors.UserTypeError`)
naming the argument and what it takes; a bad value is a ``ValueError`` (every ``UserError`` is one) naming it.

How one env becomes the many a run needs (B x G rollout slots, held-out envs, CRPS and RRO restores, Ray
workers): every env is made by a zero-argument factory (:class:`creditflow.envs.EnvFactory`) called once per
slot. A name is resolved again in each process. A class or a factory is called with ``env.kwargs`` (held-out
envs: plus ``env.eval_kwargs`` and ``split="test"`` when it has a ``split`` option), and travels to Ray workers
pickled (by value when it lives in ``__main__``, e.g. a notebook). An env object is deep-copied for every env
(:class:`creditflow.envs.EnvCopies`), so it must be copyable, and its options are fixed: ``env.kwargs`` and
``env.eval_kwargs`` must stay empty. No two slots ever share an env.
"""

from __future__ import annotations

import copy
import inspect
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Union

from creditflow import credit, envs
from creditflow.arguments import check_callable, check_int, check_lines, check_mapping, check_number, check_path, shown
from creditflow.auditing import AuditResult, AuditSettings
from creditflow.auditing import audit as run_audit
from creditflow.config import RunConfig, build_config, given_settings, setting
from creditflow.configdoc import commented_yaml
from creditflow.credit.draw import GroupGraph, group_graph, write_graph
from creditflow.credit.registry import Knobs, parse_key_values
from creditflow.envs.check import Check, check_env
from creditflow.envs.configured import env_factory
from creditflow.errors import Interrupted, UserError, UserTypeError
from creditflow.rollout.trajectory import SuccessRule, Trajectory, read_jsonl, read_jsonl_lines

# Each function imports its recipe (and through it torch) when it is called, not here: the CLI imports this
# module for every command, and `creditflow --help` or a config check loads no torch (tests/test_leftovers.py).

ConfigLike = Union[RunConfig, dict, list, tuple, str, os.PathLike, None]
"""A :class:`RunConfig`, a dict of its sections, ``["key=value", ...]``, a YAML path, or None (the defaults)."""

EnvLike = Union[str, type, Callable[..., Any], object, None]
"""An env name, an env class, a factory, or an env object (None: ``env.name`` of the config)."""

__all__ = ["RunResult", "EvalResult", "train", "sft", "evaluate", "rro", "audit", "demo", "export", "export_gguf",
           "collect_preferences", "dpo", "load_config", "with_env", "resolve", "config_yaml", "credit_knobs",
           "score_file", "draw_graph", "env_checks"]


@dataclass(frozen=True)
class RunResult:
    """What a training run made: its directory, the policy it ends with, and its final metrics."""

    run_dir: Path
    """The run directory (``out_dir``): ``config.yaml``, ``metrics.jsonl``, checkpoints, models."""
    model: Path | None
    """The policy the run ends with: the newest checkpoint (``train``), ``sft_model`` (``sft``), ``dpo_model``
    (``rro``); None when there is none (``train`` with ``rl.steps=0``)."""
    metrics: dict[str, Any] = field(default_factory=dict)
    """The final metrics: the last step's row of ``metrics.jsonl`` (``train``: ``eval/success_rate``, ...),
    SFT's (``sft/train_loss``, ...), or RRO's summary (``sft/eval/success_rate``, ``dpo/eval/success_rate``,
    ``pairs``, ...)."""


@dataclass(frozen=True)
class EvalResult:
    """A held-out evaluation: its metrics (``eval/success_rate``, ``eval/score``, ...) and trajectories."""

    model: Path
    metrics: dict[str, float]
    trajectories: list[Trajectory] = field(default_factory=list)


def _check_config(config: Any) -> None:
    if not isinstance(config, (RunConfig, dict, list, tuple, str, os.PathLike)) and config is not None:
        raise UserTypeError(f"config must be a RunConfig, a dict, a list of 'key=value' strings, a YAML path (str or "
                            f"os.PathLike) or None, got {shown(config)}")
    if isinstance(config, (list, tuple)):
        check_lines(config, "config")


def _check_overrides(overrides: Any) -> list[str]:
    """``overrides`` as a list; anything but a list or tuple of ``key=value`` strings is a :class:`UserTypeError`."""
    return check_lines(overrides, "overrides")


def _named(overrides: list[str], **options: Any) -> list[str]:
    """The options a CLI command names (``model=``, ``out=``, ``algo=``, ``curriculum=``) as settings in front of
    ``overrides``: taken literally, as the CLI takes its options' values, and validated with the config."""
    what = {"model": ("policy.model", "a local model directory", True), "out": ("out_dir", "the run directory", True),
            "algo": ("rl.algo", "a credit estimator name", False),
            "curriculum": ("curriculum.name", "a curriculum name (none, crps, expreplay)", False)}
    named = []
    for name, value in options.items():
        key, text, path = what[name]
        if value is None:
            continue
        if path:
            check_path(value, name, text)
        elif not isinstance(value, str):
            raise UserTypeError(f"{name} must be {text} (str) or None, got {shown(value)}")
        named.append(setting(key, os.fspath(value)))
    return [*named, *overrides]


def load_config(config: ConfigLike = None, overrides: list[str] | tuple[str, ...] = ()) -> RunConfig:
    """``config`` (see :data:`ConfigLike`) with ``overrides`` applied, validated."""
    _check_config(config)
    overrides = _check_overrides(overrides)
    if isinstance(config, RunConfig):  # only its given settings: the rest stays default, not "given"
        return build_config(None, overrides, base=given_settings(config))
    if isinstance(config, dict):
        return build_config(None, overrides, base=copy.deepcopy(config))
    if isinstance(config, (list, tuple)):
        return build_config(None, [*config, *overrides])
    if isinstance(config, (str, os.PathLike)):
        return build_config(config, overrides)
    if config is None:
        return build_config(None, overrides)
    raise UserTypeError(f"config must be a RunConfig, a dict, a list of key=value strings or a YAML path, got "
                        f"{type(config).__name__}")


def _is_env_object(env: object) -> bool:
    return not inspect.isclass(env) and callable(getattr(env, "reset", None)) and callable(getattr(env, "step", None))


def env_name(env: EnvLike) -> str | None:
    """The name a run records for ``env`` (None for None), registering a class, factory or object in this
    process: ``module:Class`` for a class or factory (the name the CLI resolves when it is importable there),
    ``<module.Class object>`` for an object."""
    if env is None or isinstance(env, str):
        return env
    if _is_env_object(env):
        kind = type(env)
        name = f"<{kind.__module__}.{kind.__qualname__} object>"
        try:
            template = copy.deepcopy(env)
        except Exception as exc:
            raise UserError(f"env object {kind.__qualname__} cannot be copied ({type(exc).__name__}: {exc}); a run "
                            "needs one env per rollout, so pass its class or a factory instead") from None
        envs.register(name, envs.EnvCopies(template))
        return name
    if callable(env):
        module = getattr(env, "__module__", None) or type(env).__module__
        name = f"{module}:{getattr(env, '__qualname__', None) or type(env).__qualname__}"
        envs.register(name, env)
        return name
    raise UserTypeError(f"env must be a name, an env class, a factory or an env object (with reset and step), got "
                        f"{shown(env)}")


def _check_env(env: Any) -> None:
    if not (env is None or isinstance(env, str) or callable(env) or _is_env_object(env)):
        raise UserTypeError(f"env must be a name, an env class, a factory or an env object (with reset and step), "
                            f"got {shown(env)}")


def with_env(cfg: RunConfig, env: EnvLike) -> RunConfig:
    """``cfg`` with ``env.name`` naming ``env`` (:func:`env_name`); an env object takes no options."""
    name = env_name(env)
    if name is None:
        return cfg
    cfg = cfg.model_copy(deep=True)
    cfg.env.name = name
    if isinstance(envs.env_class(name), envs.EnvCopies) and (cfg.env.kwargs or cfg.env.eval_kwargs):
        raise UserError("env.kwargs / env.eval_kwargs: an env object has its options already; pass its class or a "
                        "factory to set options")
    return cfg


def resolve(config: ConfigLike = None, overrides: list[str] | tuple[str, ...] = (), env: EnvLike = None,
            resume: str | os.PathLike | None = None) -> RunConfig:
    """The run config of the user's inputs (checked for type already), each later one winning over the earlier:

    1. the defaults of :mod:`creditflow.config`;
    2. ``config`` (a :class:`RunConfig`'s given settings, a dict, ``key=value`` lines or a YAML file) or, with
       ``resume``, the run's own ``config.yaml`` (its paths read from where the run was started);
    3. ``overrides`` in order, a command's named options first; a resume records in ``resumes`` what they change
       (:func:`creditflow.recipes.resolve.config_for_resume`);
    4. ``env``: names the run's env (an env object takes no options; a resume only the env it was made with);
    5. the inference settings saved beside the model a recipe loads fill what 1-4 left at its default
       (:func:`creditflow.recipes.resolve.with_model_settings`, applied by the recipe that knows the model directory).

    The recipe then hands each part below it its own sections of the result (``creditflow.recipes.sections``)."""
    if resume is None:
        return with_env(load_config(config, overrides), env)
    if config is not None and not isinstance(config, (list, tuple)):
        raise UserError("resume: a resumed run keeps its own config.yaml; give changes as key=value overrides")
    from creditflow.recipes.resolve import config_for_resume  # recipes import torch: only when a run starts

    cfg = config_for_resume(resume, [*(config or []), *overrides])
    name = env_name(env)
    if name is not None and name != cfg.env.name:
        raise UserError(f"resume: the run in {str(resume)!r} was made with env {cfg.env.name!r}, not {name!r}")
    return cfg


def train(config: ConfigLike = None, *, env: EnvLike = None, model: str | os.PathLike | None = None,
          out: str | os.PathLike | None = None, algo: str | None = None, curriculum: str | None = None,
          overrides: list[str] | tuple[str, ...] = (), resume: str | os.PathLike | None = None) -> RunResult:
    """Multi-turn group RL with ``rl.algo``'s credit estimator (``creditflow train``); starts from
    ``policy.model`` or, without one, from a tiny policy SFT-ed on the env's expert.

    ``model``, ``out``, ``algo`` and ``curriculum`` are ``creditflow train``'s options (``policy.model``,
    ``out_dir``, ``rl.algo``, ``curriculum.name``), taken and checked as the command takes them.
    ``resume``: continue the run in that directory exactly; ``config`` may then only be ``key=value``
    overrides (recorded in its ``config.yaml``), and ``env`` only the env the run was made with."""
    _check_config(config)
    overrides = _named(_check_overrides(overrides), model=model, out=out, algo=algo, curriculum=curriculum)
    check_path(resume, "resume", "the run directory to continue")
    _check_env(env)
    cfg = resolve(config, overrides, env, resume)
    from creditflow.recipes.train import run_train
    from creditflow.trainer.checkpoint import checkpoint_root

    run_dir, _, last = run_train(cfg, resume=resume is not None)
    marker = checkpoint_root(run_dir) / "latest"
    model = checkpoint_root(run_dir) / marker.read_text().strip() if marker.is_file() else None
    return RunResult(Path(run_dir), model, dict(last))


def sft(config: ConfigLike = None, *, env: EnvLike = None, model: str | os.PathLike | None = None,
        out: str | os.PathLike | None = None, overrides: list[str] | tuple[str, ...] = ()) -> RunResult:
    """Supervised fine-tuning on the env's expert demonstrations (``creditflow sft``) -> ``out_dir/sft_model``;
    the env needs an expert (``expert_actions()``). ``model`` and ``out``: the command's ``--model`` (the policy to
    fine-tune; default the tiny one) and ``--out``."""
    _check_config(config)
    overrides = _named(_check_overrides(overrides), model=model, out=out)
    _check_env(env)
    cfg = resolve(config, overrides, env)
    from creditflow.recipes.sft import run_sft

    model, metrics = run_sft(cfg)
    return RunResult(Path(cfg.out_dir), model, dict(metrics))


def evaluate(config: ConfigLike = None, *, env: EnvLike = None, model: str | os.PathLike | None = None,
             episodes: int = 64, overrides: list[str] | tuple[str, ...] = (),
             split: str = "validation") -> EvalResult:
    """Held-out evaluation of a saved policy (``creditflow eval``): one episode on each of the first ``episodes``
    tasks of a held-out ``split`` (``validation``, what choices are made on, or ``test``, for reported numbers;
    docs/environments.md "Evaluation splits"), greedy by default. ``model``: a model directory, a checkpoint or a
    run directory (its newest checkpoint); default ``policy.model``."""
    _check_config(config)
    _check_env(env)
    check_path(model, "model", "a model directory, checkpoint or run directory")
    if isinstance(episodes, bool) or not isinstance(episodes, int):
        raise UserTypeError(f"episodes must be a positive integer (int), got {shown(episodes)}")
    if not isinstance(split, str):
        raise UserTypeError(f"split must be 'validation' or 'test' (str), got {shown(split)}")
    _check_overrides(overrides)
    if episodes < 1:
        raise UserError(f"evaluate: episodes must be a positive integer, got {episodes!r}")
    if split not in ("validation", "test"):
        raise UserError(f"evaluate: split must be 'validation' or 'test', got {split!r}")
    cfg = resolve(config, overrides, env)
    model = model if model is not None else cfg.policy.model
    if model is None:
        raise UserError("evaluate: give model=DIR (a model directory, checkpoint or run directory)")
    from creditflow.recipes.eval import evaluate_saved_policy

    try:
        metrics, trajectories = evaluate_saved_policy(cfg, model, episodes, split=split)
    except KeyboardInterrupt:
        raise Interrupted("during the evaluation; nothing saved") from None
    return EvalResult(Path(model), metrics, trajectories)


def rro(config: ConfigLike = None, *, env: EnvLike = None, model: str | os.PathLike | None = None,
        out: str | os.PathLike | None = None, overrides: list[str] | tuple[str, ...] = ()) -> RunResult:
    """The whole RRO pipeline (``creditflow rro run``): π_SFT (``policy.model``, or SFT-ed on the env's expert)
    -> process-supervised preference collection -> DPO -> held-out evaluation of π_SFT and π_DPO. ``model`` and
    ``out``: the command's ``--model`` (π_SFT) and ``--out``."""
    _check_config(config)
    overrides = _named(_check_overrides(overrides), model=model, out=out)
    _check_env(env)
    cfg = resolve(config, overrides, env)
    from creditflow.recipes.rro import run_rro

    summary = run_rro(cfg)
    return RunResult(Path(cfg.out_dir), Path(summary["dpo_model"]), _numbers(summary))


def audit(env: EnvLike = "sokoban", *, env_options: dict | None = None, policy=None,
          success_threshold: float | None = None, progress: Callable[[str], None] | None = None,
          model: str | Path | None = None, menu_size: int = 4, overrides: list[str] | None = None,
          policy_model: str | Path | None = None, **settings) -> AuditResult:
    """The credit audit (docs/audit.md) on ``env``: ``settings`` are :class:`~creditflow.auditing.AuditSettings`
    fields (``parts``, ``seeds``, ``policies``, ``epsilons``, ``m``, ``race_seeds``, ``race_lrs``, ``estimators``,
    ...); ``policy`` a behaviour policy object (``act(items, rng)``), or a list of them, instead of
    ``settings.policies`` (the built-in ones: ``expert`` at each ε, ``uniform``, ``detour``, ``tabular``).
    ``policy_model``: a model (or run) dir whose LM is the behaviour policy (``creditflow.recipes.audit.
    ModelPolicy``, with ``overrides`` on top of its saved settings), beside ``policy`` and beside the built-in
    policies only where ``policies=`` is given. ``model``: a model (or run) dir whose ``menu_size`` sampled
    actions, plus the expert's, are the choices at free-text states (``creditflow.recipes.audit``); ``overrides``
    are config ``key=value`` lines for that model's prompts and sampling. Returns an
    :class:`~creditflow.auditing.AuditResult`: ``.record`` (every per-seed value), ``.lines()`` (the summary)."""
    fields = set(AuditSettings.__dataclass_fields__)
    unknown = sorted(set(settings) - fields)
    if unknown:
        raise UserTypeError(f"audit() got an unexpected keyword argument {unknown[0]!r}; its settings: "
                            f"{', '.join(sorted(fields))}")
    # every argument's type first, then the values (AuditSettings.check: the settings' types, then theirs)
    if env is None:  # no config here to name one
        raise UserTypeError("env must be a name, an env class, a factory or an env object (with reset and step), got "
                            "None (NoneType)")
    _check_env(env)
    env_options = check_mapping(env_options, "env_options", "env options")
    for pol in (policy if isinstance(policy, (list, tuple)) else [policy]):
        if pol is not None and not callable(getattr(pol, "act", None)):
            raise UserTypeError("policy must be an object with an act(items, rng) method, a list of them, or None, "
                                f"got {shown(pol)}")
    check_path(policy_model, "policy_model", "a model or run directory")
    check_callable(progress, "progress", "a function taking one line of text")
    check_path(model, "model", "a model or run directory")
    check_number(success_threshold, "success_threshold", optional=True, type_only=True)
    menu_what = "(actions sampled from the model at a free-text state)"
    check_int(menu_size, "menu_size", what=menu_what, type_only=True)
    overrides = [] if overrides is None else _check_overrides(overrides)
    run_settings = AuditSettings(**settings)
    run_settings.check()
    threshold = check_number(success_threshold, "success_threshold", optional=True)
    check_int(menu_size, "menu_size", what=menu_what)
    name = env_name(env)
    if isinstance(envs.env_class(name), envs.EnvCopies) and env_options:
        raise UserError("env_options: an env object has its options already; pass its class or a factory")
    # the env through the run's own checks: its options, a user's env's first reset and turn limit, and every value
    # it returns during the audit (envs/checked.py), as train and sft make theirs
    cfg = build_config(None, [setting("env.name", name)], base={"env": {"kwargs": env_options}})
    factory = env_factory(cfg.env, cfg.rollout.max_steps, cuts=False)
    menu = None
    if model is not None:
        from creditflow.recipes.audit import policy_menu

        menu_cfg = build_config(None, [setting("env.name", name), *overrides], base={"env": {"kwargs": env_options}})
        menu = policy_menu(menu_cfg, model, factory, menu_size, log=progress or print)
    chosen = list(policy) if isinstance(policy, (list, tuple)) else [] if policy is None else [policy]
    if policy_model is not None:  # the LM as the behaviour policy: the built-in ones too only where asked for
        from creditflow.auditing.run import policies as built_in
        from creditflow.recipes.audit import ModelPolicy

        lm = ModelPolicy(policy_model, overrides).bind(cfg, factory)
        chosen = [*(built_in(run_settings).values() if "policies" in settings else []), *chosen, lm]
    return run_audit(factory, settings=run_settings, policy=chosen or None, success_rule=SuccessRule(threshold),
                     progress=progress, env_label=name, menu=menu)


def _numbers(data: dict, prefix: str = "") -> dict[str, Any]:
    """The numbers of a nested summary, keys joined by ``/`` (``{"sft": {"eval/score": 1}}`` -> ``sft/eval/score``)."""
    out: dict[str, Any] = {}
    for key, value in data.items():
        if isinstance(value, dict):
            out.update(_numbers(value, f"{prefix}{key}/"))
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            out[f"{prefix}{key}"] = value
    return out


# --------------------------------------------------------------------------------------------------
# the other commands' functions: ``creditflow demo``, ``export``, ``rro collect`` and ``rro train`` call these
# --------------------------------------------------------------------------------------------------


def demo(config: str | os.PathLike | None = None, *, env: EnvLike = None, out: str | os.PathLike | None = None,
         quick: bool = False, overrides: list[str] | tuple[str, ...] = ()) -> Path:
    """The demo (``creditflow demo``): the tiny policy, SFT on the env's expert, RL with the demo's settings,
    held-out evaluation and a report; returns the report's directory (``summary.md``). ``config``: a YAML file
    overriding the demo's defaults; ``out`` the run directory (default ``runs/demo``); ``quick`` a tiny-budget
    smoke run; ``overrides`` ``key=value`` lines on top."""
    check_path(config, "config", "a YAML file overriding the demo defaults")
    check_path(out, "out", "the run directory")
    _check_env(env)
    overrides = _check_overrides(overrides)
    from creditflow.recipes.demo import run_demo

    return run_demo(overrides, env=env_name(env), out_dir=None if out is None else os.fspath(out), quick=bool(quick),
                    config_file=None if config is None else os.fspath(config))


def export(source: str | os.PathLike, out: str | os.PathLike, *, dtype: str = "auto") -> Path:
    """A policy as a plain HF model directory in the new directory ``out`` (``creditflow export``): a LoRA
    checkpoint's adapter merged into its base model, a full checkpoint without its optimizer state; ``source``
    may be a run directory (its newest checkpoint). ``dtype``: float32, bfloat16 or float16 (auto: float32)."""
    check_path(source, "source", "a checkpoint, run, adapter or model directory")
    check_path(out, "out", "the new model directory")
    from creditflow.recipes.export import export_policy

    return export_policy(source, out, dtype)


def export_gguf(path: str | os.PathLike, out: str | os.PathLike, *, dtype: str = "auto") -> Path:
    """The model of a GGUF file (llama.cpp's format) as a plain HF model directory ``out`` (``creditflow export
    --from-gguf``): its weights dequantised to ``dtype``, its tokenizer and chat template (needs ``gguf``)."""
    check_path(path, "path", "a GGUF file")
    check_path(out, "out", "the new model directory")
    from creditflow.recipes.export import model_from_gguf

    return model_from_gguf(path, out, dtype)


def collect_preferences(config: ConfigLike = None, *, env: EnvLike = None, model: str | os.PathLike | None = None,
                        out: str | os.PathLike | None = None,
                        overrides: list[str] | tuple[str, ...] = ()) -> dict[str, Any]:
    """RRO's process-supervised preference collection (``creditflow rro collect``) with ``rro``'s settings, into
    ``rro.data_dir`` (default ``out_dir/preferences``); resumes an interrupted collection there. ``model``: π_SFT
    (default ``out_dir/sft_model``, SFT-ed first when absent). Returns the collection's summary (``pairs``,
    ``steps``, ``rollouts``, ``samples_per_step``, ``generated_tokens``, ``wall_seconds``, ...)."""
    _check_config(config)
    overrides = _named(_check_overrides(overrides), model=model, out=out)
    _check_env(env)
    cfg = resolve(config, overrides, env)
    from creditflow.recipes.rro import run_collect

    return run_collect(cfg)


def dpo(config: ConfigLike = None, *, env: EnvLike = None, model: str | os.PathLike | None = None,
        out: str | os.PathLike | None = None, overrides: list[str] | tuple[str, ...] = ()) -> RunResult:
    """DPO (TRL) from π_SFT on the collected pairs in ``rro.data_dir`` (``creditflow rro train``), with π_SFT as
    the reference -> ``out_dir/dpo_model``. ``model``: π_SFT (default ``out_dir/sft_model``). The result's
    metrics: ``dpo/pairs``, ``dpo/steps``, ``dpo/train_loss``, ..."""
    _check_config(config)
    overrides = _named(_check_overrides(overrides), model=model, out=out)
    _check_env(env)
    cfg = resolve(config, overrides, env)
    from creditflow.recipes.rro import run_dpo

    target, metrics = run_dpo(cfg)
    return RunResult(Path(cfg.out_dir), Path(target), dict(metrics))


# --------------------------------------------------------------------------------------------------
# the commands on files and envs: ``creditflow config``, ``credit``, ``graph`` and ``envs check`` call these
# --------------------------------------------------------------------------------------------------


def config_yaml(config: ConfigLike = None, overrides: list[str] | tuple[str, ...] = ()) -> str:
    """The full run config as commented YAML (``creditflow config``): each field's docstring and constraints, the
    values of ``config`` with ``overrides`` (:func:`load_config`); ``creditflow train --config`` reads it back."""
    return commented_yaml(load_config(config, overrides))


def credit_knobs(estimator: str, knobs: list[str] | tuple[str, ...] = ()) -> Knobs:
    """The knobs of ``estimator`` from ``key=value`` lines (``creditflow credit``'s arguments), checked: an
    unknown estimator or knob, or a bad value, is one line."""
    return credit.validate_knobs(estimator, parse_key_values(knobs), strings=True)


def score_file(path: str | os.PathLike, out: str | os.PathLike, estimator: str,
               knobs: Knobs | dict | None = None) -> tuple[credit.Credit, credit.StepBatch]:
    """Score the trajectories of the JSONL file ``path`` with ``estimator`` into ``out`` (``creditflow credit``):
    every step gets ``process_reward``, ``step_reward`` and ``advantage``, every other byte stays as read. Returns
    the credit (its ``metrics``) and the batch scored (``n_traj``, ``n_steps``)."""
    values = knobs if isinstance(knobs, Knobs) else credit.validate_knobs(estimator, knobs or {})
    lines = read_jsonl_lines(path)
    if not lines:
        raise UserError(f"--in {str(path)!r}: no trajectories")
    return credit.score_lines(lines, estimator, values, out)


def draw_graph(path: str | os.PathLike, out: str | os.PathLike, group: str | None = None, knobs=None,
               estimator: str | None = None) -> GroupGraph:
    """Draw one group's state graph (``creditflow graph``) from the trajectories of the JSONL file ``path`` into
    ``out`` (png, svg, pdf, dot or html, by its suffix): ``group`` the group id (default: the first), ``knobs``
    the graph knobs of ``estimator`` (an estimator registered with a drawing; default: the first registered,
    RewardFlow), its paper's values where not given."""
    graph = group_graph(read_jsonl(path), group, knobs, estimator=estimator)
    write_graph(graph, out)
    return graph


def env_checks(env: EnvLike, options: dict | None = None, seeds: int = 3,
               success_threshold: float | None = None) -> list[Check]:
    """``env`` against the protocol (``creditflow envs check``) on seeds ``0 .. seeds-1``, with ``options`` its
    keyword arguments: one :class:`~creditflow.envs.check.Check` (name, status, detail) per check."""
    return check_env(envs.factory(env_name(env), **(options or {})), list(range(seeds)),
                     success_threshold=success_threshold)
