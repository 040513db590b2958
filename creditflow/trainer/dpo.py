"""Agent optimisation with DPO (RRO paper §3.4) through TRL's DPOTrainer.

    L_DPO(π_θ) = −E[ log σ( β log π_θ(y_w|x)/π_ref(y_w|x) − β log π_θ(y_l|x)/π_ref(y_l|x) ) ]

π_θ starts from π_SFT and the reference is π_SFT (§3.4: "continuously train the supervised fine-tuned
model π_SFT through DPO"). The reference is a frozen copy of the model as given (full fine-tuning) or,
with LoRA, the same model with the adapter disabled. Defaults are the paper's (§4.3): β 0.1, 3 epochs,
batch 32, constant learning rate 3e-6 after a 0.1 warmup ratio (``rro.dpo``,
:class:`creditflow.config.RRODPOConfig`); they are for 7B-class models and every one is configurable (the
tiny CPU default needs a larger learning rate).
"""

from __future__ import annotations

import copy
from dataclasses import replace

import trl

from creditflow.config import RRODPOConfig
from creditflow.errors import UserError
from creditflow.policy import lora as policy_lora
from creditflow.pairs.preferences import TRL_COLUMNS
from creditflow.trainer.trl_runner import TRLOptions, TRLStage, run_trl
from creditflow.world import current, sharded_launch


def train_dpo(model, tokenizer, pairs: list[dict], cfg: RRODPOConfig, options: TRLOptions, ref_model=None):
    """Train ``model`` (π_SFT) on preference ``pairs`` with settings ``cfg`` (``cfg.rro.dpo``); returns
    ``(trained_model, metrics)``. ``options``: the run's directory, seed, LoRA, autocast, callbacks and
    ``save_to`` (:class:`~creditflow.trainer.trl_runner.TRLOptions`).

    ``options.lora`` (``policy.lora``, when enabled): train a LoRA adapter; the reference is then the
    adapter-disabled model (no copy), and the adapter is merged into the returned model, so it saves and
    generates like any other. Otherwise ``ref_model`` defaults to a frozen copy of ``model``. ``save_to``: write
    the trained (merged) model and the tokenizer there (every launched process calls this; rank 0 writes).
    """
    lora, save_to = options.lora, options.save_to
    if not pairs:
        raise UserError("DPO: no preference pairs to train on (the collection produced none)")
    sharded = sharded_launch()
    if lora is not None and lora.enabled and sharded:
        raise UserError(f"policy.lora.enabled=true with the {sharded} launch config: the adapter is merged after "
                        "training, which needs the whole model on each process; use configs/accelerate/ddp.yaml")
    peft_config = None
    if lora is not None and lora.enabled:
        peft_config = policy_lora.peft_config(lora)
        ref_model = None  # reference = the model with the adapter disabled (= π_SFT)
    elif ref_model is None:
        ref_model = copy.deepcopy(model).eval()  # π_ref = π_SFT, frozen
        for p in ref_model.parameters():
            p.requires_grad_(False)
    stage = TRLStage("dpo", trl.DPOTrainer, trl.DPOConfig, settings=dict(
        beta=cfg.beta, num_train_epochs=cfg.epochs, learning_rate=cfg.lr, per_device_train_batch_size=cfg.batch_size,
        lr_scheduler_type=cfg.scheduler, warmup_steps=cfg.warmup,  # < 1: a ratio of the total steps (transformers >= 5)
        max_length=cfg.max_length, logging_steps=1,
        # RPO: DPO's sigmoid loss + sft_weight x NLL of the chosen response
        **(dict(loss_type=["sigmoid", "sft"], loss_weights=[1.0, cfg.sft_weight]) if cfg.sft_weight > 0 else {})),
        log_keys=("rewards/accuracies", "rewards/margins", "rewards/chosen", "rewards/rejected"))
    trl_options = replace(options, save_to=None) if peft_config is not None else options  # merged and saved below
    run = run_trl(stage, model, tokenizer, [{c: p[c] for c in TRL_COLUMNS} for p in pairs], trl_options,
                  ref_model=ref_model, peft_config=peft_config)
    trained = run.model.merge_and_unload() if peft_config is not None else run.model
    trained.eval()
    if peft_config is not None and save_to is not None and current().main:  # merged (TRL would save the adapter)
        trained.save_pretrained(save_to)
        tokenizer.save_pretrained(save_to)
    metrics = {"dpo/train_loss": run.train_loss, "dpo/pairs": len(pairs), "dpo/steps": run.steps,
               "dpo/history": run.history}
    last = next((h for h in reversed(run.history) if "dpo/accuracies" in h), None)
    if last:
        metrics["dpo/final_accuracy"] = last["dpo/accuracies"]
        metrics["dpo/final_margin"] = last.get("dpo/margins")
    # implicit rewards β·log π_θ/π_ref of the chosen and rejected actions, averaged over the last epoch's steps:
    # a negative chosen reward means DPO lowered the likelihood of the actions it prefers too
    rows = [h for h in run.history if "dpo/chosen" in h and "dpo/rejected" in h]
    if rows:
        tail = rows[-max(1, round(len(rows) / cfg.epochs)):]
        metrics["dpo/last_epoch_chosen"] = sum(h["dpo/chosen"] for h in tail) / len(tail)
        metrics["dpo/last_epoch_rejected"] = sum(h["dpo/rejected"] for h in tail) / len(tail)
    return trained, metrics
