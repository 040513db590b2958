"""SmolLM2-135M-Instruct (LLaMA architecture, a 49k-token BPE tokenizer, its own ChatML chat template with a
default system turn) through the paths the tiny policy takes: `export --from-gguf`, the conversation layout's
token-exact prompts, SFT, a RewardFlow step, LoRA, eval and export, at tiny budgets (issue 74)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

import creditflow
from creditflow.cli import main
from creditflow.config import build_config
from creditflow.policy import gguf as gguf_module
from creditflow.policy.gguf import RECORD
from creditflow.policy.load import load_policy
from creditflow.policy.prompts import Turn
from creditflow.envs.configured import env_factory
from creditflow.policy.backends.factory import chat_encoder
from creditflow.recipes.sections import engine_settings
from creditflow.rollout.factory import make_engine
from creditflow.rollout.engine import TaskSpec
from creditflow.trainer.sequences import collate, rows_from

from .conftest import GGUF_SHA256

ROOT = Path(__file__).resolve().parents[2]


def cli(*args):
    proc = subprocess.run([sys.executable, "-m", "creditflow", *args], capture_output=True, text=True, cwd=ROOT,
                          timeout=600)
    return proc.returncode, proc.stdout, proc.stderr


def one_line_error(stderr: str) -> str:
    lines = [line for line in stderr.strip().splitlines() if line.strip()]
    assert "Traceback" not in stderr and len(lines) == 1 and lines[0].startswith("error: "), stderr
    return lines[0]


# -- export --from-gguf -----------------------------------------------------------------------------------------


def run_main(argv, capsys) -> tuple[int, str]:
    """``creditflow ARGV`` in this process: (exit code, stderr)."""
    with pytest.raises(SystemExit) as exc:
        main(argv)
    return exc.value.code, capsys.readouterr().err


def test_bad_gguf_input_is_one_line_and_writes_nothing(tmp_path, capsys):
    text = tmp_path / "notes.gguf"
    text.write_text("not a model")
    out = tmp_path / "out"
    for args, needle in [
        (["export", "--from-gguf", str(tmp_path / "absent.gguf"), "--out", str(out)], "does not exist"),
        (["export", "--from-gguf", str(text), "--out", str(out)], "is not a GGUF file"),
        (["export", "--from-gguf", str(tmp_path), "--out", str(out)], "is a directory"),
        (["export", "--out", str(out)], "exactly one of SOURCE and --from-gguf"),
        (["export", str(tmp_path), "--from-gguf", str(text), "--out", str(out)], "exactly one of SOURCE and --from-gguf"),
        (["export", "--from-gguf", str(text), "--out", str(tmp_path)], "already exists"),
        (["export", "--from-gguf", str(text), "--out", str(out), "--dtype", "int4"], "--dtype must be one of"),
    ]:
        code, err = run_main(args, capsys)
        assert code == 2 and needle in one_line_error(err), (args, err)
    assert not out.exists()


def test_a_truncated_gguf_file_or_no_gguf_package_is_one_line(tmp_path, capsys, monkeypatch, smollm2_gguf):
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(smollm2_gguf.read_bytes()[:1_000_000])
    code, err = run_main(["export", "--from-gguf", str(cut), "--out", str(tmp_path / "a")], capsys)
    assert code == 2 and "transformers cannot read it" in one_line_error(err)
    real_find_spec = gguf_module.importlib.util.find_spec
    monkeypatch.setattr(gguf_module.importlib.util, "find_spec",
                        lambda name, *a: None if name == "gguf" else real_find_spec(name, *a))
    code, err = run_main(["export", "--from-gguf", str(smollm2_gguf), "--out", str(tmp_path / "b")], capsys)
    assert code == 2 and "pip install 'creditflow[gguf]'" in one_line_error(err)
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


def test_a_gguf_file_given_as_a_model_says_how_to_convert_it(tmp_path, capsys):
    fake = tmp_path / "m.gguf"
    fake.write_bytes(b"GGUF" + bytes(60))
    code, err = run_main(["eval", "--model", str(fake), "--episodes", "1"], capsys)
    assert code == 2 and f"creditflow export --from-gguf {fake} --out DIR" in one_line_error(err)


@pytest.mark.slow
def test_the_converted_model_is_the_gguf_files_in_any_dtype(tmp_path, smollm2_dir, smollm2_gguf):
    record = json.loads((smollm2_dir / RECORD).read_text())
    assert record["sha256"] == GGUF_SHA256 and record["architecture"] == "LlamaForCausalLM"
    config = json.loads((smollm2_dir / "config.json").read_text())
    assert "quantization_config" not in config  # dequantised: a plain model, as vLLM and PEFT expect
    assert (config["model_type"], config["num_hidden_layers"], config["vocab_size"]) == ("llama", 30, 49152)
    code, out, err = cli("export", "--from-gguf", str(smollm2_gguf), "--out", str(tmp_path / "bf16"),
                         "--dtype", "bfloat16")
    assert code == 0 and "exported" in out, err
    f32 = load_file(smollm2_dir / "model.safetensors")
    bf16 = load_file(tmp_path / "bf16" / "model.safetensors")
    assert f32.keys() == bf16.keys() and all(bf16[k].dtype == torch.bfloat16 for k in bf16)
    assert all(torch.equal(f32[k].to(torch.bfloat16), bf16[k]) for k in f32)  # the same dequantised values
    assert (tmp_path / "bf16" / "chat_template.jinja").read_text() == (smollm2_dir / "chat_template.jinja").read_text()


def test_smollm2_answers_sensibly(smollm2_dir):
    model, tok = load_policy(smollm2_dir, "cpu")
    ids = chat_encoder(tok)([{"role": "user", "content": "What is the capital of France?"}])
    assert tok.decode(ids).startswith("<|im_start|>system\nYou are a helpful AI assistant named SmolLM")
    out = model.generate(torch.tensor([ids]), max_new_tokens=12, do_sample=False)
    assert "Paris" in tok.decode(out[0, len(ids):])


# -- the conversation layout: the trainer's tokens against a fresh render ----------------------------------------


def test_conversation_tokens_are_the_chat_templates_render_of_each_turn(smollm2_dir):
    """The engine builds turn t+1's prompt from turn t's ids + the sampled ids + the template's continuation,
    never re-tokenising. A fresh render of the same conversation (the responses as text) equals those ids
    except where a sampled response is not the canonical BPE tokenisation of its own text: there, and only
    there, the render has the canonical ids (the documented difference, docs/formats.md). The training row's
    loss mask covers exactly the sampled ids: no system, user or template token."""
    cfg = build_config(None, [f"policy.model={smollm2_dir}", "rollout.history=conversation", "rollout.max_steps=3",
                              "generation.max_new_tokens=12", "generation.temperature=1.0", "policy.device=cpu",
                              "seed=3"])
    model, tok = load_policy(smollm2_dir, "cpu")
    factory = env_factory(cfg.env, cfg.rollout.max_steps)
    engine = make_engine(engine_settings(cfg), model, tok, factory)
    torch.manual_seed(3)
    trajs = engine.rollout([TaskSpec("sokoban/7", 7)], 2)
    assert trajs and all(len(t.steps) == 3 for t in trajs)
    _, info = factory().reset(seed=7)
    task, actions = info["task"], info["admissible_actions"]  # Sokoban's: the same at every step
    differing = 0
    for traj in trajs:
        steps = traj.steps
        for t, step in enumerate(steps):
            turns = [Turn(s.observation, actions, s.action, s.response) for s in steps[:t]]
            messages = engine.prompts.chat(task, turns, step.observation, actions)
            fresh = engine.chat.encode(messages)
            canonical = _canonical(tok, steps[:t], step.prompt_ids)
            differing += canonical != step.prompt_ids
            assert fresh == canonical, f"turn {t + 1} of {traj.traj_id}"
        for step in steps:
            step.advantage = 1.0
    rows = rows_from(trajs, "conversation")
    batch = collate(rows, tok.pad_token_id, "cpu")
    for i, (row, traj) in enumerate(zip(rows, trajs)):
        sampled = set()
        for step in traj.steps:
            lo = len(step.prompt_ids)
            sampled |= set(range(lo, lo + len(step.response_ids)))
            assert row.ids[lo:lo + len(step.response_ids)] == step.response_ids
        trained = {p + 1 for p in torch.nonzero(batch["mask"][i]).flatten().tolist()}  # logits at p: token p+1
        assert trained == sampled
    print(f"responses whose sampled ids are not their text's canonical ids: {differing} prompts affected")


def _canonical(tok, earlier, prompt_ids):
    """``prompt_ids`` with every earlier turn's sampled response replaced by the canonical ids of its text."""
    out, pos = [], 0
    for step in earlier:
        lo = len(step.prompt_ids)
        out += prompt_ids[pos:lo]
        ids = step.response_ids
        eos = [tok.eos_token_id] if ids and ids[-1] == tok.eos_token_id else []
        out += tok.encode(step.response, add_special_tokens=False) + eos
        pos = lo + len(ids)
    return out + prompt_ids[pos:]


