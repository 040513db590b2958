"""The ``sft`` and ``train`` recipes (with ``--resume``): run directories, pi_SFT, the RL loop.

A run directory holds ``config.yaml``, ``metrics.jsonl``, ``tb/``, the policy RL starts from
(``sft_model/`` when creditflow trained it), ``checkpoints/`` and ``report/``.

Everything that can be checked is checked before any work (:func:`creditflow.recipes.common.check_run`, the
env factories, the checkpoint of a resumed run). Ctrl-C (or SIGTERM) ends a run with an
:class:`~creditflow.errors.Interrupted` that says what is on disk and how to continue.

Launched as N processes (``accelerate launch``, ``torchrun``), ``train`` and ``sft`` are data parallel
(docs/scaling.md): every process trains, rank 0 alone writes the run directory and speaks.
"""

from __future__ import annotations

import json
import shlex
import shutil
from pathlib import Path
from typing import Callable

from creditflow.atomic import clear_temporaries, publish_dir, temporary_dir, write_atomic
from creditflow.config import RunConfig, build_config, changed_settings, dump_config
from creditflow.curriculum.hooks import build_hooks
from creditflow.errors import Interrupted, UserError, noted
from creditflow.policy import inference, lora
from creditflow.policy.model import is_adapter_dir, load_policy, tiny_model_built
from creditflow.recipes import common
from creditflow.recipes.progress import RunProgress
from creditflow.policy.tools import TOOL_MARKUP
from creditflow.rollout.expert import expert_tool_conversations, expert_trajectories
from creditflow.rollout.seeding import seed_everything
from creditflow.trainer import distributed
from creditflow.trainer.checkpoint import (Found, checkpoint_root, checkpoint_world_size, load_trainer_state,
                                         newest_checkpoint, resume_checkpoint)
from creditflow.trainer.distributed import World
from creditflow.trainer.metrics import MetricsLogger, NullLogger, read_metrics
from creditflow.trainer.rl import RLTrainer
from creditflow.trainer.sft import (check_max_length, demo_examples, prompt_lengths, run_sft, tool_calling_tokenizer,
                                  tool_corpus, tool_examples)


def sft_policy(cfg: RunConfig, out: Path, train_factory, log: Callable[[str], None],
               progress: RunProgress | None = None, world: World = World()):
    """Build (or load) the starting policy and fine-tune it on expert demos -> ``out/sft_model``. Under N
    processes TRL trains data parallel (each process a share of every batch) and rank 0 saves."""
    progress = progress or RunProgress()
    notes: list[str] = []  # said once the demonstrations pass the length check (else the error is the one line)
    env = train_factory()
    seeds = [cfg.sft.seed_offset + i for i in range(cfg.sft.demos)]
    if cfg.sft.tools:  # tool-calling chats, for TRL's environment_factory (docs/trl.md)
        demos = expert_tool_conversations(train_factory, seeds, common.success_rule(cfg))
    else:
        demos = expert_trajectories(train_factory, seeds, common.success_rule(cfg))  # the env's faults before any work
    if not demos:
        raise UserError(f"{common.env_label(cfg)}: the expert reached the goal in none of the {len(seeds)} demo "
                        f"episodes (sft.demos, seeds {seeds[0]}..{seeds[-1]}; success is info['won']"
                        + (f" or score >= {cfg.env.success_threshold:g}" if cfg.env.success_threshold is not None
                           else "") + "): SFT would have no demonstration")
    if cfg.sft.tools:
        model, tok = common.load_or_build_policy(cfg, out, train_factory, log=notes.append, progress=progress,
                                                 world=world, corpus=tool_corpus(demos), words=TOOL_MARKUP)
        tok = tool_calling_tokenizer(tok, common.env_label(cfg) if not cfg.policy.model else cfg.policy.model)
        examples = tool_examples(demos)
    else:
        model, tok = common.load_or_build_policy(cfg, out, train_factory, log=notes.append, progress=progress,
                                                 world=world)
        examples = demo_examples(demos, common.prompt_builder(cfg, env))
    dropped = check_max_length(prompt_lengths(examples, tok), cfg.sft.max_length)
    for note in notes:
        log(note)
    log(f"SFT on {len(examples)} expert {'tool-calling turns' if cfg.sft.tools else 'steps'} from {len(demos)} "
        "solved episodes")
    if dropped:
        log(f"note: sft.max_length={cfg.sft.max_length} drops {dropped} of {len(examples)} steps whose prompt "
            f"alone fills it")
    target = out / "sft_model"
    tmp = temporary_dir(target) if world.main else target.with_name(f".{target.name}.tmp")
    try:
        with progress.bar("SFT", None, unit="steps") as update:
            metrics = run_sft(model, tok, examples, out, cfg.sft, seed=cfg.seed, lora=cfg.policy.lora, save_to=tmp,
                              progress=lambda step, total, info: update(step, info, total=total),
                              autocast=cfg.policy.autocast)
    except BaseException:
        if world.main:
            shutil.rmtree(tmp, ignore_errors=True)
        raise
    finally:
        if world.main:
            shutil.rmtree(out / "sft_tmp", ignore_errors=True)  # TRL's scratch dir (nothing is saved there)
    if world.main:  # the metrics first: a complete sft_model/ is the sign that SFT is done
        write_atomic(out / "sft_metrics.json", json.dumps(metrics, indent=2))
        inference.save(tmp, cfg)  # the prompt layout π_SFT was trained with travels with it
        publish_dir(tmp, target)
    distributed.barrier(world)  # sft_model is there for every process
    return model, tok, metrics


