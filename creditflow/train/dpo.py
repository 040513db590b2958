"""Agent optimisation with DPO (RRO paper §3.4) through TRL's DPOTrainer.

    L_DPO(π_θ) = −E[ log σ( β log π_θ(y_w|x)/π_ref(y_w|x) − β log π_θ(y_l|x)/π_ref(y_l|x) ) ]

π_θ starts from π_SFT and the reference is π_SFT (§3.4: "continuously train the supervised fine-tuned
model π_SFT through DPO"). The reference is a frozen copy of the model as given (full fine-tuning) or,
with LoRA, the same model with the adapter disabled. Defaults are the paper's (§4.3): β 0.1, 3 epochs,
batch 32, constant learning rate 3e-6 after a 0.1 warmup ratio; they are for 7B-class models and every
one is configurable (the tiny CPU default needs a larger learning rate).
"""

from __future__ import annotations

import copy
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from creditflow.errors import UserError
from creditflow.process.preferences import TRL_COLUMNS


@dataclass
class DPOSettings:
    beta: float = 0.1  # §4.3 / DPO default
    epochs: float = 3.0  # §4.3: 3 epochs
    lr: float = 3e-6  # §4.3: constant 3e-6
    batch_size: int = 32  # §4.3: 32
    warmup: float = 0.1  # §4.3: warmup ratio 0.1
    scheduler: str = "constant_with_warmup"  # §4.3: "constant learning rate" with warmup
    max_length: int = 1024
    lora: bool = False
    lora_r: int = 16
    lora_alpha: int = 32
    lora_dropout: float = 0.05
    lora_target_modules: str = "all-linear"
    seed: int = 0


def run_dpo(model, tokenizer, pairs: list[dict], out_dir: str | Path, settings: DPOSettings | None = None,
            ref_model=None, log: Callable[[dict], None] | None = None):
    """Train ``model`` (π_SFT) on preference ``pairs``; returns ``(trained_model, metrics)``.

    ``ref_model`` defaults to a frozen copy of ``model`` (or, with LoRA, the adapter-disabled model).
    With LoRA the adapter is merged into the returned model, so it saves and generates like any other.
    """
    import datasets
    from datasets import Dataset
    from transformers import PrinterCallback, TrainerCallback
    from trl import DPOConfig, DPOTrainer

    s = settings or DPOSettings()
    if not pairs:
        raise UserError("DPO: no preference pairs to train on (the collection produced none)")
    logging.getLogger("transformers").setLevel(logging.ERROR)
    datasets.disable_progress_bars()
    param = next(model.parameters())
    # TRL turns checkpointing on by default; off here (small models). transformers >= 5 renamed the flag.
    no_ckpt = ({"activation_checkpointing": False} if "activation_checkpointing" in DPOConfig.__dataclass_fields__
               else {"gradient_checkpointing": False})
    args = DPOConfig(
        output_dir=str(Path(out_dir) / "dpo_tmp"),
        beta=s.beta,
        num_train_epochs=s.epochs,
        learning_rate=s.lr,
        per_device_train_batch_size=s.batch_size,
        gradient_accumulation_steps=1,
        lr_scheduler_type=s.scheduler,
        warmup_steps=s.warmup,  # < 1: a ratio of the total steps (transformers >= 5)
        weight_decay=0.0,
        max_length=s.max_length,
        **no_ckpt,
        logging_steps=1,
        save_strategy="no",
        report_to=[],
        seed=s.seed,
        data_seed=s.seed,
        use_cpu=not param.is_cuda,
        bf16=param.dtype.__repr__() == "torch.bfloat16",
        disable_tqdm=True,
        dataloader_num_workers=0,
    )
    peft_config = None
    if s.lora:
        from peft import LoraConfig

        peft_config = LoraConfig(r=s.lora_r, lora_alpha=s.lora_alpha, lora_dropout=s.lora_dropout,
                                 target_modules=s.lora_target_modules, task_type="CAUSAL_LM")
        ref_model = None  # reference = the model with the adapter disabled (= π_SFT)
    elif ref_model is None:
        ref_model = copy.deepcopy(model).eval()  # π_ref = π_SFT, frozen
        for p in ref_model.parameters():
            p.requires_grad_(False)
    history: list[dict] = []

    class _Log(TrainerCallback):
        def on_log(self, _args, state, control, logs=None, **kw):
            if logs and "loss" in logs:
                row = {"dpo/step": state.global_step, "dpo/loss": float(logs["loss"])}
                for key in ("rewards/accuracies", "rewards/margins", "rewards/chosen", "rewards/rejected"):
                    if key in logs:
                        row[f"dpo/{key.split('/')[1]}"] = float(logs[key])
                history.append(row)
                if log:
                    log(row)

    data = Dataset.from_list([{c: p[c] for c in TRL_COLUMNS} for p in pairs])
    trainer = DPOTrainer(model=model, ref_model=ref_model, args=args, train_dataset=data,
                         processing_class=tokenizer, callbacks=[_Log()], peft_config=peft_config)
    trainer.remove_callback(PrinterCallback)
    result = trainer.train()
    trained = trainer.model
    if s.lora:
        trained = trained.merge_and_unload()
    tokenizer.padding_side = "left"  # TRL may switch it; generation needs left padding
    trained.eval()
    metrics = {"dpo/train_loss": float(result.training_loss), "dpo/pairs": len(pairs),
               "dpo/steps": int(result.global_step), "dpo/history": history}
    last = next((h for h in reversed(history) if "dpo/accuracies" in h), None)
    if last:
        metrics["dpo/final_accuracy"] = last["dpo/accuracies"]
        metrics["dpo/final_margin"] = last.get("dpo/margins")
    return trained, metrics
