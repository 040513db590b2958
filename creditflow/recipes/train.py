"""The ``train`` recipe (with ``--resume``): RL from ``policy.model`` or from π_SFT trained first.

A run directory holds ``config.yaml``, ``metrics.jsonl``, ``tb/``, the policy RL starts from
(``sft_model/`` when creditflow trained it), ``checkpoints/`` and ``report/``.

:class:`TrainRecipe` has torchtune's shape: its construction checks everything that can be checked before any
work (:func:`creditflow.recipes.checks.check_run`, the env factories, the checkpoint of a resumed run),
:meth:`~TrainRecipe.setup` builds the policy, the engines and the trainer (a fresh start and a resume are its
two paths), :meth:`~TrainRecipe.run` trains. Ctrl-C (or SIGTERM) ends a run with an
:class:`~creditflow.errors.Interrupted` that says what is on disk and how to continue.

Launched as N processes (``accelerate launch``, ``torchrun``), ``train`` and ``sft`` are data parallel
(docs/scaling.md): every process trains, rank 0 alone writes the run directory and speaks.
"""

from __future__ import annotations

import contextlib
import shlex
from pathlib import Path
from typing import Callable, Iterator

from creditflow.atomic import clear_temporaries
from creditflow.config import RunConfig, dump_config
from creditflow.curriculum.hooks import build_hooks
from creditflow.envs.configured import env_factory, require_expert
from creditflow.errors import Interrupted, UserError, noted
from creditflow.policy import lora
from creditflow.policy.backends.factory import check_backend, close_backend, make_backend, sampling_params
from creditflow.policy.load import load_policy
from creditflow.policy.tiny import tiny_model_built
from creditflow.policy.validate import is_adapter_dir
from creditflow.recipes.checks import check_data_parallel, check_run
from creditflow.recipes.progress import RunProgress, rank_progress
from creditflow.recipes.resolve import with_model_settings
from creditflow.recipes.rundir import new_run_dir, start_world
from creditflow.recipes.sections import engine_settings, rl_run
from creditflow.recipes.sft import SFTRecipe
from creditflow.rollout.factory import make_engine
from creditflow.rollout.seeding import seed_everything
from creditflow.trainer import distributed
from creditflow.trainer import nosignal
from creditflow.trainer.checkpoint import (Found, checkpoint_root, checkpoint_size, checkpoint_world_size,
                                           human_bytes, load_trainer_state, newest_checkpoint, resume_checkpoint)
from creditflow.trainer.metrics import MetricsLogger, NullLogger, check_trackers, read_metrics
from creditflow.trainer.rl import RLTrainer


def run_train(cfg: RunConfig, resume: bool = False, hooks=None, log: Callable[[str], None] | None = None,
              progress: RunProgress | None = None):
    """RL training (``cfg.rl``); starts from ``cfg.policy.model`` or from a freshly SFT-ed tiny model;
    ``(run directory, trainer, last metrics row)``. ``hooks``: the curriculum hooks (default from
    ``cfg.curriculum``); the other arguments are :class:`TrainRecipe`'s."""
    recipe = TrainRecipe(cfg, resume=resume, hooks=hooks, log=log, progress=progress)
    with recipe.session():
        recipe.setup()
        last = recipe.run()
    if not last and recipe.world.main:  # no training step ran (rl.steps=0): report the step-0 evaluation
        last = read_metrics(recipe.out / "metrics.jsonl")[-1]
    return recipe.out, recipe.trainer, last


