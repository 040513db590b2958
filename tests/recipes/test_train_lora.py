"""``creditflow train policy.lora=true``: adapter-only checkpoints, an exact resume, eval and export of a LoRA
checkpoint, LoRA SFT through the CLI, and the settings a resume may not change."""

import json

import pytest
import torch
from safetensors.torch import load_file

from creditflow.cli import main
from creditflow.config import build_config
from creditflow.errors import UserError
from creditflow.policy.load import load_policy
from creditflow.recipes.resolve import config_for_resume
from creditflow.recipes.train import run_train
from creditflow.trainer.metrics import read_metrics

# untrained tiny policy: every action is invalid, so all advantages are 0; the entropy bonus gives every step
# a gradient, and with it a KL term and an optimizer state worth resuming
SMALL = ["rollout.tasks_per_step=2", "rollout.group_size=3", "rl.eval_episodes=2", "rl.eval_every=1",
         "generation.max_new_tokens=6", "rollout.max_steps=3", "rl.lr=1e-2", "tensorboard=false", "rl.save_every=1",
         "rl.minibatches=2", "rl.kl_coef=0.05", "rl.entropy_coef=0.05", "policy.device=cpu", "policy.lora=true",
         "policy.lora.r=2", "policy.lora.alpha=4"]


def run(tmp_path, name, steps, model, extra=()):
    cfg = build_config(None, [f"out_dir={tmp_path / name}", f"policy.model={model}", f"rl.steps={steps}", *SMALL,
                              *extra])
    return run_train(cfg, log=lambda *_: None)


def strip_times(rows):
    return [{k: v for k, v in r.items() if not k.startswith("time/")} for r in rows]


def test_a_lora_run_trains_and_saves_only_the_adapter(tmp_path, tiny_model_dir):
    out, trainer, _ = run(tmp_path, "lora", 2, tiny_model_dir)
    assert trainer.ref_model is None  # the KL reference is the policy with its adapter off: no copy
    rows = read_metrics(out / "metrics.jsonl")
    assert [r["step"] for r in rows] == [0, 1, 2] and rows[2]["train/kl"] > 0  # the adapter moved away from π_SFT
    ckpt = out / "checkpoints" / "step_000002"
    assert (ckpt / "adapter_model.safetensors").exists() and not (ckpt / "model.safetensors").exists()
    adapter = load_file(ckpt / "adapter_model.safetensors")
    assert adapter and all(".lora_A." in k or ".lora_B." in k for k in adapter)
    size = (ckpt / "adapter_model.safetensors").stat().st_size
    assert size < 0.2 * (tiny_model_dir / "model.safetensors").stat().st_size
    assert json.loads((ckpt / "adapter_config.json").read_text())["base_model_name_or_path"] == \
        str(tiny_model_dir.resolve())
    optimizer = torch.load(ckpt / "optimizer.pt", weights_only=False)
    assert len(optimizer["state"]) == len(adapter)  # AdamW moments for the adapter's parameters only
    base = load_policy(tiny_model_dir, "cpu")[0].state_dict()
    trained = {k.replace(".base_layer.", "."): v for k, v in trainer.model.get_base_model().state_dict().items()
               if ".lora_" not in k}
    assert all(torch.equal(trained[k], base[k]) for k in base)  # the base weights never changed


def test_a_lora_run_resumes_exactly(tmp_path, tiny_model_dir):
    full_out, _, _ = run(tmp_path, "full", 3, tiny_model_dir)
    part_out, _, _ = run(tmp_path, "part", 1, tiny_model_dir)
    run_train(config_for_resume(part_out, ["rl.steps=3"]), resume=True, log=lambda *_: None)
    full = strip_times(read_metrics(full_out / "metrics.jsonl"))
    part = strip_times(read_metrics(part_out / "metrics.jsonl"))
    assert [r["step"] for r in part] == [0, 1, 2, 3]
    assert part == full
    want = load_file(full_out / "checkpoints" / "step_000003" / "adapter_model.safetensors")
    got = load_file(part_out / "checkpoints" / "step_000003" / "adapter_model.safetensors")
    assert want.keys() == got.keys() and all(torch.equal(want[k], got[k]) for k in want)


def test_a_lora_run_in_the_conversation_layout(tmp_path, tiny_model_dir):
    """The HF backend's prefix-cached generation runs through the PEFT model too."""
    out, _, _ = run(tmp_path, "conv", 2, tiny_model_dir, ["rollout.history=conversation", "policy.template=compact"])
    rows = read_metrics(out / "metrics.jsonl")
    assert [r["step"] for r in rows] == [0, 1, 2] and rows[2]["train/kl"] > 0


def test_a_resume_keeps_the_lora_settings(tmp_path, tiny_model_dir):
    out, _, _ = run(tmp_path, "kept", 1, tiny_model_dir)
    with pytest.raises(UserError, match=r"policy.lora.r cannot change in a resumed run .*policy.lora.r=2"):
        config_for_resume(out, ["rl.steps=2", "policy.lora.r=8"])
    with pytest.raises(UserError, match="policy.lora.enabled cannot change in a resumed run"):
        config_for_resume(out, ["rl.steps=2", "policy.lora=false"])


def test_eval_and_export_of_a_lora_checkpoint(tmp_path, tiny_model_dir, capsys):
    out, _, _ = run(tmp_path, "ev", 1, tiny_model_dir)
    ckpt = out / "checkpoints" / "step_000001"
    merged = tmp_path / "merged"
    with pytest.raises(SystemExit) as exc:
        main(["export", str(ckpt), "--out", str(merged)])
    assert exc.value.code == 0
    assert (merged / "config.json").exists() and not (merged / "adapter_config.json").exists()
    capsys.readouterr()
    shown = {}
    for model in (ckpt, merged, out):  # a run directory stands for its newest checkpoint
        with pytest.raises(SystemExit) as exc:
            main(["eval", "--model", str(model), "--episodes", "2", "generation.max_new_tokens=6",
                  "rollout.max_steps=3"])
        assert exc.value.code == 0
        shown[model] = json.loads(capsys.readouterr().out)
    assert shown[ckpt] == shown[merged] == shown[out] and "eval/success_rate" in shown[ckpt]
    with pytest.raises(SystemExit) as exc:
        main(["export", str(ckpt), "--out", str(merged)])
    assert exc.value.code == 2 and "already exists" in capsys.readouterr().err


def test_lora_sft_through_the_cli_saves_a_plain_model(tmp_path, tiny_model_dir):
    out = tmp_path / "sft"
    with pytest.raises(SystemExit) as exc:
        main(["sft", "--model", str(tiny_model_dir), "--out", str(out), "sft.demos=6", "sft.epochs=1",
              "sft.batch_size=4", "sft.lr=1e-2", "policy.lora=true", "policy.lora.r=2",
              "policy.lora.target_modules=[q_proj, v_proj]"])
    assert exc.value.code in (0, None)
    model, _ = load_policy(out / "sft_model", "cpu")
    base = load_policy(tiny_model_dir, "cpu")[0].state_dict()
    changed = {k for k, v in model.state_dict().items() if not torch.equal(v, base[k])}
    assert changed and all(k.endswith(("q_proj.weight", "v_proj.weight")) for k in changed)
