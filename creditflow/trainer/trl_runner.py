"""One wrapper around TRL's trainers, shared by SFT (:mod:`creditflow.trainer.sft`) and DPO
(:mod:`creditflow.trainer.dpo`).

It owns what every TRL run here does the same way: quiet logging (no progress bars, no printer callback,
transformers errors only), the seed, CPU / bf16 flags taken from the model, a scratch ``output_dir``
(``<out_dir>/<name>_tmp``; nothing is saved there), no activation checkpointing, a callback that turns
TRL's log lines into ``<name>/...`` metric rows, and left padding restored for generation afterwards. The
caller passes its trainer (:class:`TRLStage`: TRL's classes and its own settings) and where and how the run runs
(:class:`TRLOptions`, the same for SFT and DPO). Launched as N processes, TRL trains data parallel through
accelerate (each process a share of every batch: the global batch is N x the per-device batch size).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import datasets
import torch
from transformers import PrinterCallback, TrainerCallback, TrainingArguments

from creditflow.config import LoRAConfig
from creditflow.policy.load import float32_attention_on_cpu, others_deprecations_hidden


@dataclass(frozen=True)
class TRLStage:
    """One TRL trainer as a stage uses it: ``trainer_cls`` (e.g. ``trl.SFTTrainer``) configured by ``config_cls``
    (``trl.SFTConfig``) with the stage's own ``settings`` (learning rate, epochs, batch size, scheduler, ...),
    its metrics named ``<name>/...``, and the TRL log keys copied into them besides the loss (``log_keys``:
    ``rewards/margins`` -> ``<name>/margins``)."""

    name: str
    trainer_cls: type
    config_cls: type[TrainingArguments]
    settings: dict
    log_keys: tuple[str, ...] = ()


@dataclass(frozen=True)
class TRLOptions:
    """Where and how a TRL run runs, the same for SFT and DPO: ``out_dir`` (TRL's scratch ``<name>_tmp`` goes
    there), the ``seed``, ``lora`` (``policy.lora``: an adapter when enabled) and ``autocast`` (``policy.autocast``,
    bf16 mixed precision), ``save_to`` (a directory for the trained model and the tokenizer, written by TRL's
    ``save_model``, which every launched process calls: under FSDP / ZeRO-3 it gathers the full weights, and rank 0
    writes), ``log(row)`` for each metric row and ``progress(step, total, info)`` after every optimizer step."""

    out_dir: str | Path
    seed: int = 0
    lora: LoRAConfig | None = None
    autocast: str = "none"
    save_to: str | Path | None = None
    log: Callable[[dict], None] | None = None
    progress: Callable[[int, int, str], None] | None = None


@dataclass
class TRLRun:
    """What a TRL run returns: the trained model (``trainer.model``), final mean loss, steps, log rows."""

    model: object
    train_loss: float
    steps: int
    history: list[dict]


class _LogRows(TrainerCallback):
    """Each TRL log line with a loss -> ``{<name>/step, <name>/loss, <name>/<key tail>...}``, kept and passed on."""

    def __init__(self, name: str, keys: tuple[str, ...], log: Callable[[dict], None] | None):
        self.name, self.keys, self.log = name, keys, log
        self.history: list[dict] = []

    def on_log(self, _args, state, control, logs=None, **kw):
        if logs and "loss" in logs:
            row = {f"{self.name}/step": state.global_step, f"{self.name}/loss": float(logs["loss"])}
            for key in self.keys:
                if key in logs:
                    row[f"{self.name}/{key.split('/')[-1]}"] = float(logs[key])
            self.history.append(row)
            if self.log:
                self.log(row)


class _Progress(TrainerCallback):
    """Reports ``progress(step, total_steps, info)`` after every optimizer step (info: the last logged loss)."""

    def __init__(self, progress: Callable[[int, int, str], None]):
        self.progress, self.info = progress, ""

    def on_train_begin(self, _args, state, control, **kw):
        self.progress(state.global_step, state.max_steps, self.info)

    def on_log(self, _args, state, control, logs=None, **kw):
        if logs and "loss" in logs:
            self.info = f"loss {float(logs['loss']):.4f}"

    def on_step_end(self, _args, state, control, **kw):
        self.progress(state.global_step, state.max_steps, self.info)


def _no_checkpointing(config_cls: type[TrainingArguments]) -> dict[str, bool]:
    """Activation checkpointing off, under the flag's current name.

    TRL turns it on by default; for our small models it only costs compute. transformers >= 5 renamed ``gradient_checkpointing`` to
    ``activation_checkpointing`` and warns (FutureWarning) when only the old name is set."""
    name = ("activation_checkpointing" if "activation_checkpointing" in config_cls.__dataclass_fields__
            else "gradient_checkpointing")
    return {name: False}


def training_args(config_cls: type[TrainingArguments], model, out_dir: str | Path, *, name: str, seed: int,
                  settings: dict, autocast: str = "none") -> TrainingArguments:
    """``config_cls`` (``trl.SFTConfig``, ``trl.DPOConfig``) with the shared arguments plus ``settings``;
    bfloat16 mixed precision for bf16 weights or ``autocast="bf16"`` (``policy.autocast``)."""
    param = next(model.parameters())
    return config_cls(
        output_dir=str(Path(out_dir) / f"{name}_tmp"),
        gradient_accumulation_steps=1,
        weight_decay=0.0,
        **_no_checkpointing(config_cls),
        save_strategy="no",
        report_to=[],
        seed=seed,
        data_seed=seed,
        use_cpu=not param.is_cuda,
        bf16=param.dtype == torch.bfloat16 or autocast == "bf16",
        disable_tqdm=True,
        dataloader_num_workers=0,
        ddp_find_unused_parameters=False,  # launched as N processes: every weight takes part in the forward pass
        **settings,
    )


def run_trl(stage: TRLStage, model, tokenizer, rows: list[dict], options: TRLOptions, **trainer_kwargs) -> TRLRun:
    """Train ``model`` on ``rows`` with the ``stage``'s TRL trainer, its settings passed to its config class with
    the shared ones (:func:`training_args`); ``options``: where and how (:class:`TRLOptions`; its ``lora`` is the
    caller's to turn into ``peft_config``). ``trainer_kwargs`` go to the trainer (``ref_model``, ``peft_config``).
    """
    logging.getLogger("transformers").setLevel(logging.ERROR)
    datasets.disable_progress_bars()
    autocast, save_to = options.autocast, options.save_to
    args = training_args(stage.config_cls, model, options.out_dir, name=stage.name, seed=options.seed,
                         settings=stage.settings, autocast=autocast)
    if autocast == "bf16" and args.use_cpu:
        float32_attention_on_cpu(model)  # bf16 linear layers, float32 attention (policy.load.mixed_precision)
    logger = _LogRows(stage.name, stage.log_keys, options.log)
    callbacks = [logger] + ([_Progress(options.progress)] if options.progress is not None else [])
    with others_deprecations_hidden():  # TRL reads a name transformers 5 deprecated, every step
        trainer = stage.trainer_cls(model=model, args=args, train_dataset=datasets.Dataset.from_list(rows),
                                    processing_class=tokenizer, callbacks=callbacks, **trainer_kwargs)
        trainer.remove_callback(PrinterCallback)
        result = trainer.train()
    tokenizer.padding_side = "left"  # TRL may switch it; generation needs left padding
    if save_to is not None:
        trainer.save_model(str(save_to))
        if trainer.is_world_process_zero():
            (Path(save_to) / "training_args.bin").unlink(missing_ok=True)  # a model directory, nothing else
    return TRLRun(model=trainer.model, train_loss=float(result.training_loss), steps=int(result.global_step),
                  history=logger.history)