class TrainRecipe:
    """RL training, in torchtune's shape: construction checks, :meth:`setup` builds, :meth:`run` trains, all
    inside :meth:`session`.

    ``resume``: continue the run in ``cfg.out_dir`` from its newest intact checkpoint (damaged newer ones are
    skipped with a note); a run without a checkpoint yet starts again from step 0 in its directory, reusing a
    complete π_SFT (or tiny policy) it saved: a fresh start that reuses.

    Under N launched processes every process runs this (data parallel); rank 0 writes the run directory
    and logs, and each process seeds its sampling with ``seed + rank``."""

    def __init__(self, cfg: RunConfig, resume: bool = False, hooks=None, log: Callable[[str], None] | None = None,
                 progress: RunProgress | None = None):
        self.progress = progress or RunProgress()
        self.log = log or self.progress.log
        self.resume, self.hooks, self.trainer = resume, hooks, None
        self.out = Path(cfg.out_dir)
        self.found = self._check(cfg)
        self._run_dir = contextlib.ExitStack()  # a fresh start's run directory, open until the run ends
        self._started = False

    def _check(self, cfg: RunConfig) -> Found | None:
        """Everything that can be checked, before any work (SFT and model building take minutes); the
        checkpoint a resume continues from (None: a fresh start)."""
        check_run(cfg, knobs=True)
        if not self.resume and cfg.policy.model:  # the prompt layout the given model was trained with
            cfg = with_model_settings(cfg, cfg.policy.model, self.log)
        self.cfg = cfg
        check_backend(cfg.policy, trains=True)
        check_data_parallel(cfg)
        check_trackers(cfg.logging.report_to)
        self.train_factory = env_factory(cfg.env, cfg.rollout.max_steps, "train")
        self.eval_factory = env_factory(cfg.env, cfg.rollout.max_steps, "test")
        if not self.resume and not cfg.policy.model:
            require_expert(cfg.env, self.train_factory, "without --model, train starts from SFT on expert "
                                                    "demonstrations; give --model DIR, the policy to start RL from")
        if cfg.curriculum.warm_start_demos:
            require_expert(cfg.env, self.train_factory, "curriculum.warm_start_demos fills the buffer with expert "
                                                    "solutions; set it to 0")
        if not self.resume:
            if (self.out / "metrics.jsonl").exists():
                raise UserError(f"out_dir {str(self.out)!r} already holds a run; use --resume {self.out} or another "
                                "out_dir")
            return None
        found = resume_checkpoint(self.out)
        if found is not None:
            _check_checkpoint(cfg, self.out, found.path)
        return found

    @contextlib.contextmanager
    def session(self) -> Iterator[TrainRecipe]:
        """Where :meth:`setup` and :meth:`run` happen: a fresh start's run directory closes at its end (a user
        error before the first checkpoint leaves nothing), an interrupt says what is saved, and the trainer's
        logger and backend are closed."""
        try:
            with self._run_dir:
                yield self
        except KeyboardInterrupt:
            if not self._started:
                raise
            raise _interrupted(self.out, self.trainer, self.cfg) from None
        finally:
            if self.trainer is not None:
                self.trainer.logger.close()
                close_backend(self.trainer.train_engine.backend)

    def setup(self) -> None:
        """Join the processes, seed, and build the policy, its engines and the trainer: from the checkpoint
        (:meth:`_setup_resumed`) or from the start (:meth:`_setup_fresh`)."""
        self.world = start_world(self.cfg)
        distributed.barrier(self.world)  # every process has checked before rank 0 writes anything
        if not self.world.main:
            self.progress, self.log = rank_progress(self.progress, self.world), _silent
        seed_everything(self.cfg.seed + self.world.rank)
        if self.resume and self.world.main:  # what writes killed mid-way left (a checkpoint, π_SFT, a replaced file)
            for directory in (self.out, checkpoint_root(self.out)):
                clear_temporaries(directory)
        self._started = True
        if self.found is not None:
            self._setup_resumed()
        else:
            self._setup_fresh()

    def _setup_resumed(self) -> None:
        cfg, ckpt = self.cfg, self.found.path
        note = self.found.note()
        if note:
            self.log(note)
        model, tok, ref_model, model_path = _resumed_policy(cfg, ckpt, _reference_dir(cfg, self.out))
        self.trainer = self._trainer(model, tok, model_path, ref_model, resume_step=self.found.step)
        if not load_trainer_state(self.trainer, ckpt) and not note:
            self.log(f"note: {ckpt.name} keeps no optimizer state: AdamW's moments start afresh")
        if self.world.main:
            dump_config(cfg, self.out / "config.yaml")  # the settings in force now, with what this resume changed
        self.log(f"resumed from {ckpt} at step {self.trainer.step}{_changes(cfg, self.trainer.step)}")

    def _setup_fresh(self) -> None:
        """Until the first checkpoint, a user error leaves nothing of this run (the same command runs again)."""
        cfg, out = self.cfg, self.out
        self._run_dir.enter_context(new_run_dir(cfg, self.world, keep=lambda: newest_checkpoint(out) is not None))
        if self.resume:
            self.log(f"no checkpoint in {out} yet: the run starts again from step 0")
        model, tok, model_path = self._starting_policy()
        if cfg.policy.lora.enabled:  # a fresh adapter on pi_SFT, which stays the frozen base
            model = lora.wrap(model, cfg.policy.lora, base_dir=model_path)
        self.trainer = self._trainer(model, tok, model_path, None, resume_step=-1 if self.resume else None)

    def _starting_policy(self):
        """``(model, tokenizer, directory)`` RL starts from: ``policy.model``, else π_SFT trained now into
        ``out/sft_model`` (a resume without a checkpoint loads a complete one already there instead)."""
        cfg, out = self.cfg, self.out
        if cfg.policy.model:
            model, tok = load_policy(cfg.policy.model, cfg.policy.device, cfg.policy.weights_dtype)
            return model, tok, Path(cfg.policy.model)
        sft = out / "sft_model"
        if self.resume and (sft / "config.json").exists():
            self.log(f"reusing π_SFT in {sft}")
            model, tok = load_policy(sft, cfg.policy.device, cfg.policy.weights_dtype)
        else:
            model, tok, _ = SFTRecipe(cfg, self.train_factory, out, self.log, self.progress, self.world).setup().run()
        seed_everything(cfg.seed + self.world.rank)
        return model, tok, sft

    def _trainer(self, model, tok, model_path: Path, ref_model, resume_step: int | None) -> RLTrainer:
        """The trainer and its engines; ``model_path``: the directory ``model`` was loaded from (a vLLM engine
        starts from it); ``resume_step``: the metric rows after it are dropped (see :class:`MetricsLogger`)."""
        cfg, progress = self.cfg, self.progress
        hooks = self.hooks
        if hooks is None:  # curriculum (CRPS / ExpReplay) or diagnostics only, from cfg.curriculum
            hooks = build_hooks(cfg.curriculum, cfg.env, cfg.seed, self.train_factory, warm_start=self.found is None)
        # hf: each engine generates with the trained module; vllm or hf's bf16 rollout copy: one backend serves
        # both, synced every step
        shared = cfg.policy.backend != "hf" or cfg.policy.rollout_dtype != "same"
        backend = make_backend(cfg.policy, cfg.seed, model, tok, model_path) if shared else None
        engine = engine_settings(cfg)
        train_engine = make_engine(engine, model, tok, self.train_factory, backend=backend, progress=progress,
                                   watch="  rollout")
        eval_engine = make_engine(engine, model, tok, self.eval_factory, backend=backend, progress=progress,
                                  watch="  eval")
        # rank 0 writes metrics.jsonl and the trackers of logging.report_to (resume_step: drop rows logged after it, -1: all)
        logger = MetricsLogger(self.out, cfg.logging.report_to, resume_step=resume_step, project=cfg.logging.project,
                               run_name=cfg.logging.run_name, config=cfg.model_dump(mode="json")) \
            if self.world.main else NullLogger()
        run = rl_run(cfg, self.world, eval_sampling=sampling_params(cfg.generation, tok, evaluation=True))
        return RLTrainer(run, model, tok, train_engine, eval_engine, logger, hooks=hooks, ref_model=ref_model)

    def run(self) -> dict:
        """``trainer.fit()``: the last step's metrics (empty when no step ran)."""
        return _fit(self.cfg, self.trainer, self.progress, self.log, self.out)


