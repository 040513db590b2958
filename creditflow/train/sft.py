"""Supervised fine-tuning on expert trajectories (pi_SFT), with TRL's SFTTrainer.

Demonstrations come from the env's expert (:func:`creditflow.rollout.expert.expert_trajectories`). Each step becomes one conversational prompt/completion example: the
prompt is exactly the chat the rollout engine shows at that step, the completion the expert response.
TRL's ``completion_only_loss`` puts the loss on the response tokens only.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Callable

from creditflow.errors import UserError
from creditflow.policy.prompts import PromptBuilder
from creditflow.rollout.trajectory import Trajectory


def demo_examples(trajectories: list[Trajectory], prompts: PromptBuilder) -> list[dict]:
    """One TRL conversational prompt/completion example per expert step."""
    examples = []
    for traj in trajectories:
        history: list[tuple[str, str]] = []
        for step in traj.steps:
            messages = prompts.messages(step.info.get("task", ""), step.observation, history,
                                        step.info.get("admissible_actions"))
            examples.append({"prompt": messages,
                             "completion": [{"role": "assistant", "content": step.response}]})
            history.append((step.observation, step.action))
    return examples


def run_sft(model, tokenizer, examples: list[dict], out_dir: str | Path, *, epochs: float = 2.0,
            lr: float = 1e-3, batch_size: int = 32, max_length: int = 1024, seed: int = 0,
            log: Callable[[dict], None] | None = None) -> dict:
    """Fine-tune ``model`` in place with TRL's SFTTrainer (loss on completion tokens only)."""
    import datasets
    from datasets import Dataset
    from transformers import PrinterCallback, TrainerCallback
    from trl import SFTConfig, SFTTrainer

    if not examples:
        raise UserError("SFT: no demonstrations (the expert won no episode)")
    logging.getLogger("transformers").setLevel(logging.ERROR)
    datasets.disable_progress_bars()
    args = SFTConfig(
        output_dir=str(Path(out_dir) / "sft_tmp"),
        num_train_epochs=epochs,
        learning_rate=lr,
        per_device_train_batch_size=batch_size,
        gradient_accumulation_steps=1,
        lr_scheduler_type="cosine",
        warmup_steps=0.05,
        weight_decay=0.0,
        max_length=max_length,
        completion_only_loss=True,
        packing=False,
        logging_steps=10,
        save_strategy="no",
        report_to=[],
        seed=seed,
        data_seed=seed,
        use_cpu=not next(model.parameters()).is_cuda,
        bf16=next(model.parameters()).dtype.__repr__() == "torch.bfloat16",
        disable_tqdm=True,
        dataloader_num_workers=0,
    )
    history: list[dict] = []

    class _Log(TrainerCallback):
        def on_log(self, _args, state, control, logs=None, **kw):
            if logs and "loss" in logs:
                row = {"sft/step": state.global_step, "sft/loss": float(logs["loss"])}
                history.append(row)
                if log:
                    log(row)

    trainer = SFTTrainer(model=model, args=args, train_dataset=Dataset.from_list(examples),
                         processing_class=tokenizer, callbacks=[_Log()])
    trainer.remove_callback(PrinterCallback)
    result = trainer.train()
    tokenizer.padding_side = "left"  # TRL may switch it; generation needs left padding
    return {"sft/train_loss": float(result.training_loss), "sft/examples": len(examples),
            "sft/steps": int(result.global_step), "sft/history": history}
