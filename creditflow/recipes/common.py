"""Wiring shared by the recipes (train, SFT, evaluation, demo, RRO): envs, policy, engine, success rule, the
checks every recipe runs before any work, and the launched processes of a data-parallel command."""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
from pathlib import Path
from typing import Iterator

from rich.console import Console

from creditflow import credit, envs
from creditflow.config import RunConfig, dump_config
from creditflow.envs.check import first_reset_problem
from creditflow.envs.checked import CheckedFactory
from creditflow.errors import UserError
from creditflow.policy import inference, lora
from creditflow.policy.backends import openai as openai_backend
from creditflow.policy.backends import vllm as vllm_backend
from creditflow.policy.backends.base import Backend, SamplingParams
from creditflow.policy.backends.hf import HFBackend
from creditflow.policy.model import (autocast_note, build_tiny_policy, check_device_and_dtype, check_model_dir,
                                     load_policy, model_config, resolve_device, tiny_config, tiny_model_built,
                                     weights_dir)
from creditflow.policy.prompts import ChatTemplate, PromptBuilder, environment_description
from creditflow.recipes.progress import RunProgress, WatchedEngine
from creditflow.rollout.engine import RolloutEngine
from creditflow.rollout.expert import expert_corpus
from creditflow.rollout.trajectory import SuccessRule
from creditflow.spill import disk_full_line
from creditflow.trainer import distributed
from creditflow.trainer.distributed import World


_NOTED: set[str] = set()  # notes check_run has printed in this process


def check_run(cfg: RunConfig, *, knobs: bool = False, model: str | Path | None = None, tools: bool = False) -> None:
    """What can be checked before any work (SFT, model building, rollouts), as one-line UserErrors: the
    credit knobs (``knobs``), device and dtype on this machine, the model directory (``model``, default
    ``policy.model``: config, tokenizer and weights, :func:`check_model_dir`) and LoRA's target modules in that
    model; ``sft.tools`` only where the command takes it (``tools``: ``creditflow sft``). Env options are checked
    by :func:`env_factory`."""
    if cfg.sft.tools and not tools:
        raise UserError("sft.tools=true makes a tool-calling model for TRL's environment_factory and is for "
                        "`creditflow sft --tools` only; this command runs creditflow's own prompts (docs/trl.md)")
    if knobs:
        try:
            credit.validate_knobs(cfg.rl.algo, cfg.rl.credit)
        except UserError as exc:
            where = "rl.credit" if cfg.rl.algo in credit.estimator_names() else "rl.algo"
            raise UserError(f"{where}: {exc}") from None
    check_device_and_dtype(cfg.policy.device, cfg.policy.weights_dtype, cfg.policy.autocast)
    note = autocast_note(cfg.policy.device, cfg.policy.autocast)
    if note and note not in _NOTED and os.environ.get("LOCAL_RANK", "0") == "0":  # once, on the main process
        _NOTED.add(note)
        print(note, file=sys.stderr)
    model = model if model is not None else cfg.policy.model
    if model:  # a served model's local copy (backend openai) lends its tokenizer only
        check_model_dir(model, weights=cfg.policy.backend != "openai")
    if cfg.policy.lora.enabled:  # target modules that exist in the model (the tiny default's when none is given)
        lora.check_targets(cfg.policy.lora, model_config(model) if model else
                           tiny_config(hidden_size=cfg.policy.tiny_hidden_size,
                                       num_hidden_layers=cfg.policy.tiny_layers))


def check_backend(cfg: RunConfig, trains: bool = False) -> None:
    """``policy.backend`` usable as set, checked before any work: ``openai`` serves a fixed policy (not for
    a run that ``trains``) and needs ``policy.base_url`` and ``policy.model_name``; ``vllm`` and ``openai``
    need their optional package."""
    p = cfg.policy
    if p.backend == "openai":
        if trains:
            raise UserError("policy.backend=openai serves fixed policies (eval, rro collect); RL training needs a "
                            "backend that follows the weights: hf or vllm")
        if not p.base_url or not p.model_name:
            raise UserError("policy.backend=openai needs policy.base_url and policy.model_name "
                            "(--base-url, --model-name)")
        openai_backend.check_installed()
    elif p.backend == "vllm":
        vllm_backend.check_installed()


