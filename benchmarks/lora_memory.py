"""LoRA vs full fine-tuning in RL: trainable parameters, peak memory (RSS) and step time.

    python -m benchmarks.lora_memory [--steps 4] [--threads 1]

Two measurements, each configuration in its own process (its peak RSS is its own), one after another:

* **RL run** — ``creditflow train`` on the untrained tiny default policy (0.87M parameters, built once into
  ``runs/lora_bench``), GRPO with the default KL term (rl.kl_coef 0.01: full fine-tuning keeps a frozen
  copy as the reference, LoRA the adapter-disabled policy), 8 tasks x 4 rollouts, ``--steps`` steps, an
  entropy bonus so that every step has a gradient (the untrained policy's actions are all invalid, so
  every advantage is 0). Step times are medians over the steps from ``metrics.jsonl``.
* **RL update on a larger model** — a from-scratch 24M-parameter Qwen2 (hidden 512, 8 layers): the
  trainer's reference log-probs and ``policy_update`` on 16 synthetic decisions of 128 + 8 tokens, via
  :class:`creditflow.trainer.rl.RLTrainer` (its reference and optimizer), ``--steps`` updates. The model
  is where the memory goes, so this shows how the saving scales.

LoRA: r 16, alpha 32, all linear layers (the defaults). Writes ``benchmarks/results/lora_memory.{json,md}``
with machine info and the load average (other jobs share this machine's cores).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import torch


from benchmarks.machine import machine_info
from benchmarks.runner import child_env, module_command
from creditflow.config import build_config
from creditflow.policy import lora
from creditflow.policy.backends.base import SamplingParams
from creditflow.policy.tiny import build_tiny_policy
from creditflow.recipes.sections import rl_run
from creditflow.envs.configured import env_factory
from creditflow.policy.factory import prompt_builder, tiny_vocab_size
from creditflow.rollout.expert import expert_corpus
from creditflow.trainer.rl import RLTrainer, fill_ref_logprobs, policy_update
from creditflow.trainer.sequences import Sample, window_rows
from creditflow.trainer.metrics import read_metrics

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
MODES = {"full": [], "lora": ["policy.lora=true"]}
RL_SETTINGS = ["rollout.tasks_per_step=8", "rollout.group_size=4", "rollout.max_steps=8",
               "generation.max_new_tokens=16", "rl.lr=1e-3", "rl.entropy_coef=0.01", "rl.eval_episodes=2",
               "rl.eval_every=0", "rl.save_every=0", "tensorboard=false", "policy.device=cpu"]
LARGER = dict(hidden_size=512, intermediate_size=1536, num_hidden_layers=8, num_attention_heads=8,
              num_key_value_heads=2)


def tiny_policy(root: Path) -> Path:
    """The tiny default policy (untrained), built once."""
    out = root / "tiny_model"
    if not (out / "config.json").exists():
        cfg = build_config(None, [])
        factory = env_factory(cfg.env, cfg.rollout.max_steps)
        env = factory()
        corpus = expert_corpus(factory, prompt_builder(cfg.policy, cfg.rollout, env), list(range(900_000, 900_400)))
        build_tiny_policy(out, corpus, vocab_size=tiny_vocab_size(cfg.policy, env), seed=0,
                          isolate_chars=env.tokenizer_isolate_chars)
    return out


def child(command: list[str], threads: int) -> dict:
    """Run this script in a child role (``command``); its JSON result (which holds its own peak RSS)."""
    # glibc keeps freed heap memory for reuse, so a process's peak RSS would also record its allocation
    # history; with this threshold every allocation over 64 KiB (every tensor that matters) is a mapping of
    # its own, returned when freed, and the peak RSS follows the peak of live memory
    env = child_env(OMP_NUM_THREADS=str(threads), TOKENIZERS_PARALLELISM="false", MALLOC_MMAP_THRESHOLD_="65536")
    proc = subprocess.run(module_command("benchmarks.lora_memory", *command), stdout=subprocess.PIPE, env=env,
                          text=True)
    if proc.returncode:
        raise SystemExit(f"{command}: exit {proc.returncode}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB


def rss_mib() -> float:
    """Resident memory now (Linux: /proc/self/statm, in pages)."""
    return int(Path("/proc/self/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def role_rl(model_dir: str, mode: str, steps: int, threads: int) -> dict:
    """One ``creditflow train`` run in this process; step-time medians and parameter counts."""
    from creditflow.recipes.train import run_train  # the train recipe (imports the whole stack)

    torch.set_num_threads(threads)
    out = Path(tempfile.mkdtemp(prefix=f"lora_bench_{mode}_"))
    cfg = build_config(None, [f"out_dir={out}", f"policy.model={model_dir}", f"rl.steps={steps}", *RL_SETTINGS,
                              *MODES[mode]])
    _, trainer, _ = run_train(cfg, log=lambda *_: None)
    rows = [r for r in read_metrics(out / "metrics.jsonl") if r.get("step", 0) > 0]
    return {"params": sum(p.numel() for p in trainer.model.parameters()),
            "trainable": sum(p.numel() for p in lora.trainable_parameters(trainer.model)),
            "reference_copy": trainer.ref_model is not None,
            **{k: statistics.median(r[f"time/{k}"] for r in rows)
               for k in ("step_s", "rollout_s", "ref_s", "update_s")},
            "peak_rss_mib": peak_rss_mib()}


def role_update(mode: str, steps: int, threads: int) -> dict:
    """RL updates (reference log-probs + policy_update) of a 24M-parameter Qwen2 on synthetic decisions."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.set_num_threads(threads)
    start_rss = rss_mib()
    torch.manual_seed(0)
    model = Qwen2ForCausalLM(Qwen2Config(vocab_size=1024, tie_word_embeddings=True, **LARGER))
    cfg = build_config(None, ["rl.lr=1e-4", *MODES[mode]])
    if mode == "lora":
        model = lora.wrap(model, cfg.policy.lora, base_dir=".")
    # token ids only (no text): a tokenizer is needed for its padding id alone
    trainer = RLTrainer(rl_run(cfg, eval_sampling=SamplingParams()), model, SimpleNamespace(pad_token_id=0), None,
                        None, None)
    rng = np.random.default_rng(0)
    samples = [Sample(rng.integers(3, 1024, 128).tolist(), rng.integers(3, 1024, 8).tolist(), [-7.0] * 8,
                      float(rng.choice([-1.0, 1.0]))) for _ in range(16)]
    rows = window_rows(samples)
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        with trainer.reference() as ref:
            fill_ref_logprobs(ref, rows, trainer.forward)
        policy_update(trainer.model, trainer.optimizer, rows, cfg.rl, trainer.forward, trainer.update_rng)
        times.append(time.perf_counter() - t0)
    return {"params": sum(p.numel() for p in model.parameters()),
            "trainable": sum(p.numel() for p in lora.trainable_parameters(model)),
            "reference_copy": trainer.ref_model is not None, "update_s": statistics.median(times),
            "start_rss_mib": start_rss, "after_rss_mib": rss_mib(), "peak_rss_mib": peak_rss_mib()}