def run_sft_command(cfg: RunConfig, progress: RunProgress | None = None) -> Path:
    """``creditflow sft``: π_SFT in ``out_dir/sft_model``; returns its path."""
    return run_sft_stage(cfg, progress)[0]


def run_sft_stage(cfg: RunConfig, progress: RunProgress | None = None) -> tuple[Path, dict]:
    """SFT of ``cfg`` as a run of its own: π_SFT in ``out_dir/sft_model``; its path and the SFT metrics."""
    common.check_run(cfg, tools=True)
    train_factory = common.env_factory(cfg, "train")
    common.require_expert(cfg, train_factory, "SFT trains on expert demonstrations (RL can start from a given "
                                              "--model instead)")
    world = common.start_world(cfg)
    progress = common.rank_progress(progress or RunProgress(), world)
    with common.new_run_dir(cfg, world) as out:
        try:
            _, _, metrics = sft_policy(cfg, out, train_factory, progress.log, progress, world)
        except KeyboardInterrupt:
            raise Interrupted(f"during SFT; nothing saved yet ({out / 'sft_model'} is written when SFT ends)"
                              + _kept_tiny(out)) from None
    progress.log(f"SFT done: loss {metrics['sft/train_loss']:.4f} over {metrics['sft/steps']} steps -> "
                 f"{out / 'sft_model'}")
    return out / "sft_model", metrics


def _kept_tiny(out: Path) -> str:
    tiny = out / "tiny_model"
    return f"; the untrained tiny policy in {tiny} is reused next time" if tiny_model_built(tiny) else ""


def _interrupted(out: Path, trainer: RLTrainer | None, cfg: RunConfig) -> Interrupted:
    """What an interrupted ``train`` leaves: the newest checkpoint, else π_SFT or the tiny policy, else nothing;
    ``--resume`` continues from any of them (from step 0 without a checkpoint)."""
    where = f"after {trainer.step} of {cfg.rl.steps} steps" if trainer is not None else "before RL started"
    resume = f"creditflow train --resume {shlex.quote(str(out))}"
    ckpt = newest_checkpoint(out)
    if ckpt is not None:
        return Interrupted(f"{where}; the newest checkpoint is {ckpt}", resume=resume)
    if not (out / "config.yaml").exists():
        return Interrupted(f"{where}; nothing saved")
    if trainer is not None:
        where += f", before the first checkpoint (rl.save_every={cfg.rl.save_every})"
    sft, tiny = out / "sft_model", out / "tiny_model"
    if not cfg.policy.model and (sft / "config.json").exists():
        kept = f"; π_SFT is saved in {sft}"
    elif not cfg.policy.model and tiny_model_built(tiny):
        kept = f"; the untrained tiny policy in {tiny} is kept"
    else:
        kept = ""
    return Interrupted(f"{where}{kept}; a resume starts again from step 0", resume=resume)