def _reference_dir(cfg: RunConfig, out: Path) -> Path:
    """The policy RL started from: the KL reference, and a LoRA run's base model."""
    return Path(cfg.policy.model) if cfg.policy.model else out / "sft_model"


def _check_checkpoint(cfg: RunConfig, out: Path, ckpt: Path) -> None:
    """A resume's checkpoint (and the reference it needs) usable by this run, before any work."""
    check_run(cfg, model=ckpt)
    if cfg.rl.kl_coef > 0 or cfg.policy.lora.enabled:  # LoRA: the adapter goes on this base
        check_run(cfg, model=_reference_dir(cfg, out))
    _check_processes(ckpt, distributed.launched_size())
    if cfg.policy.lora.enabled != is_adapter_dir(ckpt):
        raise UserError(f"--resume {str(out)!r}: checkpoint {ckpt} holds "
                        f"{'a LoRA adapter' if is_adapter_dir(ckpt) else 'full weights'} but policy.lora.enabled "
                        f"is {cfg.policy.lora.enabled}")


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


def _silent(_message: str) -> None:
    """The log of every process but rank 0."""


def _check_processes(ckpt: Path, launched: int) -> None:
    """A resumed run has as many processes as wrote its checkpoint (each process's RNG states are in it)."""
    saved = checkpoint_world_size(ckpt)
    if saved != launched:
        how = f"accelerate launch --num_processes {saved} ..." if saved > 1 else "no launcher (one process)"
        raise UserError(f"checkpoint {ckpt} was written by {saved} process(es), this run has {launched}; resume it "
                        f"with {how}")


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
    if trainer.step > 0:  # a resume: where the run started, from its step-0 row
        first = next((row for row in read_metrics(trainer.out_dir / "metrics.jsonl") if row.get("step") == 0), None)
        if first is not None and "eval/success_rate" in first:
            log(_start_line(first, rl, cfg.env.name, resumed=True))
    said: list = [None]  # the no-signal reasons last said (a warning line each time they change)
    with progress.bar(f"{rl.algo} on {cfg.env.name}", rl.steps, completed=trainer.step, unit="steps") as update:
        def on_step(step: int, m: dict) -> None:
            if step == 0:  # π_start's held-out evaluation, before step 1
                log(_start_line(m, rl, cfg.env.name))
                return
            info = f"succ {m.get('train/success_rate', 0):.2f}"
            if "eval/success_rate" in m:
                info += f" | eval {m['eval/success_rate']:.2f}"
            empty = nosignal.short(m)
            if empty:
                info += f" | {empty}"
            update(step, info)
            reasons = nosignal.reasons(m)
            if reasons != said[0]:
                said[0] = reasons
                line = nosignal.warning(step, m)
                if line:
                    log(line)
            if not progress.live:
                log(f"step {step}/{rl.steps}: {info} ({m.get('time/step_s', 0):.1f} s, {update.eta()})")

        trainer.progress = on_step
        trainer.on_checkpoint = _size_once(cfg, log)
        return trainer.fit()