def markdown(result: dict) -> str:
    m, load = result["machine"], result["load"]
    lines = [
        "# LoRA vs full fine-tuning in RL: memory and step time", "",
        f"Machine: {m['cpu']} ({m['cores']} cores), torch {m['torch']}, {result['threads']} torch thread(s), "
        f"{m['date']}. Load average at start {load['start']}, at end {load['end']}: other jobs (a learning "
        "experiment, other builds) ran on the same 2 cores, so times are indicative; memory is not affected.", "",
        "LoRA: r 16, alpha 32, all linear layers (`policy.lora=true`). Full fine-tuning keeps a frozen copy of the "
        "policy as the KL reference; LoRA uses the policy with its adapter disabled. Peak RSS is the whole "
        "process (Python, torch, transformers, the env) at its maximum.", "",
        f"## RL run: tiny default policy, {result['steps']} GRPO steps (8 tasks x 4 rollouts, KL 0.01)", "",
        "| mode | parameters | trainable | reference copy | peak RSS MiB | step s | rollout s | ref s | update s |",
        "|---|---|---|---|---|---|---|---|---|"]
    for mode, r in result["rl_run"].items():
        lines.append(f"| {mode} | {r['params']:,} | {r['trainable']:,} ({r['trainable'] / r['params']:.1%}) | "
                     f"{'yes' if r['reference_copy'] else 'no'} | {r['peak_rss_mib']:.0f} | {r['step_s']:.2f} | "
                     f"{r['rollout_s']:.2f} | {r['ref_s']:.2f} | {r['update_s']:.2f} |")
    lines += ["", f"## RL update: 24M-parameter Qwen2 (hidden 512, 8 layers), 16 decisions of 128 + 8 tokens, "
                  f"median of {result['steps']}", "",
              "RSS before the model is built, after the last update (weights, reference, gradients, AdamW moments) "
              "and at its peak (during an update's backward pass).", "",
              "| mode | parameters | trainable | reference copy | RSS before MiB | RSS after MiB | peak RSS MiB "
              "| ref + update s |", "|---|---|---|---|---|---|---|---|"]
    for mode, r in result["update"].items():
        lines.append(f"| {mode} | {r['params']:,} | {r['trainable']:,} ({r['trainable'] / r['params']:.1%}) | "
                     f"{'yes' if r['reference_copy'] else 'no'} | {r['start_rss_mib']:.0f} | {r['after_rss_mib']:.0f} "
                     f"| {r['peak_rss_mib']:.0f} | {r['update_s']:.2f} |")
    lines += ["", "Peak RSS is measured with `MALLOC_MMAP_THRESHOLD_=65536` (every tensor its own mapping, returned "
                  "when freed), so it follows live memory rather than glibc's heap history.", ""]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--role", choices=["rl", "update"], help=argparse.SUPPRESS)  # a child process's job
    ap.add_argument("--mode", choices=list(MODES), help=argparse.SUPPRESS)
    ap.add_argument("--model", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.role == "rl":
        print(json.dumps(role_rl(args.model, args.mode, args.steps, args.threads)))
        return
    if args.role == "update":
        print(json.dumps(role_update(args.mode, args.steps, args.threads)))
        return

    model_dir = tiny_policy(ROOT / "runs" / "lora_bench")
    start = [round(x, 2) for x in os.getloadavg()]
    rl_run, update = {}, {}
    for mode in MODES:
        rl_run[mode] = child(["--role", "rl", "--mode", mode, "--model", str(model_dir),
                                 "--steps", str(args.steps), "--threads", str(args.threads)], args.threads)
        update[mode] = child(["--role", "update", "--mode", mode, "--steps", str(args.steps),
                                 "--threads", str(args.threads)], args.threads)
    end = [round(x, 2) for x in os.getloadavg()]
    result = {"benchmark": "lora_memory", "machine": machine_info(), "threads": args.threads, "steps": args.steps,
              "load": {"start": start, "end": end}, "rl_run": rl_run, "update": update}
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "lora_memory.json").write_text(json.dumps(result, indent=2))
    (RESULTS / "lora_memory.md").write_text(markdown(result))
    print(markdown(result))


if __name__ == "__main__":
    main()