def run_train(cfg: RunConfig, resume: bool = False, hooks=None, log: Callable[[str], None] | None = None,
              progress: RunProgress | None = None):
    """RL training (``cfg.rl``); starts from ``cfg.policy.model`` or from a freshly SFT-ed tiny model.

    ``resume``: continue the run in ``cfg.out_dir`` from its newest intact checkpoint (damaged newer ones are
    skipped with a note); a run without a checkpoint yet starts again from step 0 in its directory, reusing a
    complete π_SFT (or tiny policy) it saved.

    Under N launched processes every process runs this (data parallel); rank 0 writes the run directory
    and logs, and each process seeds its sampling with ``seed + rank``."""
    progress = progress or RunProgress()
    log = log or progress.log
    # everything that can be checked, before any work (SFT and model building take minutes)
    common.check_run(cfg, knobs=True)
    if not resume and cfg.policy.model:  # the prompt layout the given model was trained with (policy/inference.py)
        cfg = common.with_model_settings(cfg, cfg.policy.model, log)
    common.check_backend(cfg, trains=True)
    common.check_data_parallel(cfg)
    train_factory = common.env_factory(cfg, "train")
    eval_factory = common.env_factory(cfg, "test")
    if not resume and not cfg.policy.model:
        common.require_expert(cfg, train_factory, "without --model, train starts from SFT on expert demonstrations; "
                                                  "give --model DIR, the policy to start RL from")
    if cfg.curriculum.warm_start_demos:
        common.require_expert(cfg, train_factory, "curriculum.warm_start_demos fills the buffer with expert "
                                                  "solutions; set it to 0")
    out = Path(cfg.out_dir)
    found: Found | None = None
    if resume:
        found = resume_checkpoint(out)
    if found is not None:
        ckpt = found.path
        ref_path = Path(cfg.policy.model) if cfg.policy.model else out / "sft_model"
        common.check_run(cfg, model=ckpt)
        if cfg.rl.kl_coef > 0 or cfg.policy.lora.enabled:  # LoRA: the adapter goes on this base
            common.check_run(cfg, model=ref_path)
        _check_processes(ckpt, distributed.launched_size())
        if cfg.policy.lora.enabled != is_adapter_dir(ckpt):
            raise UserError(f"--resume {str(out)!r}: checkpoint {ckpt} holds "
                            f"{'a LoRA adapter' if is_adapter_dir(ckpt) else 'full weights'} but policy.lora.enabled "
                            f"is {cfg.policy.lora.enabled}")
    elif not resume and (out / "metrics.jsonl").exists():
        raise UserError(f"out_dir {str(out)!r} already holds a run; use --resume {out} or another out_dir")
    world = common.start_world(cfg)
    distributed.barrier(world)  # every process has checked before rank 0 writes anything
    if not world.main:
        progress, log = common.rank_progress(progress, world), _silent
    seed_everything(cfg.seed + world.rank)
    if resume and world.main:  # what writes killed mid-way left (a checkpoint, π_SFT, a file being replaced)
        for directory in (out, checkpoint_root(out)):
            clear_temporaries(directory)
    trainer = None
    try:
        if found is not None:
            note = found.note()
            if note:
                log(note)
            model, tok, ref_model, model_path = _resumed_policy(cfg, ckpt, ref_path)
            trainer = _trainer(cfg, out, model, tok, model_path, train_factory, eval_factory, hooks, ref_model,
                               progress, resume=True, world=world, resume_step=found.step)
            load_trainer_state(trainer, ckpt)
            if world.main:
                dump_config(cfg, out / "config.yaml")  # the settings in force now, with what this resume changed
            log(f"resumed from {ckpt} at step {trainer.step}{_changes(cfg, trainer.step)}")
        else:  # until the first checkpoint, a user error leaves nothing of this run (the same command runs again)
            with common.new_run_dir(cfg, world, keep=lambda: newest_checkpoint(out) is not None):
                if resume:
                    log(f"no checkpoint in {out} yet: the run starts again from step 0")
                model, tok, model_path = _starting_policy(cfg, out, train_factory, log, progress, world,
                                                          reuse=resume)
                if cfg.policy.lora.enabled:  # a fresh adapter on pi_SFT, which stays the frozen base
                    model = lora.wrap(model, cfg.policy.lora, base_dir=model_path)
                trainer = _trainer(cfg, out, model, tok, model_path, train_factory, eval_factory, hooks, None,
                                   progress, resume=False, world=world, resume_step=-1 if resume else None)
                last = _fit(cfg, trainer, progress, log, out)
        if found is not None:
            last = _fit(cfg, trainer, progress, log, out)
    except KeyboardInterrupt:
        raise _interrupted(out, trainer, cfg) from None
    finally:
        if trainer is not None:
            trainer.logger.close()
            common.close_backend(trainer.train_engine.backend)
    if not last and world.main:  # no training step ran (rl.steps=0): report the step-0 evaluation
        last = read_metrics(out / "metrics.jsonl")[-1]
    return out, trainer, last