# -- every command takes the converted directory ---------------------------------------------------------------

TINY = ["rollout.tasks_per_step=1", "rollout.group_size=2", "rollout.max_steps=2", "generation.max_new_tokens=8",
        "rl.eval_episodes=1", "rl.eval_every=0", "rl.steps=1", "rl.save_every=1", "tensorboard=false",
        "policy.device=cpu", "rl.entropy_coef=0.01"]  # zero-shot groups are all-fail: the entropy term moves the weights


@pytest.mark.slow
def test_sft_rewardflow_lora_export_eval_and_rro_with_smollm2(tmp_path, smollm2_dir):
    """SFT on 4 demonstrations, one RewardFlow step from π_SFT, one LoRA step, export of the LoRA checkpoint
    (merged), eval of the export and an RRO collection from π_SFT: the same commands as the tiny policy's, on the
    converted directory."""
    sft = creditflow.sft(["sft.demos=4", "sft.epochs=1", "sft.batch_size=2", "sft.max_length=768", "sft.lr=1e-5",
                          "tensorboard=false", "policy.device=cpu", "rl.eval_episodes=1", "rollout.max_steps=2",
                          "generation.max_new_tokens=8"], model=smollm2_dir, out=tmp_path / "sft")
    sft_model = sft.run_dir / "sft_model"
    assert sft.metrics["eval/episodes"] == 1  # π_SFT's held-out success, evaluated when SFT ends
    assert (sft_model / "config.json").is_file() and (sft_model / "creditflow_inference.json").is_file()
    _, tok_sft = load_policy(sft_model, "cpu")
    assert tok_sft.chat_template == load_policy(smollm2_dir, "cpu")[1].chat_template  # the template travels

    rl = creditflow.train(["rl.algo=rewardflow", "rl.lr=1e-6", *TINY], model=sft_model, out=tmp_path / "rf")
    rows = [json.loads(line) for line in (rl.run_dir / "metrics.jsonl").read_text().splitlines()]
    step = next(r for r in rows if r.get("step") == 1 and "train/loss" in r)
    assert step["train/episodes"] == 2 and torch.isfinite(torch.tensor(step["train/loss"]))
    assert step["train/grad_norm"] > 0 and "credit/graph_nodes" in step
    assert (rl.run_dir / "checkpoints" / "step_000001" / "model.safetensors").is_file()

    lora = creditflow.train(["rl.algo=rewardflow", "policy.lora=true", "rl.lr=1e-4", *TINY],
                            model=smollm2_dir, out=tmp_path / "lora")
    ckpt = lora.run_dir / "checkpoints" / "step_000001"
    assert (ckpt / "adapter_model.safetensors").is_file() and not (ckpt / "model.safetensors").exists()

    code, out, err = cli("export", str(lora.run_dir), "--out", str(tmp_path / "merged"))
    assert code == 0, err
    merged = load_file(tmp_path / "merged" / "model.safetensors")
    base = load_file(smollm2_dir / "model.safetensors")
    changed = [k for k in base if not torch.equal(base[k], merged[k])]
    assert changed and all("proj" in k for k in changed)  # LoRA's targets moved, nothing else

    result = creditflow.evaluate(["policy.device=cpu", "generation.max_new_tokens=8", "rollout.max_steps=2"],
                                 model=tmp_path / "merged", episodes=2)
    assert result.metrics["eval/episodes"] == 2 and 0.0 <= result.metrics["eval/success_rate"] <= 1.0

    code, _, err = cli("rro", "collect", "--model", str(sft_model), "--out", str(tmp_path / "rro"), "--tasks", "1",
                       "--candidates", "2", "--mc-rollouts", "1", "rollout.max_steps=2", "generation.max_new_tokens=8",
                       "policy.device=cpu")
    assert code == 0, err
    totals = json.loads((tmp_path / "rro" / "preferences" / "summary.json").read_text())["totals"]
    assert totals["tasks"] == 1 and totals["steps"] >= 1 and totals["samples"] >= totals["steps"]