def check_data_parallel(cfg: RunConfig) -> None:
    """What ``creditflow train`` under N launched processes needs, checked before any work: B tasks split
    evenly (a task's group stays on one process), the ``hf`` backend, and a replicated policy (DDP): an
    FSDP or DeepSpeed launch config shards the model, which RL generation here does not do."""
    n = distributed.launched_size()
    if n == 1:
        return
    sharded = distributed.sharded_launch()
    if sharded:
        raise UserError(f"creditflow train keeps a whole policy on each process (data parallel); the {sharded} "
                        "launch config shards it: use configs/accelerate/ddp.yaml (FSDP / ZeRO-3 serve sft and "
                        "rro train)")
    if cfg.rollout.tasks_per_step % n:
        raise UserError(f"rollout.tasks_per_step={cfg.rollout.tasks_per_step} must be divisible by the {n} launched "
                        f"processes (each rolls out the same number of tasks)")
    if cfg.policy.backend != "hf":
        raise UserError(f"policy.backend={cfg.policy.backend} under {n} processes is not supported; use "
                        "policy.backend=hf, or one process")


def start_world(cfg: RunConfig) -> World:
    """Join the launched processes (``accelerate launch``, ``torchrun``; one process without a launcher),
    over gloo when the policy runs on CPU."""
    return distributed.start(cpu=resolve_device(cfg.policy.device) == "cpu")


def rank_progress(progress: RunProgress, world: World) -> RunProgress:
    """``progress`` on rank 0; silent bars elsewhere (rank 0 speaks for every process)."""
    return progress if world.main else RunProgress(Console(stderr=True, quiet=True))


def env_factory(cfg: RunConfig, split: str = "train") -> envs.EnvFactory | CheckedFactory:
    """Zero-argument, picklable factory for train or held-out (``split="test"``) envs (:class:`envs.EnvFactory`);
    validates the options now, and for an env that is not built in (a plug-in, ``module:Class``, an object
    given to the Python API) the first reset too (:func:`check_user_env`). Such an env's factory is a
    :class:`~creditflow.envs.checked.CheckedFactory`: every value its envs return during the run is checked."""
    kwargs = dict(cfg.env.kwargs)
    if split == "test":
        kwargs.update(cfg.env.eval_kwargs)
        if "split" in envs.env_options(cfg.env.name) and "split" not in cfg.env.eval_kwargs:
            kwargs["split"] = "test"
    try:
        factory = envs.factory(cfg.env.name, **kwargs)
        env = factory()  # fail early, with the env's own message, on bad options
        if not envs.is_builtin(cfg.env.name):
            check_user_env(cfg, env)
    except envs.EnvError as exc:
        if split == "test" and cfg.env.eval_kwargs:
            raise envs.EnvError(f"held-out envs (env.kwargs + env.eval_kwargs): {exc}") from None
        raise
    if not envs.is_builtin(cfg.env.name):
        return CheckedFactory(factory, cfg.env.name, env_label(cfg))
    return factory


def env_label(cfg: RunConfig) -> str:
    """How messages name the run's env: ``env 'x'``, with where it comes from when that is not its name."""
    where = envs.source(cfg.env.name)
    return f"env {cfg.env.name!r}" + ("" if where in ("built-in", cfg.env.name) else f" ({where})")


def check_user_env(cfg: RunConfig, env) -> None:
    """What a run needs of an env that is not built in, checked on ``env`` before any work: a first reset that
    returns an observation and an info with every key of the protocol, of the right type, and a turn limit
    (the env's ``max_steps`` or ``rollout.max_steps``). ``creditflow envs check`` runs every check."""
    problem = first_reset_problem(env)
    if problem is not None:
        raise envs.EnvError(f"{env_label(cfg)}: {problem} (creditflow envs check {cfg.env.name} runs every check)")
    if cfg.rollout.max_steps is None and turn_limit(cfg, env) is None:
        raise envs.EnvError(f"{env_label(cfg)} has no max_steps (a positive integer): episodes need a turn limit; "
                            f"set max_steps on the env or give rollout.max_steps")


def turn_limit(cfg: RunConfig, env) -> int | None:
    """The most turns of an episode: ``rollout.max_steps``, capped by the env's own ``max_steps``."""
    own = getattr(env, "max_steps", None)
    own = own if isinstance(own, int) and not isinstance(own, bool) and own >= 1 else None
    limits = [n for n in (cfg.rollout.max_steps, own) if n is not None]
    return min(limits) if limits else None