def _starting_policy(cfg: RunConfig, out: Path, train_factory, log: Callable[[str], None], progress: RunProgress,
                     world: World, reuse: bool):
    """``(model, tokenizer, directory)`` RL starts from: ``policy.model``, else π_SFT trained now into
    ``out/sft_model`` (``reuse``: a complete one already there, from a run that stopped before its first
    checkpoint, is loaded instead)."""
    if cfg.policy.model:
        model, tok = load_policy(cfg.policy.model, cfg.policy.device, cfg.policy.weights_dtype)
        return model, tok, Path(cfg.policy.model)
    sft = out / "sft_model"
    if reuse and (sft / "config.json").exists():
        log(f"reusing π_SFT in {sft}")
        model, tok = load_policy(sft, cfg.policy.device, cfg.policy.weights_dtype)
    else:
        model, tok, _ = sft_policy(cfg, out, train_factory, log, progress, world)
    seed_everything(cfg.seed + world.rank)
    return model, tok, sft


def _silent(_message: str) -> None:
    """The log of every process but rank 0."""


def _check_processes(ckpt: Path, launched: int) -> None:
    """A resumed run has as many processes as wrote its checkpoint (each process's RNG states are in it)."""
    saved = checkpoint_world_size(ckpt)
    if saved != launched:
        how = f"accelerate launch --num_processes {saved} ..." if saved > 1 else "no launcher (one process)"
        raise UserError(f"checkpoint {ckpt} was written by {saved} process(es), this run has {launched}; resume it "
                        f"with {how}")


def _logger(cfg: RunConfig, out: Path, world: World, resume_step: int | None) -> MetricsLogger | NullLogger:
    """Rank 0 writes metrics.jsonl and TensorBoard (``resume_step``: drop rows logged after it, -1: all)."""
    return MetricsLogger(out, cfg.tensorboard, resume_step=resume_step) if world.main else NullLogger()


def _resumed_policy(cfg: RunConfig, ckpt: Path, ref_path: Path):
    """``(model, tokenizer, reference, engine_dir)`` of the checkpoint ``ckpt``: the policy, its KL reference
    (None: none, or LoRA's adapter-disabled policy) and the directory a vLLM engine starts from. LoRA: the base
    model pi_SFT (``ref_path``) with the checkpoint's adapter."""
    if cfg.policy.lora.enabled:
        model, tok = load_policy(ref_path, cfg.policy.device, cfg.policy.weights_dtype)
        return lora.load_adapter(model, ckpt), tok, None, ref_path
    model, tok = load_policy(ckpt, cfg.policy.device, cfg.policy.weights_dtype)
    ref_model = load_policy(ref_path, cfg.policy.device, cfg.policy.weights_dtype)[0] if cfg.rl.kl_coef > 0 else None
    return model, tok, ref_model, ckpt


def _trainer(cfg: RunConfig, out: Path, model, tok, model_path: Path, train_factory, eval_factory, hooks, ref_model,
             progress: RunProgress, resume: bool, world: World, resume_step: int | None = None) -> RLTrainer:
    """The trainer and its engines; ``model_path``: the directory ``model`` was loaded from (a vLLM engine
    starts from it); ``resume_step``: the metric rows after it are dropped (see :class:`MetricsLogger`)."""
    if hooks is None:  # curriculum (CRPS / ExpReplay) or diagnostics only, from cfg.curriculum
        hooks = build_hooks(cfg, train_factory, warm_start=not resume)
    # hf: each engine generates with the trained module; vllm: one engine serves both, synced every step
    backend = common.make_backend(cfg, model, tok, model_path) if cfg.policy.backend != "hf" else None
    train_engine = common.make_engine(cfg, model, tok, train_factory, backend=backend, progress=progress,
                                      watch="  rollout")
    eval_engine = common.make_engine(cfg, model, tok, eval_factory, backend=backend, progress=progress,
                                     watch="  eval")
    return RLTrainer(cfg, model, tok, train_engine, eval_engine, out, _logger(cfg, out, world, resume_step),
                     hooks=hooks, ref_model=ref_model, eval_sampling=common.sampling_params(cfg, tok, evaluation=True),
                     world=world)