@pytest.mark.slow
def test_a_smollm2_step_with_no_valid_action_warns_and_skips_its_backward_pass(tmp_path, smollm2_dir, monkeypatch,
                                                                              capsys):
    """Issue 90: zero-shot SmolLM2 with one token per turn never writes an action, so every group is all-fail and
    every GRPO advantage 0. The step says so, with the likely cause, and runs no forward or backward pass for its
    update (nor for the KL reference: the policy is still its reference)."""
    from creditflow.trainer.forward import Forward

    calls = []
    real = Forward.trained_logits
    monkeypatch.setattr(Forward, "trained_logits", lambda *a, **k: calls.append(1) or real(*a, **k))
    code, err = run_main(["train", "--model", str(smollm2_dir), "--out", str(tmp_path / "empty"), "rl.algo=grpo",
                          "rollout.tasks_per_step=1", "rollout.group_size=2", "rollout.max_steps=2",
                          "generation.max_new_tokens=1", "rl.eval_episodes=1", "rl.steps=1", "rl.save_every=0",
                          "logging.report_to=none", "policy.device=cpu"], capsys)
    assert code == 0, err
    row = [json.loads(line) for line in (tmp_path / "empty" / "metrics.jsonl").read_text().splitlines()][1]
    assert row["train/invalid_frac"] == 1.0 and row["train/update_skipped"] == 1.0 and row["train/grad_norm"] == 0
    assert not calls
    warning = [line for line in err.splitlines() if line.startswith("warning: step 1")]
    assert warning and "carries no learning signal (every advantage 0, no rollout succeeded, 100% invalid actions); " \
                       "its forward and backward pass were skipped" in warning[0]
    assert "Likely cause: the policy's responses are mostly not actions the env takes" in warning[0]