def require_expert(cfg: RunConfig, factory, need: str) -> None:
    """One line, before any work, when a stage that needs expert demonstrations (``need`` says which and what
    to do instead) runs on an env without ``expert_actions()``."""
    if not callable(getattr(factory(), "expert_actions", None)):
        raise UserError(f"{env_label(cfg)} has no expert (an expert_actions() method): {need}")


@contextlib.contextmanager
def new_run_dir(cfg: RunConfig, world: World = World(), keep=None) -> Iterator[Path]:
    """Create ``out_dir`` and write ``config.yaml`` for a fresh run. A user error inside the block undoes
    that: the directory goes if this run created it (with the parent directories it created for it), else what
    this run added there goes and ``config.yaml`` is put back as it was, so the same command runs again; an
    interrupt keeps what was written (the tiny model, π_SFT) for the next attempt. ``keep()`` true at the
    error (a checkpoint was written: the run is resumable) keeps everything. Under N processes rank 0 does
    this; the others only get the path."""
    out = Path(cfg.out_dir)
    if not world.main:
        yield out
        return
    if out.exists() and not out.is_dir():
        raise UserError(f"out_dir {str(out)!r} is a file, not a directory")
    created = first_missing(out)  # out, or the first of its parents that does not exist yet
    config = out / "config.yaml"
    before = config.read_bytes() if config.is_file() else None
    try:
        entries = set(os.listdir(out)) if created is None else set()  # what a failed start must leave
        out.mkdir(parents=True, exist_ok=True)
        dump_config(cfg, config)
    except OSError as exc:
        if created is not None:
            shutil.rmtree(created, ignore_errors=True)
        raise UserError(f"out_dir {str(out)!r}: cannot write there ({exc.strerror or exc})") from None
    try:
        yield out
    except Exception as exc:  # a user error, or a full disk: nothing of this run is left
        if not isinstance(exc, UserError) and disk_full_line(exc) is None or keep is not None and keep():
            raise
        if created is not None:
            shutil.rmtree(created, ignore_errors=True)
        else:
            for name in set(os.listdir(out)) - entries:
                path = out / name
                shutil.rmtree(path, ignore_errors=True) if path.is_dir() and not path.is_symlink() else \
                    path.unlink(missing_ok=True)
            if before is None:
                config.unlink(missing_ok=True)
            else:
                config.write_bytes(before)
        raise


def first_missing(path: Path) -> Path | None:
    """The outermost directory that creating ``path`` (with its parents) would create; None when it exists."""
    missing = None
    for p in (path, *path.parents):
        if os.path.lexists(p):
            break
        missing = p
    return missing


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


def prompt_builder(cfg: RunConfig, env) -> PromptBuilder:
    return PromptBuilder(environment=environment_description(env), history_length=cfg.rollout.history_length,
                         template=cfg.policy.template, history=cfg.rollout.history)


def success_rule(cfg: RunConfig) -> SuccessRule:
    """The run's one success rule (``env.success_threshold``)."""
    return SuccessRule(cfg.env.success_threshold)


def tiny_vocab_size(cfg: RunConfig, env) -> int:
    """``policy.tiny_vocab_size``, else the env's own suggestion (``tiny_vocab_size``), else 1024."""
    return int(cfg.policy.tiny_vocab_size or getattr(env, "tiny_vocab_size", 0) or 1024)


def load_or_build_policy(cfg: RunConfig, out_dir: Path, factory, log=print, progress: RunProgress | None = None,
                         world: World = World(), corpus: list[str] = (), words: tuple[str, ...] = ()):
    """Load ``cfg.policy.model``, or build the tiny default into ``out_dir/tiny_model`` (once; rank 0 builds
    it, the other processes wait and load it). ``corpus`` and ``words``: more tokenizer text and whole-word
    tokens (``sft --tools``: the tool-calling chats and their markup)."""
    if cfg.policy.model:
        return load_policy(cfg.policy.model, cfg.policy.device, cfg.policy.weights_dtype)
    tiny_dir = out_dir / "tiny_model"
    if world.main and not tiny_model_built(tiny_dir):
        with (progress or RunProgress()).bar("building the tiny default policy", None, keep=False):
            env = factory()
            prompts = prompt_builder(cfg, env)
            texts = expert_corpus(factory, prompts, list(range(900_000, 900_400)), rng_seed=cfg.seed) + list(corpus)
            build_tiny_policy(tiny_dir, texts, vocab_size=tiny_vocab_size(cfg, env), seed=cfg.seed,
                              isolate_chars=getattr(env, "tokenizer_isolate_chars", ""),
                              lowercase=bool(getattr(env, "tokenizer_lowercase", False)),
                              words=(*getattr(env, "tokenizer_words", ()), *words),
                              hidden_size=cfg.policy.tiny_hidden_size, num_hidden_layers=cfg.policy.tiny_layers)
        log(f"built tiny default policy in {tiny_dir}")
    distributed.barrier(world)
    return load_policy(tiny_dir, cfg.policy.device, cfg.policy.weights_dtype)