def _fit(cfg: RunConfig, trainer: RLTrainer, progress: RunProgress, log: Callable[[str], None], out: Path) -> dict:
    """``trainer.fit()`` under a bar of RL steps (one line per step when stderr is not a terminal). A user error
    (an env that breaks the protocol mid-run) after a checkpoint says that the run continues from it."""
    try:
        return _fit_steps(cfg, trainer, progress, log)
    except UserError as exc:
        ckpt = newest_checkpoint(out)
        if ckpt is None:
            raise
        raise noted(exc, f"the run is kept at {ckpt}: after the fix, continue with creditflow train --resume "
                         f"{shlex.quote(str(out))}") from None


def _fit_steps(cfg: RunConfig, trainer: RLTrainer, progress: RunProgress, log: Callable[[str], None]) -> dict:
    rl = cfg.rl
    log(f"RL: {rl.algo} on {cfg.env.name}, steps {trainer.step + 1}..{rl.steps} ({cfg.rollout.tasks_per_step} tasks x "
        f"{cfg.rollout.group_size} rollouts each); held-out eval on {rl.eval_episodes} tasks"
        + (f" every {rl.eval_every} steps" if rl.eval_every else " at the end"))
    with progress.bar(f"{rl.algo} on {cfg.env.name}", rl.steps, completed=trainer.step, unit="steps") as update:
        def on_step(step: int, m: dict) -> None:
            info = f"succ {m.get('train/success_rate', 0):.2f}"
            if "eval/success_rate" in m:
                info += f" | eval {m['eval/success_rate']:.2f}"
            update(step, info)
            if not progress.live:
                log(f"step {step}/{rl.steps}: {info} ({m.get('time/step_s', 0):.1f} s, {update.eta()})")

        trainer.progress = on_step
        return trainer.fit()


def _changes(cfg: RunConfig, step: int) -> str:
    """What this resume changed (its record in ``cfg.resumes``), for the log."""
    if not cfg.resumes or cfg.resumes[-1].from_step != step + 1:
        return ""
    record = cfg.resumes[-1]
    shown = ", ".join(f"{key} {old!r} -> {new!r}" for key, (old, new) in record.changed.items())
    return f"; from step {record.from_step}: {shown} (recorded in config.yaml)"


def config_for_resume(run_dir: str | Path, overrides: list[str]) -> RunConfig:
    """The config of the run in ``run_dir`` with ``overrides``; what they change is recorded in
    ``cfg.resumes`` with the step it takes effect (step 1 for a run without a checkpoint yet, which starts
    again). A conflicting ``out_dir`` and a run that is already done (``rl.steps`` reached by its newest intact
    checkpoint) are one-line UserErrors."""
    run = Path(run_dir)
    if not run.exists():
        raise UserError(f"--resume {str(run)!r}: no such directory")
    if not run.is_dir():
        raise UserError(f"--resume {str(run)!r} is a file; give the run directory")
    if not (run / "config.yaml").exists():
        raise UserError(f"--resume {str(run)!r}: no config.yaml there (not a creditflow run directory)")
    saved = build_config(run / "config.yaml")
    cfg = build_config(run / "config.yaml", overrides)
    given = [item.partition("=")[2] for item in overrides if item.partition("=")[0].strip() == "out_dir"]
    if given and Path(given[-1]).resolve() != run.resolve():
        raise UserError(f"--out {given[-1]!r} conflicts with --resume {str(run)!r}: a resumed run stays in its "
                        f"directory (drop --out, or start a new run there)")
    cfg.out_dir = str(run)
    found = resume_checkpoint(run)
    step = found.step if found is not None else 0  # no checkpoint yet: the run starts again
    if cfg.rl.steps <= step:
        raise UserError(f"--resume {str(run)!r}: the run is already at step {step} and rl.steps is {cfg.rl.steps}, "
                        f"nothing to do (set rl.steps above {step} to train further)")
    changed = changed_settings(saved, cfg)
    lora_changed = sorted(key for key in changed if key.startswith("policy.lora."))
    if lora_changed:
        raise UserError(f"--resume {str(run)!r}: {lora_changed[0]} cannot change in a resumed run (the checkpoint's "
                        f"{'adapter' if saved.policy.lora.enabled else 'weights'} were trained with "
                        f"{lora_changed[0]}={changed[lora_changed[0]][0]!r}); start a new run")
    if changed:
        cfg.resumes = [*saved.resumes, {"from_step": step + 1, "changed": changed}]
    return cfg
