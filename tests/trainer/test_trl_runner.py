"""The shared TRL wrapper: the arguments every SFT / DPO run gets."""

import warnings

import torch
import trl

from creditflow.trainer.trl_runner import training_args


def test_training_args_are_shared_and_raise_no_deprecation_warning(tmp_path):
    model = torch.nn.Linear(2, 2)
    with warnings.catch_warnings():
        warnings.simplefilter("error", FutureWarning)  # e.g. the deprecated gradient_checkpointing name
        sft = training_args(trl.SFTConfig, model, tmp_path, name="sft", seed=7,
                            settings=dict(learning_rate=1e-3, completion_only_loss=True))
        dpo = training_args(trl.DPOConfig, model, tmp_path, name="dpo", seed=7, settings=dict(beta=0.1))
    for args in (sft, dpo):
        assert not args.gradient_checkpointing  # TRL turns it on by default; off for our small models
        assert args.seed == args.data_seed == 7 and args.use_cpu and not args.bf16
        assert args.save_strategy == "no" and args.report_to == [] and args.disable_tqdm
    assert sft.output_dir == str(tmp_path / "sft_tmp") and sft.learning_rate == 1e-3 and sft.completion_only_loss
    assert dpo.output_dir == str(tmp_path / "dpo_tmp") and dpo.beta == 0.1


def test_peft_and_trl_deprecations_of_transformers_names_stay_quiet(tmp_path, tiny_model_dir):
    """Issue 74 part 6: PEFT's wrap and TRL's steps read ``is_gradient_checkpointing``, which transformers 5
    deprecated; creditflow's calls hide that FutureWarning (and only that one)."""
    from creditflow.config import LoRAConfig
    from creditflow.policy import lora
    from creditflow.policy.load import load_policy
    from creditflow.trainer.trl_runner import TRLOptions, TRLStage, run_trl

    model, tok = load_policy(tiny_model_dir, "cpu")
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        wrapped = lora.wrap(model, LoRAConfig(), tiny_model_dir)
        rows = [{"prompt": "go", "completion": " up"}] * 4
        stage = TRLStage("sft", trl.SFTTrainer, trl.SFTConfig,
                         settings=dict(max_steps=1, per_device_train_batch_size=2, completion_only_loss=True))
        run_trl(stage, wrapped, tok, rows, TRLOptions(tmp_path, seed=0))
        warnings.warn("`is_activation_checkpointing` stays visible", FutureWarning)
    messages = [str(w.message) for w in seen if issubclass(w.category, FutureWarning)]
    assert not [m for m in messages if "is_gradient_checkpointing" in m]
    assert "`is_activation_checkpointing` stays visible" in messages
