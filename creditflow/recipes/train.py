"""The ``sft`` and ``train`` recipes (with ``--resume``): run directories, pi_SFT, the RL loop.

A run directory holds ``config.yaml``, ``metrics.jsonl``, ``tb/``, the policy RL starts from
(``sft_model/`` when creditflow trained it), ``checkpoints/`` and ``report/``.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Callable

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from creditflow import credit
from creditflow.config import RunConfig, build_config, dump_config
from creditflow.curriculum.hooks import build_hooks
from creditflow.errors import UserError
from creditflow.policy.model import load_policy
from creditflow.recipes import common
from creditflow.rollout.expert import expert_trajectories
from creditflow.rollout.seeding import seed_everything
from creditflow.train.checkpoint import latest_checkpoint, load_trainer_state
from creditflow.train.metrics import MetricsLogger
from creditflow.train.rl import RLTrainer
from creditflow.train.sft import demo_examples, run_sft


def _console() -> Console:
    return Console(stderr=True)


def prepare_run_dir(cfg: RunConfig, fresh: bool = True) -> Path:
    out = Path(cfg.out_dir)
    if fresh and (out / "metrics.jsonl").exists():
        raise UserError(f"out_dir {str(out)!r} already holds a run; use --resume {out} or another out_dir")
    out.mkdir(parents=True, exist_ok=True)
    dump_config(cfg, out / "config.yaml")
    return out


def sft_policy(cfg: RunConfig, out: Path, train_factory, log: Callable[[str], None]):
    """Build (or load) the starting policy and fine-tune it on expert demos -> ``out/sft_model``."""
    model, tok = common.load_or_build_policy(cfg, out, train_factory, log=log)
    env = train_factory()
    seeds = [cfg.sft.seed_offset + i for i in range(cfg.sft.demos)]
    demos = expert_trajectories(train_factory, seeds, common.success_rule(cfg))
    examples = demo_examples(demos, common.prompt_builder(cfg, env))
    log(f"SFT on {len(examples)} expert steps from {len(demos)} solved episodes")
    metrics = run_sft(model, tok, examples, out, cfg.sft, seed=cfg.seed)
    target = out / "sft_model"
    tmp = out / ".sft_model.tmp"
    if tmp.exists():
        shutil.rmtree(tmp)
    model.save_pretrained(tmp)
    tok.save_pretrained(tmp)
    if target.exists():
        shutil.rmtree(target)
    tmp.rename(target)
    shutil.rmtree(out / "sft_tmp", ignore_errors=True)
    (out / "sft_metrics.json").write_text(json.dumps(metrics, indent=2))
    return model, tok, metrics


def run_sft_command(cfg: RunConfig) -> Path:
    out = prepare_run_dir(cfg, fresh=False)
    console = _console()
    train_factory = common.env_factory(cfg, "train")
    _, _, metrics = sft_policy(cfg, out, train_factory, console.print)
    console.print(f"SFT done: loss {metrics['sft/train_loss']:.4f} over {metrics['sft/steps']} steps -> "
                  f"{out / 'sft_model'}")
    return out / "sft_model"


def run_train(cfg: RunConfig, resume: bool = False, hooks=None, log: Callable[[str], None] | None = None):
    """RL training (``cfg.rl``); starts from ``cfg.policy.model`` or from a freshly SFT-ed tiny model."""
    console = _console()
    log = log or console.print
    credit.validate_knobs(cfg.rl.algo, cfg.rl.credit)  # validate before any work (SFT can take minutes)
    if cfg.policy.backend == "openai":
        raise UserError("policy.backend=openai serves fixed policies (eval, rro collect); RL training needs a "
                        "backend that follows the weights: hf or vllm")
    train_factory = common.env_factory(cfg, "train")
    eval_factory = common.env_factory(cfg, "test")
    seed_everything(cfg.seed)
    if resume:
        out = Path(cfg.out_dir)
        ckpt = latest_checkpoint(out)
        model, tok = load_policy(ckpt, cfg.policy.device, cfg.policy.dtype)
        model_path = ckpt
        ref_path = Path(cfg.policy.model) if cfg.policy.model else out / "sft_model"
        ref_model = load_policy(ref_path, cfg.policy.device, cfg.policy.dtype)[0] if cfg.rl.kl_coef > 0 else None
    else:
        out = prepare_run_dir(cfg)
        if cfg.policy.model:
            model, tok = load_policy(cfg.policy.model, cfg.policy.device, cfg.policy.dtype)
            model_path = Path(cfg.policy.model)
        else:
            model, tok, _ = sft_policy(cfg, out, train_factory, log)
            seed_everything(cfg.seed)
            model_path = out / "sft_model"
        ref_model = None
    if hooks is None:  # curriculum (CRPS / ExpReplay) or diagnostics only, from cfg.curriculum
        hooks = build_hooks(cfg, train_factory, warm_start=not resume)
    # hf: each engine generates with the trained module; vllm: one engine serves both, synced every step
    backend = common.make_backend(cfg, model, tok, model_path) if cfg.policy.backend != "hf" else None
    train_engine = common.make_engine(cfg, model, tok, train_factory, backend=backend)
    eval_engine = common.make_engine(cfg, model, tok, eval_factory, backend=backend)
    logger = MetricsLogger(out, cfg.tensorboard, resume_step=None)
    trainer = RLTrainer(cfg, model, tok, train_engine, eval_engine, out, logger, hooks=hooks, ref_model=ref_model,
                        eval_sampling=common.sampling_params(cfg, tok, evaluation=True))
    if resume:
        load_trainer_state(trainer, ckpt)
        logger.close()
        logger = MetricsLogger(out, cfg.tensorboard, resume_step=trainer.step)
        trainer.logger = logger
        log(f"resumed from {ckpt} at step {trainer.step}")
    columns = [TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
               TextColumn("{task.fields[info]}")]
    with Progress(*columns, console=console, transient=False, disable=not console.is_terminal) as bar:
        task = bar.add_task(f"{cfg.rl.algo} on {cfg.env.name}", total=cfg.rl.steps, completed=trainer.step,
                            info="")

        def progress(step: int, m: dict) -> None:
            info = f"succ {m.get('train/success_rate', 0):.2f}"
            if "eval/success_rate" in m:
                info += f" | eval {m['eval/success_rate']:.2f}"
            bar.update(task, completed=step, info=info)
            if not console.is_terminal:
                log(f"step {step}/{cfg.rl.steps}: {info}")

        trainer.progress = progress
        try:
            last = trainer.fit()
        finally:
            common.close_backend(backend)
    logger.close()
    return out, trainer, last


def config_for_resume(run_dir: str | Path, overrides: list[str]) -> RunConfig:
    run = Path(run_dir)
    if not (run / "config.yaml").exists():
        raise UserError(f"--resume {str(run)!r}: no config.yaml there (not a creditflow run directory)")
    cfg = build_config(run / "config.yaml", overrides)
    cfg.out_dir = str(run)
    return cfg