def chat_encoder(tokenizer):
    """messages -> prompt ids via the chat template (with the assistant generation prompt)."""
    def encode(messages: list[dict]) -> list[int]:
        ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
        if isinstance(ids, dict) or hasattr(ids, "input_ids"):  # BatchEncoding in newer transformers
            ids = ids["input_ids"]
        return list(ids)
    return encode


def sampling_params(cfg: RunConfig, tokenizer, evaluation: bool = False) -> SamplingParams:
    stops = []
    if cfg.generation.stop_at_action_close:
        close = tokenizer.convert_tokens_to_ids("</action>")
        if isinstance(close, int) and close != tokenizer.unk_token_id and close is not None:
            stops.append(close)
    return SamplingParams(
        max_new_tokens=cfg.generation.max_new_tokens,
        temperature=cfg.generation.eval_temperature if evaluation else cfg.generation.temperature,
        top_p=1.0 if evaluation else cfg.generation.top_p,
        stop_token_ids=stops,
    )


def make_backend(cfg: RunConfig, model, tokenizer, model_path: str | Path | None = None) -> Backend:
    """The generation backend of ``cfg.policy.backend``.

    ``hf`` generates with ``model``. ``vllm`` starts a colocated engine from ``model_path`` (the directory
    ``model`` was loaded from; for a LoRA adapter, its base model) and pushes ``model``'s weights into it (a
    LoRA policy's merged), so it starts in step with the trainer.
    ``openai`` talks to ``policy.base_url``; ``model`` is not used (it may be None).
    """
    check_backend(cfg)
    p = cfg.policy
    if p.backend == "hf":
        return HFBackend(model, tokenizer, autocast=p.autocast, share_prefix=p.share_prefix)
    if p.backend == "openai":
        return openai_backend.OpenAIBackend(p.base_url, p.model_name, tokenizer,
                                            api_key=os.environ.get("OPENAI_API_KEY"), timeout=p.request_timeout,
                                            retries=p.request_retries)
    if model_path is None:
        raise UserError("policy.backend=vllm needs the policy's model directory")
    backend = vllm_backend.VLLMBackend(str(weights_dir(model_path)), tokenizer, device=p.device,
                                       dtype="bfloat16" if p.autocast == "bf16" else p.dtype,
                                       seed=cfg.seed, max_model_len=p.vllm_max_model_len,
                                       kv_cache_gib=p.vllm_kv_cache_gib,
                                       gpu_memory_utilization=p.vllm_gpu_memory_utilization)
    if model is not None:
        backend.sync_weights(model)
    return backend


def close_backend(backend: Backend) -> None:
    """Shut down a backend that holds an engine (vLLM); a no-op for the others."""
    close = getattr(backend, "close", None)
    if close is not None:
        close()


def make_engine(cfg: RunConfig, model, tokenizer, factory, env_executor=None, *, backend: Backend | None = None,
                progress: RunProgress | None = None, watch: str | None = None) -> RolloutEngine:
    """``env_executor``: where env work runs (``creditflow.rollout.executors``; default in-process).
    ``backend``: the generation backend (default: ``hf`` on ``model``; see :func:`make_backend`).
    ``watch``: show every rollout as a ``progress`` bar with this description (turns, episodes running)."""
    env = factory()
    prompts = prompt_builder(cfg, env)
    engine = WatchedEngine(
        backend=backend if backend is not None else HFBackend(model, tokenizer, autocast=cfg.policy.autocast,
                                                                   share_prefix=cfg.policy.share_prefix),
        encode=chat_encoder(tokenizer),
        env_factory=factory,
        prompt_builder=prompts,
        sampling=sampling_params(cfg, tokenizer),
        invalid_penalty=cfg.rollout.invalid_penalty,
        max_steps=turn_limit(cfg, env),
        env_executor=env_executor,
        success_rule=success_rule(cfg),
        chat=ChatTemplate(tokenizer) if prompts.conversation else None,
    )
    engine.progress, engine.watch = progress, watch
    engine.turn_limit = turn_limit(cfg, env)
    return engine
