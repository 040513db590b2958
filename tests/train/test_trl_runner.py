"""The shared TRL wrapper: the arguments every SFT / DPO run gets."""

import warnings

import torch
import trl

from creditflow.train.trl_runner import training_args


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