def _start_line(m: dict, rl, env: str, resumed: bool = False) -> str:
    """π_start's held-out success (the step-0 row): what RL is measured against."""
    line = (f"{'the run started from' if resumed else 'π_start (the policy RL starts from)'}: held-out success "
            f"{m['eval/success_rate']:.3f} on {m.get('eval/episodes', rl.eval_episodes)} validation tasks of {env}")
    if "test/success_rate" in m:
        line += f", {m['test/success_rate']:.3f} on {m.get('test/episodes', rl.test_episodes)} test tasks"
    if m.get("eval/invalid_frac"):
        line += f" ({100 * m['eval/invalid_frac']:.0f}% of its actions invalid)"
    return line + (" (metrics.jsonl, step 0)" if resumed else "")


def _size_once(cfg: RunConfig, log: Callable[[str], None]) -> Callable[[Path], None]:
    """Says the size of the run's first checkpoint (once), and what ``checkpoint`` keeps of them."""
    done = []

    def said(path: Path) -> None:
        if done:
            return
        done.append(path)
        total, opt = checkpoint_size(path)
        ck = cfg.checkpoint
        kept = f"the newest {ck.keep_last} kept" if ck.keep_last is not None else "every one kept"
        where = "in the newest only" if ck.optimizer == "newest" else "in each"
        log(f"checkpoint {path.name}: {human_bytes(total)}" + (f" ({human_bytes(opt)} of it optimizer state, kept "
            f"{where}: checkpoint.optimizer)" if opt else "") + f"; {kept} (checkpoint.keep_last)")

    return said


def _changes(cfg: RunConfig, step: int) -> str:
    """What this resume changed (its record in ``cfg.resumes``), for the log."""
    if not cfg.resumes or cfg.resumes[-1].from_step != step + 1:
        return ""
    record = cfg.resumes[-1]
    shown = ", ".join(f"{key} {old!r} -> {new!r}" for key, (old, new) in record.changed.items())
    return f"; from step {record.from_step}: {shown} (recorded in config.yaml)"
