"""RL step cost: one RL step of 16 tasks x 4 rollouts (the issue's demo setting), six layouts side by side.

    python -m benchmarks.step_cost [--steps 5] [--models DIR] [--threads N] [--no-levers] [--setting demo]

Layouts: ``window`` + ``paper`` (the papers' default: a fresh prompt with the last 2 observation/action pairs
each turn, one training row per decision) and ``conversation`` + ``compact`` (one growing chat per episode,
generation reuses the keys/values of earlier turns, one training row per trajectory), each as it ran before
``policy.share_prefix`` (every prompt and row in full) and with it (``+shared``: each distinct prompt / row
and the instruction they all start with computed once, on the same pi_SFT), and each ``+shared`` one again
with every forward pass under bf16 autocast (``+bf16``; float32 weights, a documented option that changes
samples and loss by bf16 rounding, so the headline speed-up is the float32 one). Each layout gets its own
pi_SFT, fine-tuned exactly as ``creditflow demo`` does it (384 expert demos x 2 epochs) but in its own
layout and template; the models are cached under ``--models`` (default ``runs/step_cost_models``).

The trainers then take ``--steps`` RL steps of the demo setting (GRPO on success, traj-mean, no KL, 2
mini-batches, 16 new tokens), interleaved step by step so that load from other jobs hits all alike, with
the same task draws and the same torch seed per step. Each step is split into rollout (generation with
its behaviour log-probs, and the env steps), reference log-probs (none: the demo has no KL term, and the
behaviour log-probs come from generation, so there is no separate old-log-prob pass), credit and
update; the medians are compared, and the cost per decision (the two pi_SFT do not take equally long
episodes). ``--no-levers`` skips the lever measurements taken on the first step's batch: LM head at the
trained positions only, ``inference_mode`` for reference log-probs, padding and packing, shared prefixes
(and the prefix tree's levels), the prefix cache, the generation loop, grouped-query attention, bf16
autocast, threads.
Writes ``benchmarks/results/step_cost.{json,md}`` with machine info and the machine's load.

``--setting demo`` times ``creditflow demo``'s own RL step instead (RewardFlow on success, 8 tasks x 8
rollouts, lr 2e-4, 1 mini-batch) in its layout, ``window`` + ``paper`` + shared prefixes, in float32 and under
bf16 autocast, interleaved (no levers; ``benchmarks/results/step_cost_demo.{json,md}``).

``--setting lean [--repeats 3] [--fresh]`` times generation through the lean decoder (``policy.decode=lean``, the
``+lean`` layouts) beside the transformers model call (the ``+shared`` layouts pin ``policy.decode=hf``) in the
demo's RL settings, both layouts: the steps (each from pi_SFT, interleaved, the same seeds), where a rollout's
CPU time goes, then each phase against the arithmetic (``benchmarks/step_perf.py``: decode ms per step at batch
64 and on a later turn, prefill and update tokens/s, the step, each as a fraction of the host's matrix-product
rate; the update by phase) and SmolLM2's decode tokens/s at batch 1 and 8 (where ``models/smollm2`` or
``CREDITFLOW_SMOLLM2`` has it). Each unit is kept in ``<--models>/step_cost_lean_progress.json`` as it finishes:
rerunning the command continues (``--fresh`` starts over). Writes ``benchmarks/results/step_cost_lean.{json,md}``.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import io
import json
import os
import statistics
import subprocess
import time
from pathlib import Path

import numpy as np
import torch


from benchmarks.machine import cpu_label, machine_info
from creditflow import api
from creditflow.config import build_config
from creditflow.curriculum.hooks import build_hooks
from creditflow.policy.load import CPU_FLOAT32_SDPA, load_policy
from creditflow.envs.configured import env_factory
from creditflow.recipes.sections import engine_settings, rl_run
from creditflow.rollout.factory import make_engine
# the setting the issue names and the committed tables measured (the demo now runs RewardFlow on 8 x 8)
from creditflow.recipes.demo import DEMO_DEFAULTS, DEMO_ENV_SETTINGS, EARLIER_GRPO_DEMO
from creditflow.trainer.forward import PREFIX_LEVELS, Forward, spread
from creditflow.trainer.loss import token_logprobs
from creditflow.trainer.rl import RLTrainer, fill_ref_logprobs
from creditflow.trainer.sequences import rows_from

LAYOUTS = {  # share_prefix=false: every prompt and row in full, as before policy.share_prefix existed
    "window+paper": ["rollout.history=window", "policy.template=paper", "policy.share_prefix=false"],
    # the same layout and pi_SFT; distinct prompts / rows and the shared instruction computed once
    "window+paper+shared": ["rollout.history=window", "policy.template=paper", "policy.share_prefix=true"],
    "conversation+compact": ["rollout.history=conversation", "policy.template=compact", "policy.share_prefix=false"],
    "conversation+compact+shared": ["rollout.history=conversation", "policy.template=compact",
                                    "policy.share_prefix=true"],
    # the +shared layouts with every forward pass under bf16 autocast (float32 weights and AdamW state): the
    # samples and the loss change by bf16 rounding, so they are not the headline's same-objective comparison
    "window+paper+shared+bf16": ["rollout.history=window", "policy.template=paper", "policy.share_prefix=true",
                                 "policy.autocast=bf16"],
    "conversation+compact+shared+bf16": ["rollout.history=conversation", "policy.template=compact",
                                         "policy.share_prefix=true", "policy.autocast=bf16"]}
# every layout above generates through the transformers model call, as they did before policy.decode existed;
# +lean: the +shared layouts with generation's sampling loop through the lean decoder (policy.decode=lean)
LAYOUTS = {layout: [*overrides, "policy.decode=hf"] for layout, overrides in LAYOUTS.items()}
LAYOUTS.update({f"{layout}+lean": [*LAYOUTS[layout][:-1], "policy.decode=lean"]
                for layout in ("window+paper+shared", "conversation+compact+shared")})
BASELINE, *OTHERS = LAYOUTS
FAST = "conversation+compact+shared"  # the headline: same objective as the baseline up to float rounding
SFT_OF = {layout: layout.split("+shared")[0] for layout in LAYOUTS}  # +shared (+bf16) reuse their layout's
ENV = [f"{k}={str(v).lower()}" for k, v in DEMO_ENV_SETTINGS["sokoban"].items()]
PHASES = ("rollout_s", "ref_s", "credit_s", "update_s", "step_s")
SETTING = EARLIER_GRPO_DEMO  # --setting demo: [] (the demo's own RL settings: RewardFlow, 8 x 8, 1 mini-batch)
DEMO_LAYOUTS = ("window+paper+shared", "window+paper+shared+bf16")  # the demo's layout, float32 and bf16
# --setting lean: each +shared layout (the current path) beside its +lean one, the demo's own RL settings
LEAN_PAIRS = {"window+paper+shared": "window+paper+shared+lean",
              "conversation+compact+shared": "conversation+compact+shared+lean"}


LEAN_NOTES = (
    "Both paths are the hf backend's sampling loop with policy.share_prefix (each distinct prompt and the "
    "instruction every prompt starts with prefilled once); they differ in what runs the forward passes: the "
    "transformers model call (decode=hf) or the lean decoder (decode=lean: fused q/k/v and gate/up products, the "
    "rotary table built once, keys/values written in place, the prefix every prompt of the batch starts with held "
    "once and, on a group's first turn, each repeated prompt held once for its rows). The lean decoder makes the "
    "same draws from the torch RNG, so the +lean steps take the same episodes (the tables above: the same "
    "decisions, successes and generated tokens; tests/policy/test_lean_decode.py: the same greedy and seeded "
    "tokens, logits to float32 rounding, on the tiny policy and on SmolLM2). The update is the same code on both "
    "paths: its row is measured once per layout, and the spread of its step-to-step ratio is the machine's noise. "
    "Each unit (a step, a phase) was measured in one process of a resumable run; its load average is in the JSON. "
    "What stops the step here is arithmetic, not per-call overhead: the pi_SFT policies answer in about 5 tokens "
    "per decision, so the decode steps are a small part of a rollout (the rollout table); the window layout's "
    "rollout is its prompts' prefill, the conversation layout's sampling loops are mostly each turn's new tokens "
    "attending to the whole conversation, and the update spends over 99% of its CPU time in the forward and "
    "backward passes. The matrix-product rate is measured once (the run's matmul_rate unit); on a shared host it "
    "moves with the load, so the fractions are rough there. SmolLM2 at batch 1 reads its float32 weights at every "
    "decode step, which takes longer than its arithmetic (the SmolLM2 table's last two columns).")


def demo_config(layout: str, out: Path, extra: list[str] = ()):
    return build_config(None, [f"out_dir={out}", *ENV, *LAYOUTS[layout], *SETTING, "tensorboard=false",
                               *extra],
                        base=copy.deepcopy(DEMO_DEFAULTS), where="step_cost config")


def sft_model(layout: str, models: Path) -> Path:
    """The layout's pi_SFT, trained as ``creditflow demo`` trains it (cached)."""
    layout = SFT_OF[layout]
    out = models / layout
    if not (out / "sft_model" / "config.json").exists():
        with contextlib.redirect_stderr(io.StringIO()):
            api.sft(demo_config(layout, out))  # what ``creditflow sft`` runs
    return out / "sft_model"


class Trainer:
    """One layout's RL trainer, its rollouts captured for the counts."""

    def __init__(self, layout: str, model_dir: Path, out: Path):
        self.layout = layout
        self.cfg = demo_config(layout, out)
        factory = env_factory(self.cfg.env, self.cfg.rollout.max_steps)
        self.model, self.tok = load_policy(model_dir, "cpu")
        engine = make_engine(engine_settings(self.cfg), self.model, self.tok, factory)
        self.trainer = RLTrainer(rl_run(self.cfg), self.model, self.tok, engine, engine, logger=None,
                                 hooks=build_hooks(self.cfg.curriculum, self.cfg.env, self.cfg.seed, factory))
        self.trajs: list = []
        rollout = engine.rollout_groups

        def captured(*args, **kwargs):
            result = rollout(*args, **kwargs)
            self.trajs = result.trajectories
            return result

        engine.rollout_groups = captured
        self.sft_state = copy.deepcopy(self.model.state_dict())

    def restore(self, seed: int) -> None:
        """Back to pi_SFT with a fresh optimizer and the task draws of ``seed`` (a step that does not depend on
        the steps before it: ``--setting lean`` resumes step by step)."""
        self.model.load_state_dict(self.sft_state)
        self.trainer.optimizer = torch.optim.AdamW(self.model.parameters(), lr=self.cfg.rl.lr,
                                                   weight_decay=self.cfg.rl.weight_decay)
        self.trainer.task_rng = np.random.default_rng(seed)
        self.trainer.update_rng = np.random.default_rng(seed + 1)

    def step(self, seed: int) -> dict:
        torch.manual_seed(seed)
        engine = self.trainer.train_engine
        engine.stats.__init__()
        cpu = time.process_time()
        m = self.trainer.train_step()
        cpu = time.process_time() - cpu
        rows = rows_from(self.trajs, self.cfg.rollout.history)
        trained = [r for r in rows if any(s.advantage != 0 for s in r.samples)]
        return {
            "rollout_s": m["time/rollout_s"], "ref_s": m["time/ref_s"], "credit_s": m["time/credit_ms"] / 1000,
            "update_s": m["time/update_s"], "step_s": m["time/step_s"], "step_cpu_s": cpu,
            "episodes": len(self.trajs), "decisions": m["train/samples"], "success": m["train/success_rate"],
            "generate_calls": engine.stats.generate_calls, "generated_tokens": engine.stats.generated_tokens,
            "prefill_tokens": prefill_tokens(self.trajs, self.cfg.rollout.history),
            "train_rows": len(trained), "train_row_tokens": sum(len(r) for r in trained),
            "trained_tokens": sum(len(s.response_ids) for r in trained for s in r.samples),
            "trained_decisions": sum(len(r.samples) for r in trained),
            "rollout_ms_per_decision": 1000 * m["time/rollout_s"] / max(1, m["train/samples"]),
            "update_ms_per_trained_decision": 1000 * m["time/update_s"] / max(1, sum(len(r.samples) for r in trained)),
        }


def prefill_tokens(trajs, history: str) -> int:
    """Prompt tokens generation had to encode: every prompt in ``window``; in ``conversation`` (prefix
    cache) only what each prompt adds to the previous turn's sequence (its last sampled token + env turn)."""
    if history == "window":
        return sum(len(s.prompt_ids) for t in trajs for s in t.steps)
    total = 0
    for t in trajs:
        prev = None
        for s in t.steps:
            total += len(s.prompt_ids) if prev is None else len(s.prompt_ids) - len(prev) + 1
            prev = s.prompt_ids + s.response_ids
    return total


def timed(fn, repeat: int = 1) -> float:
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def update_pass(model, rows, pad_id: int, budget: int, all_positions: bool = False, pad: bool = True,
                autocast: str = "none", share: bool = False, levels: int = PREFIX_LEVELS) -> None:
    """One forward + backward of the PPO loss's log-probs over ``rows`` (the update's compute; ``share``:
    ``policy.share_prefix``, in at most ``levels`` levels of the prefix tree)."""
    fwd = Forward(pad_id, budget, pad=pad, autocast=autocast, share_prefix=share, max_levels=levels)
    for _micro, b in fwd.batches(rows, "cpu"):
        if all_positions:  # the LM head over every position, as before
            logits = model(input_ids=b["ids"], attention_mask=b["attn"]).logits[:, :-1]
            logp = token_logprobs(logits, b["ids"][:, 1:])
        else:
            logits, targets = fwd.trained_logits(model, b)
            logp = spread(token_logprobs(logits, targets), b["mask"])
        (logp * b["mask"] * b["adv"]).sum().backward()
    model.zero_grad(set_to_none=True)


def levers(base: Trainer, fast: Trainer, base_trajs, fast_trajs) -> list[dict]:
    """Each lever measured on the first step's batch: before / after, seconds of one pass."""
    lv = Levers(base, fast, base_trajs, fast_trajs)
    for group in (lv.update, lv.generation, lv.share_prefix, lv.attention, lv.autocast, lv.threads):
        group()
    return lv.out


class Levers:
    """The levers of one step's batch, in groups; each measurement is appended to ``out`` (and printed)."""

    def __init__(self, base: Trainer, fast: Trainer, base_trajs, fast_trajs):
        self.base, self.fast, self.out = base, fast, []
        self.pad = base.tok.pad_token_id
        self.budget = base.cfg.rl.token_budget
        rng = np.random.default_rng(0)
        win_rows = [r for r in rows_from(base_trajs, "window") if any(s.advantage for s in r.samples)]
        self.win_rows = [win_rows[i] for i in sorted(rng.choice(len(win_rows), min(48, len(win_rows)), replace=False))]
        self.conv_rows = [r for r in rows_from(fast_trajs, "conversation") if any(s.advantage for s in r.samples)]
        self.base_trajs = base_trajs
        self.all_win = None  # every trained window row, taken when the share_prefix levers start
        self.specs = None  # the same 4 tasks for both layouts, drawn when the rollout levers start
        self.conv_backend = fast.trainer.train_engine.backend
        self.win_backend = base.trainer.train_engine.backend

    def lever(self, name, on, before, after, labels):
        self.out.append({"lever": name, "on": on, "before": before, "after": after,
                         "before_label": labels[0], "after_label": labels[1]})
        print(self.out[-1], flush=True)

    def rollout(self, trainer, backend, cached: bool):
        engine = trainer.trainer.train_engine
        own = engine.backend
        engine.backend = backend
        torch.manual_seed(0)
        with backend.prefix_cache() if cached else contextlib.nullcontext():
            engine.rollout(self.specs, trainer.cfg.rollout.group_size)
        engine.backend = own

    def rollout_in(self, autocast: str):
        self.conv_backend.autocast = autocast
        try:
            return timed(lambda: self.rollout(self.fast, self.conv_backend, False))
        finally:
            self.conv_backend.autocast = self.fast.cfg.policy.autocast

    def update(self):
        """The update's passes: LM head, reference log-probs, padding, the micro-batch token budget."""
        base, fast, pad, budget, win_rows, conv_rows = (self.base, self.fast, self.pad, self.budget, self.win_rows,
                                                        self.conv_rows)
        self.lever("LM head at the trained positions only (update fwd+bwd)", f"{len(win_rows)} window rows",
                   timed(lambda: update_pass(base.model, win_rows, pad, budget, all_positions=True), 2),
                   timed(lambda: update_pass(base.model, win_rows, pad, budget), 2), ("every position", "trained only"))

        ref = copy.deepcopy(base.model).eval()
        unshared = Forward(pad, budget, share_prefix=False)
        plain = Forward.logprobs.__wrapped__  # without its inference_mode decorator

        def no_grad():
            with torch.no_grad():
                plain(unshared, ref, win_rows)

        self.lever("reference log-probs under inference_mode", f"{len(win_rows)} window rows", timed(no_grad, 2),
                   timed(lambda: fill_ref_logprobs(ref, win_rows, unshared), 2), ("no_grad", "inference_mode"))

        self.lever("conversation rows without padding (equal lengths only per micro-batch)",
                   f"{len(conv_rows)} conversation rows (fwd+bwd)",
                   timed(lambda: update_pass(fast.model, conv_rows, pad, budget, pad=True)),
                   timed(lambda: update_pass(fast.model, conv_rows, pad, budget, pad=False)), ("padded", "unpadded"))
        self.lever("window rows without padding", f"{len(win_rows)} window rows (fwd+bwd)",
                   timed(lambda: update_pass(base.model, win_rows, pad, budget, pad=True), 2),
                   timed(lambda: update_pass(base.model, win_rows, pad, budget, pad=False), 2), ("padded", "unpadded"))
        for tokens in (4096, 65536):
            self.lever(f"micro-batch token budget {tokens} (default {budget})",
                       f"{len(win_rows)} window rows (fwd+bwd)", None,
                       timed(lambda: update_pass(base.model, win_rows, pad, tokens), 2), ("", f"budget {tokens}"))

    def generation(self):
        """Generation: the conversation layout's prefix cache, the window layout's own decoding loop."""

        class FullPrompts:  # the backend without prefix_cache: transformers' generate on every full prompt
            def __init__(self, backend):
                self.backend = backend

            def generate(self, prompts, params):
                return self.backend.generate(prompts, params)

        self.specs = self.base.trainer.fresh_specs(0)[:4]  # the same 4 tasks for both layouts
        fast, base = self.fast, self.base
        self.lever("conversation generation reuses earlier turns' keys/values (prefix cache)",
                   "conversation rollout 4 x 4",
                   timed(lambda: self.rollout(fast, FullPrompts(self.conv_backend), False)),
                   timed(lambda: self.rollout(fast, self.conv_backend, False)),
                   ("generate, full prompts", "prefix cache"))
        self.lever("window generation through the prefix-cached loop (no reuse: preallocated cache only)",
                   "window rollout 4 x 4", timed(lambda: self.rollout(base, self.win_backend, False)),
                   timed(lambda: self.rollout(base, self.win_backend, True)), ("transformers generate", "own loop"))

    def share_prefix(self):
        """policy.share_prefix: distinct rows / prompts and the instruction they all start with, computed once."""
        self.all_win = [r for r in rows_from(self.base_trajs, "window") if any(s.advantage for s in r.samples)]
        base, fast, pad, budget, all_win, conv_rows = (self.base, self.fast, self.pad, self.budget, self.all_win,
                                                       self.conv_rows)
        self.lever("distinct rows and shared prefixes computed once (policy.share_prefix), update fwd+bwd",
                   f"all {len(all_win)} trained window rows of the step",
                   timed(lambda: update_pass(base.model, all_win, pad, budget)),
                   timed(lambda: update_pass(base.model, all_win, pad, budget, share=True)),
                   ("every row in full", "shared"))
        self.lever("distinct rows and shared prefixes computed once (policy.share_prefix), update fwd+bwd",
                   f"{len(conv_rows)} conversation rows",
                   timed(lambda: update_pass(fast.model, conv_rows, pad, budget, pad=False)),
                   timed(lambda: update_pass(fast.model, conv_rows, pad, budget, pad=False, share=True)),
                   ("every row in full", "shared"))

        # 2 levels: one shared prefix (the instruction) + each distinct row, as policy.share_prefix ran until 2026-11-29
        self.lever(f"prefix tree in {PREFIX_LEVELS} levels instead of 2 (policy.share_prefix), update fwd+bwd",
                   f"all {len(all_win)} trained window rows of the step",
                   timed(lambda: update_pass(base.model, all_win, pad, budget, share=True, levels=2), 2),
                   timed(lambda: update_pass(base.model, all_win, pad, budget, share=True), 2),
                   ("2 levels", f"{PREFIX_LEVELS} levels"))
        self.lever(f"prefix tree in {PREFIX_LEVELS} levels instead of 2 (policy.share_prefix), update fwd+bwd",
                   f"{len(conv_rows)} conversation rows",
                   timed(lambda: update_pass(fast.model, conv_rows, pad, budget, pad=False, share=True, levels=2), 2),
                   timed(lambda: update_pass(fast.model, conv_rows, pad, budget, pad=False, share=True), 2),
                   ("2 levels", f"{PREFIX_LEVELS} levels"))

        def shared_rollout(trainer, share: bool, cached: bool):
            backend = trainer.trainer.train_engine.backend
            backend.share_prefix = share
            try:
                return timed(lambda: self.rollout(trainer, backend, cached))
            finally:
                backend.share_prefix = trainer.cfg.policy.share_prefix

        self.lever("each distinct prompt and the shared instruction prefilled once (policy.share_prefix)",
                   "window rollout 4 x 4", shared_rollout(base, False, False), shared_rollout(base, True, False),
                   ("transformers generate", "shared prefill"))
        self.lever("each distinct prompt and the shared instruction prefilled once (policy.share_prefix)",
                   "conversation rollout 4 x 4", shared_rollout(fast, False, True), shared_rollout(fast, True, True),
                   ("prefix cache", "prefix cache + shared prefill"))

    def attention(self):
        """Grouped-query attention without the per-head copy of keys and values."""

        def attention(gqa: bool):  # transformers reads this switch at every attention call
            os.environ["TRANSFORMERS_SDPA_FORCE_GQA"] = "1" if gqa else "0"
            try:
                return timed(lambda: self.rollout(self.fast, self.conv_backend, False))
            finally:
                os.environ.pop("TRANSFORMERS_SDPA_FORCE_GQA")

        # with a mask, transformers' sdpa copies keys/values once per query head; torch's CPU flash kernel can
        # take the mask and the grouped heads together (enable_gqa), the same outputs without the copy
        self.lever("grouped-query attention on the key/value heads (enable_gqa), no per-head copy",
                   "conversation rollout 4 x 4", attention(False), attention(True),
                   ("sdpa: keys/values repeated", "enable_gqa"))

    def autocast(self):
        """bf16 mixed precision (policy.autocast=bf16): float32 weights, the passes under torch.autocast."""
        base, fast, pad, budget, win_rows, conv_rows, all_win = (self.base, self.fast, self.pad, self.budget,
                                                                 self.win_rows, self.conv_rows, self.all_win)
        self.lever("bf16 autocast, update fwd+bwd (policy.autocast=bf16)", f"{len(conv_rows)} conversation rows",
                   timed(lambda: update_pass(fast.model, conv_rows, pad, budget, pad=False)),
                   timed(lambda: update_pass(fast.model, conv_rows, pad, budget, pad=False, autocast="bf16")),
                   ("float32", "bf16"))
        self.lever("bf16 autocast, update fwd+bwd (policy.autocast=bf16)", f"{len(win_rows)} window rows",
                   timed(lambda: update_pass(base.model, win_rows, pad, budget), 2),
                   timed(lambda: update_pass(base.model, win_rows, pad, budget, autocast="bf16"), 2),
                   ("float32", "bf16"))
        self.lever("bf16 autocast, generation (policy.autocast=bf16)", "conversation rollout 4 x 4",
                   self.rollout_in("none"), self.rollout_in("bf16"), ("float32", "bf16"))

        a, b = torch.randn(2048, 2048), torch.randn(2048, 2048)
        self.lever("one 2048 x 2048 x 2048 matrix product in bf16 instead of float32 (what autocast gives linear "
                   "layers)", "random matrices", timed(lambda: a @ b, 5), timed(lambda: a.bfloat16() @ b.bfloat16(), 5),
                   ("float32", "bf16, casts included"))

        # under CPU autocast, SDPA runs in bf16 unless the model's attention is switched to float32 (the default
        # since 2026-11-29, policy.model.CPU_FLOAT32_SDPA); "bf16 attention" is plain torch.autocast on plain SDPA
        def bf16_attention(model, fn):
            model.set_attn_implementation("sdpa")
            try:
                with torch.autocast("cpu", dtype=torch.bfloat16):
                    return fn()
            finally:
                model.set_attn_implementation(CPU_FLOAT32_SDPA)

        for name, model, rows, unpadded in ((f"all {len(all_win)} trained window rows of the step", base.model,
                                             all_win, False), (f"{len(conv_rows)} conversation rows", fast.model,
                                                               conv_rows, True)):
            self.lever("bf16 autocast on CPU: attention in float32 instead of bf16, update fwd+bwd", name,
                       bf16_attention(model, lambda: timed(lambda: update_pass(model, rows, pad, budget,
                                                                               pad=not unpadded, share=True))),
                       timed(lambda: update_pass(model, rows, pad, budget, pad=not unpadded, autocast="bf16",
                                                 share=True)),
                       ("bf16 attention", "float32 attention"))
        self.lever("bf16 autocast on CPU: attention in float32 instead of bf16, generation",
                   "conversation rollout 4 x 4",
                   bf16_attention(fast.model, lambda: timed(lambda: self.rollout(fast, self.conv_backend, False))),
                   self.rollout_in("bf16"), ("bf16 attention", "float32 attention"))

    def threads(self):
        """The update at 1, 2 and all torch threads."""
        threads = torch.get_num_threads()
        for n in sorted({1, 2, os.cpu_count() or 1}):
            torch.set_num_threads(n)
            self.lever(f"torch threads = {n}", f"{len(self.win_rows)} window rows (fwd+bwd)", None,
                       timed(lambda: update_pass(self.base.model, self.win_rows, self.pad, self.budget), 2),
                       ("", f"{n} thread(s)"))
        torch.set_num_threads(threads)


def load_snapshot() -> dict:
    """The machine's load and its busiest other processes (``top -bn1``)."""
    snap = {"loadavg": [round(x, 2) for x in os.getloadavg()]}
    try:
        top = subprocess.run(["top", "-bn1", "-o", "%CPU"], capture_output=True, text=True, timeout=10).stdout
        lines = top.splitlines()
        head = next(i for i, line in enumerate(lines) if line.lstrip().startswith("PID"))
        snap["top"] = [" ".join(line.split()[8:9] + line.split()[11:]) for line in lines[head + 1: head + 6]]
    except (OSError, StopIteration, subprocess.SubprocessError):
        pass
    return snap


def markdown(result: dict) -> str:
    m, s = result["machine"], result["settings"]
    med = result["median"]
    lines = [
        "# RL step cost: " + " vs ".join(result["median"]), "",
        f"Machine: {cpu_label(m)} ({m['cores']} cores), torch {m['torch']}, {s['torch_threads']} torch thread(s), "
        f"{m['date']}. Load average at start {result['load']['start']['loadavg']}, at end "
        f"{result['load']['end']['loadavg']} ({result['load']['note']}).", "",
        f"One RL step of the {s.get('setting', 'issue')} setting: {s['tasks']} tasks x {s['group']} rollouts of "
        f"{s['env']}, {s.get('algo', 'grpo')} on success, traj-mean, no KL, lr {s.get('lr', 4e-4):g}, "
        f"{s['minibatches']} mini-batch(es), {s['max_new_tokens']} new tokens; each "
        f"layout from its own pi_SFT ({s['sft']}; +shared shares its layout's pi_SFT and runs with "
        f"policy.share_prefix=true, the others with false; +bf16 runs every forward pass under bf16 autocast, "
        f"policy.autocast=bf16). Median over {s['steps']} steps, interleaved, same seeds.", "",
        "| layout | rollout s | ref log-probs s | credit s | update s | **step s** |",
        "|---|---|---|---|---|---|",
    ]
    for layout in med:
        r = med[layout]
        lines.append(f"| {layout} | {r['rollout_s']:.2f} | {r['ref_s']:.2f} | {r['credit_s']:.3f} | "
                     f"{r['update_s']:.2f} | **{r['step_s']:.2f}** |")
    ups = result.get("speedups") or {FAST: result["speedup"]}
    lines += [""] + [f"Speed-up of the median step over {BASELINE}, {layout}: **{up['step_s']:.1f}x** (rollout "
                     f"{up['rollout_s']:.1f}x, update {up['update_s']:.1f}x)." for layout, up in ups.items()] + ["",
              "Work per step (medians):", "",
              "| layout | episodes | decisions | success | prefill tokens | generated tokens | trained rows | "
              "trained decisions | row tokens | rollout ms / decision | update ms / trained decision |",
              "|---|---|---|---|---|---|---|---|---|---|---|"]
    for layout in med:
        r = med[layout]
        lines.append(f"| {layout} | {r['episodes']:.0f} | {r['decisions']:.0f} | {r['success']:.2f} | "
                     f"{r['prefill_tokens']:.0f} | {r['generated_tokens']:.0f} | {r['train_rows']:.0f} | "
                     f"{r['trained_decisions']:.0f} | {r['train_row_tokens']:.0f} | "
                     f"{r['rollout_ms_per_decision']:.1f} | {r['update_ms_per_trained_decision']:.1f} |")
    if result.get("levers"):
        lines += ["", "Levers, each measured on the first step's batch (seconds, one pass):", "",
                  "| lever | on | before | after |", "|---|---|---|---|"]
        for lv in result["levers"]:
            before = f"{lv['before']:.2f} ({lv['before_label']})" if lv["before"] is not None else ""
            lines.append(f"| {lv['lever']} | {lv['on']} | {before} | {lv['after']:.2f} ({lv['after_label']}) |")
    lines += ["", result["notes"], ""]
    return "\n".join(lines)


class Progress:
    """``--setting lean``'s measurements, one unit at a time, kept in a JSON file as they finish: a run that
    stops (or is stopped) continues where it was with the same command (``--fresh`` starts over)."""

    def __init__(self, path: Path, fresh: bool):
        self.path = path
        self.units = {} if fresh or not path.exists() else json.loads(path.read_text())
        if self.units:
            print(f"resuming: {len(self.units)} unit(s) done in {path}", flush=True)

    def __call__(self, key: str, fn) -> dict:
        if key not in self.units:
            load = [round(x, 2) for x in os.getloadavg()]
            t0 = time.perf_counter()
            result = fn()
            result.update(loadavg_before=load, loadavg_after=[round(x, 2) for x in os.getloadavg()],
                          unit_s=round(time.perf_counter() - t0, 1))
            self.units[key] = result
            self.path.parent.mkdir(parents=True, exist_ok=True)
            tmp = self.path.with_suffix(".tmp")
            tmp.write_text(json.dumps(self.units, indent=1))
            tmp.replace(self.path)
            print(key, {k: (round(v, 4) if isinstance(v, float) else v) for k, v in result.items()
                        if not isinstance(v, (dict, list))}, flush=True)
        return self.units[key]


def captured_prompts(trainer: Trainer, seed: int) -> list[list[int]]:
    """The prompt batches generation received in one rollout of the step's tasks (from pi_SFT, seeded)."""
    trainer.restore(seed)
    torch.manual_seed(seed)
    engine = trainer.trainer.train_engine
    backend, batches = engine.backend, []
    generate = backend.generate

    def recording(prompts, params):
        batches.append([list(p) for p in prompts])
        return generate(prompts, params)

    backend.generate = recording
    try:
        with backend.prefix_cache() if trainer.cfg.rollout.history == "conversation" else contextlib.nullcontext():
            engine.rollout(trainer.trainer.fresh_specs(0), trainer.cfg.rollout.group_size)
    finally:
        del backend.generate
    return batches


def rollout_split(trainer: Trainer, seed: int) -> dict:
    """Where one rollout's process CPU time goes (from pi_SFT, seeded): generation's prefill of the prompts
    (``_prefill_distinct``: each distinct prompt but its last token, and the shared instruction), the rest of
    generation (the sampling loops: the prompts' last tokens and the decode steps), and everything else
    (environments, prompts, tokenization)."""
    trainer.restore(seed)
    torch.manual_seed(seed)
    engine = trainer.trainer.train_engine
    backend, spent = engine.backend, {"generate": 0.0, "prefill": 0.0}
    originals = {"generate": backend.generate, "prefill": backend._prefill_distinct}

    def timed(name):
        def call(*args, **kwargs):
            t0 = time.process_time()
            try:
                return originals[name](*args, **kwargs)
            finally:
                spent[name] += time.process_time() - t0
        return call

    backend.generate, backend._prefill_distinct = timed("generate"), timed("prefill")
    try:
        with backend.prefix_cache() if trainer.cfg.rollout.history == "conversation" else contextlib.nullcontext():
            wall, cpu = time.perf_counter(), time.process_time()
            engine.rollout(trainer.trainer.fresh_specs(0), trainer.cfg.rollout.group_size)
            wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    finally:
        del backend.generate, backend._prefill_distinct
    return {"rollout_s": wall, "rollout_cpu_s": cpu, "prefill_cpu_s": spent["prefill"],
            "decode_cpu_s": spent["generate"] - spent["prefill"], "other_cpu_s": cpu - spent["generate"]}


def decode_batch(batches: list[list[list[int]]]) -> list[list[int]]:
    """The batch a decode step is timed on: the last of the full-size batches (its episodes have parted most)."""
    full = max(len(b) for b in batches)
    return [b for b in batches if len(b) == full][-1]


def smollm2_prompts(tok, n: int) -> list[list[int]]:
    """``n`` first-turn Sokoban prompts (paper template) in SmolLM2's chat template."""
    from creditflow.envs import make
    from creditflow.policy.backends.factory import chat_encoder
    from creditflow.policy.prompts import PromptBuilder

    env, pb, encode = make("sokoban", describe_positions=True), PromptBuilder("sokoban"), chat_encoder(tok)
    out = []
    for seed in range(n):
        obs, info = env.reset(seed=seed)
        out.append(encode(pb.chat(info["task"], [], obs, info["admissible_actions"])))
    return out


def run_lean(args) -> dict:
    """``--setting lean``: each +shared layout (decode=hf) beside its +lean layout in the demo's RL settings;
    the steps (from pi_SFT, interleaved, the same seeds), then per phase decode / prefill / update against the
    arithmetic, then SmolLM2's tokens per second on both paths."""
    from benchmarks import step_perf

    global SETTING
    SETTING = []  # the demo's own RL settings (RewardFlow, 8 tasks x 8 rollouts, 1 mini-batch)
    models = Path(args.models)
    progress = Progress(models / "step_cost_lean_progress.json", args.fresh)
    layouts = [layout for pair in LEAN_PAIRS.items() for layout in pair]
    t_start = time.perf_counter()
    sft = {layout: sft_model(layout, models) for layout in layouts}
    trainers = {layout: Trainer(layout, sft[layout], models / layout / "rl_lean") for layout in layouts}
    load_start = load_snapshot()
    rates = progress("matmul_rate", lambda: step_perf.matmul_rates())
    for k in range(args.steps):
        for layout in layouts:
            def one(layout=layout, k=k):
                trainers[layout].restore(1000 + k)
                return trainers[layout].step(seed=1000 + k)
            progress(f"step/{k}/{layout}", one)
    phases = {}
    for base, lean in LEAN_PAIRS.items():
        trainer = trainers[base]
        batches = captured_prompts(trainer, 1000)
        batch = decode_batch(batches)
        model, tok, autocast = trainer.model, trainer.tok, trainer.cfg.policy.autocast
        trainer.restore(1000)
        decode = progress(f"decode/{base}", lambda: step_perf.decode_cost(model, tok, batch, args.repeats,
                                                                            autocast=autocast))
        later = batches[2]  # the third turn: the episodes have parted (every prompt distinct or nearly)
        decode_later = progress(f"decode_turn3/{base}", lambda: step_perf.decode_cost(model, tok, later, args.repeats,
                                                                                      autocast=autocast))
        prefill = progress(f"prefill/{base}", lambda: step_perf.prefill_cost(model, tok, batch, args.repeats,
                                                                              autocast=autocast))

        def update(trainer=trainer):
            trainer.restore(1000)
            torch.manual_seed(1000)
            trainer.step(seed=1000)  # the step's trajectories, with their advantages
            rows = rows_from(trainer.trajs, trainer.cfg.rollout.history)
            trainer.restore(1000)
            return step_perf.update_cost(trainer.model, rows, trainer.cfg.rl, trainer.trainer.forward, args.repeats)

        upd = progress(f"update/{base}", update)

        def step_flops(layout):
            trainer = trainers[layout]
            trainer.restore(1000)
            torch.manual_seed(1000)
            return {"gflop": step_perf.flops(lambda: trainer.trainer.train_step()) / 1e9}

        flop = {layout: progress(f"step_flops/{layout}", lambda layout=layout: step_flops(layout))
                for layout in (base, lean)}
        split = {layout: progress(f"rollout_split/{layout}", lambda layout=layout: rollout_split(trainers[layout], 1000))
                 for layout in (base, lean)}
        phases[base] = {"decode": decode, "decode_turn3": decode_later, "prefill": prefill, "update": upd,
                        "step_gflop": flop, "rollout_split": split}
    smol = {}
    smol_dir = Path(os.environ.get("CREDITFLOW_SMOLLM2") or Path(__file__).resolve().parents[1] / "models" / "smollm2")
    if (smol_dir / "config.json").exists():
        model, tok = load_policy(smol_dir, "cpu")
        weight_mb = sum(p.numel() * p.element_size() for p in model.parameters()) / 1e6
        for batch in (1, 8):
            prompts = smollm2_prompts(tok, batch)
            smol[batch] = progress(f"smollm2/{batch}", lambda: {**step_perf.decode_cost(model, tok, prompts,
                                                                                         args.repeats, steps=8),
                                                                "weight_mb": weight_mb})
    bandwidth = progress("bandwidth", lambda: {"copy_gbs": step_perf.copy_bandwidth()})
    steps = {layout: [progress.units[f"step/{k}/{layout}"] for k in range(args.steps)] for layout in layouts}
    median = {layout: {key: statistics.median(r[key] for r in rows) for key in rows[0]
                       if isinstance(rows[0][key], (int, float))} for layout, rows in steps.items()}
    load_end = load_snapshot()
    cfg = trainers[layouts[0]].cfg
    return {
        "benchmark": "step_cost", "setting": "lean",
        "settings": {"setting": "lean (the demo's RL settings)", "algo": cfg.rl.algo, "lr": cfg.rl.lr,
                     "tasks": cfg.rollout.tasks_per_step, "group": cfg.rollout.group_size,
                     "env": "sokoban 6x6, 1 box, describe_positions, max 15 steps",
                     "minibatches": cfg.rl.minibatches, "max_new_tokens": cfg.generation.max_new_tokens,
                     "steps": args.steps, "repeats": args.repeats, "torch_threads": torch.get_num_threads(),
                     "sft": f"{cfg.sft.demos} expert demos x {cfg.sft.epochs:g} epochs, as creditflow demo",
                     "layouts": {layout: LAYOUTS[layout] for layout in layouts}, "pairs": LEAN_PAIRS,
                     "smollm2": str(smol_dir) if smol else None},
        "steps": steps, "median": median,
        "ratios": {base: {key: median[base][key] / max(median[lean][key], 1e-9)
                          for key in ("rollout_s", "update_s", "step_s", "step_cpu_s")}
                   for base, lean in LEAN_PAIRS.items()},
        # step k of both paths ran the same tasks: the median of the per-step ratios
        "paired_ratios": {base: {key: statistics.median(a[key] / max(b[key], 1e-9)
                                                        for a, b in zip(steps[base], steps[lean]))
                                 for key in ("rollout_s", "update_s", "step_s", "step_cpu_s")}
                          for base, lean in LEAN_PAIRS.items()},
        "phases": phases, "smollm2": smol, "matmul_gflops_at_run_threads": rates,
        "copy_gbs": bandwidth["copy_gbs"],
        "load": {"start": load_start, "end": load_end},
        "benchmark_minutes": round((time.perf_counter() - t_start) / 60, 1),
        "machine": machine_info(),
    }


def lean_markdown(result: dict) -> str:
    """The ``--setting lean`` record as a page: the steps, then each phase against the arithmetic."""
    m, s, med = result["machine"], result["settings"], result["median"]
    rates = result["matmul_gflops_at_run_threads"]
    rate = rates["wall"]
    starts = [u["loadavg_before"][0] for rows in result["steps"].values() for u in rows]
    lines = [
        "# RL step cost: the lean decoder (policy.decode=lean) against the transformers model call", "",
        f"Machine: {cpu_label(m)} ({m['cores']} cores), torch {m['torch']}, {s['torch_threads']} torch thread(s), "
        f"{m['date']}; one 2048^3 float32 matrix product at {rates['wall']} GFLOP/s per wall second, {rates['cpu']} per "
        f"CPU second, at that thread count. Load average "
        f"(1 min) when the steps started: {min(starts):.1f} to {max(starts):.1f}, at the start "
        f"{result['load']['start']['loadavg']}, at the end {result['load']['end']['loadavg']}: "
        + ("**a machine shared with other jobs** (more runnable processes than cores): wall-clock times are "
           "inflated and noisy; the ratios come from interleaved runs, and CPU seconds (process time) are given "
           "beside wall seconds." if max(starts) > 1.5 * m["cores"] else "no other heavy jobs.") + "", "",
        f"One RL step of the demo's settings: {s['tasks']} tasks x {s['group']} rollouts of {s['env']}, "
        f"{s['algo']} on success, lr {s['lr']:g}, {s['minibatches']} mini-batch, {s['max_new_tokens']} new tokens, "
        f"from each layout's pi_SFT ({s['sft']}); each step from pi_SFT with a fresh optimizer and the same task "
        f"draws and torch seed on both paths. Median over {s['steps']} steps, interleaved.", "",
        "| layout | rollout s | update s | **step s** | step CPU s | episodes | decisions | success | "
        "generated tokens |", "|---|---|---|---|---|---|---|---|---|"]
    for layout, r in med.items():
        lines.append(f"| {layout} | {r['rollout_s']:.2f} | {r['update_s']:.2f} | **{r['step_s']:.2f}** | "
                     f"{r['step_cpu_s']:.2f} | {r['episodes']:.0f} | {r['decisions']:.0f} | {r['success']:.2f} | "
                     f"{r['generated_tokens']:.0f} |")
    lines += [""] + [f"{base} -> +lean, median of the per-step ratios (step k of both paths ran the same tasks): "
                     f"step **{r['step_s']:.2f}x** (CPU {r['step_cpu_s']:.2f}x), rollout {r['rollout_s']:.2f}x, update "
                     f"{r['update_s']:.2f}x (the same code: its spread is the machine's noise)."
                     for base, r in result["paired_ratios"].items()]
    lines += ["", "Where one rollout's CPU time goes (the same 64 episodes from pi_SFT on both paths; process CPU s):", "",
              "| layout | rollout | prefill of the prompts | sampling loops (last prompt token, decode steps) | "
              "environments, prompts, tokenization |", "|---|---|---|---|---|"]
    for base, ph in result["phases"].items():
        for layout, r in ph["rollout_split"].items():
            lines.append(f"| {layout} | {r['rollout_cpu_s']:.2f} | {r['prefill_cpu_s']:.2f} | {r['decode_cpu_s']:.2f} | "
                         f"{r['other_cpu_s']:.2f} |")
    lines += ["", "## Each phase against the arithmetic", "",
              "GFLOP: the matrix products and attention the lean path runs (torch.utils.flop_counter on its own "
              "operations; the lower triangle only of a causal kernel); the fraction is that arithmetic over the time, "
              "over the matrix-product rate above, per wall second (per CPU second in brackets). "
              f"Medians over {s['repeats']} interleaved repeats; wall seconds (CPU seconds in brackets).", "",
              "| layout | phase | unit | decode=hf | decode=lean | ratio (CPU) | GFLOP | fraction of matmul rate, hf / lean |",
              "|---|---|---|---|---|---|---|---|"]

    def frac(gflop, seconds, cpu=None):
        if not seconds:
            return ""
        text = f"{100 * gflop / seconds / rates['wall']:.0f}%"
        return text + (f" ({100 * gflop / cpu / rates['cpu']:.0f}%)" if cpu else "")

    for base, ph in result["phases"].items():
        d, p, u, f = ph["decode"], ph["prefill"], ph["update"], ph["step_gflop"]
        lean = LEAN_PAIRS[base]
        lines.append(
            f"| {base} | decode | ms per step, batch {d['batch']} ({d['distinct_prompts']} distinct prompts, "
            f"{d['context_tokens_mean']:.0f} tokens of context) | {d['hf']['ms_wall']:.1f} ({d['hf']['ms_cpu']:.1f}) | "
            f"{d['lean']['ms_wall']:.1f} ({d['lean']['ms_cpu']:.1f}) | **{d['ratio_wall']:.2f}x** "
            f"({d['ratio_cpu']:.2f}x) | {d['gflop_per_step']:.3f} | "
            f"{frac(d['gflop_per_step'], d['hf']['ms_wall'] / 1000, d['hf']['ms_cpu'] / 1000)} / "
            f"{frac(d['gflop_per_step'], d['lean']['ms_wall'] / 1000, d['lean']['ms_cpu'] / 1000)} |")
        d3 = ph["decode_turn3"]
        lines.append(
            f"| {base} | decode, turn 3 | ms per step, batch {d3['batch']} ({d3['distinct_prompts']} distinct prompts, "
            f"{d3['context_tokens_mean']:.0f} tokens of context) | {d3['hf']['ms_wall']:.1f} ({d3['hf']['ms_cpu']:.1f}) | "
            f"{d3['lean']['ms_wall']:.1f} ({d3['lean']['ms_cpu']:.1f}) | **{d3['ratio_wall']:.2f}x** "
            f"({d3['ratio_cpu']:.2f}x) | {d3['gflop_per_step']:.3f} | "
            f"{frac(d3['gflop_per_step'], d3['hf']['ms_wall'] / 1000, d3['hf']['ms_cpu'] / 1000)} / "
            f"{frac(d3['gflop_per_step'], d3['lean']['ms_wall'] / 1000, d3['lean']['ms_cpu'] / 1000)} |")
        lines.append(
            f"| {base} | prefill | prompt tokens per s, batch {p['batch']} ({p['prompt_tokens']} tokens, "
            f"{p['distinct_prompts']} distinct prompts) | {p['hf']['tokens_per_s_wall']:.0f} "
            f"({p['hf']['tokens_per_s_cpu']:.0f}) | {p['lean']['tokens_per_s_wall']:.0f} "
            f"({p['lean']['tokens_per_s_cpu']:.0f}) | {p['ratio_wall']:.2f}x ({p['ratio_cpu']:.2f}x) | "
            f"{p['gflop']:.2f} | {frac(p['gflop'], p['hf']['s_wall'], p['hf']['s_cpu'])} / "
            f"{frac(p['gflop'], p['lean']['s_wall'], p['lean']['s_cpu'])} |")
        lines.append(
            f"| {base} | update | row tokens per s ({u['rows']} rows, {u['row_tokens']} tokens; the same code on "
            f"both paths) | {u['row_tokens'] / u['s_wall']:.0f} ({u['row_tokens'] / u['s_cpu']:.0f}) | | | "
            f"{u['gflop']:.1f} | {frac(u['gflop'], u['s_wall'], u['s_cpu'])} |")
        lines.append(
            f"| {base} | step | s (median above) | {med[base]['step_s']:.2f} | {med[lean]['step_s']:.2f} | "
            f"{result['ratios'][base]['step_s']:.2f}x ({result['ratios'][base]['step_cpu_s']:.2f}x) | "
            f"{f[base]['gflop']:.1f} / {f[lean]['gflop']:.1f} | {frac(f[base]['gflop'], med[base]['step_s'], med[base]['step_cpu_s'])} / "
            f"{frac(f[lean]['gflop'], med[lean]['step_s'], med[lean]['step_cpu_s'])} |")
    lines += ["", "Where the update's time goes (one policy_update on a step's rows; wall s, CPU s in brackets):", "",
              "| layout | " + " | ".join(next(iter(result["phases"].values()))["update"]["phases_wall"]) + " | total |",
              "|---|" + "---|" * (len(next(iter(result["phases"].values()))["update"]["phases_wall"]) + 1)]
    for base, ph in result["phases"].items():
        u = ph["update"]
        lines.append(f"| {base} | " + " | ".join(f"{u['phases_wall'][k]:.2f} ({u['phases_cpu'][k]:.2f})"
                                                 for k in u["phases_wall"]) + f" | {u['s_wall']:.2f} ({u['s_cpu']:.2f}) |")
    for base, ph in result["phases"].items():
        u = ph["update"]
        attention = sum(v for k, v in u["gflop_by_op"].items() if "attention" in k)
        lines.append(f"\n{base}: the update's arithmetic is {u['gflop']:.0f} GFLOP ({100 * attention / u['gflop']:.0f}% "
                     f"attention, the rest matrix products), {u['gflop'] / u['s_wall']:.0f} GFLOP/s wall, "
                     f"{u['gflop'] / u['s_cpu']:.0f} GFLOP/s per CPU second against {rates['wall']} and {rates['cpu']} for one "
                     f"large product; "
                     f"packing, the loss and the optimizer step take "
                     f"{100 * (u['s_cpu'] - u['phases_cpu']['forward'] - u['phases_cpu']['backward']) / u['s_cpu']:.1f}% "
                     f"of its CPU time.")
    if result["smollm2"]:
        lines += ["", "SmolLM2-135M-Instruct, first-turn Sokoban prompts (paper template, its chat template), "
                  "decode steps with one draw per row:", "",
                  "| batch | context tokens | decode=hf tokens/s | decode=lean tokens/s | ratio (CPU) | GFLOP per step "
                  "| ms per step at the matmul rate (per CPU second) | ms per step to read the weights once |",
                  "|---|---|---|---|---|---|---|---|"]
        for batch, d in result["smollm2"].items():
            lines.append(f"| {batch} | {d['context_tokens_mean']:.0f} | {1000 * int(batch) / d['hf']['ms_wall']:.1f} "
                         f"({1000 * int(batch) / d['hf']['ms_cpu']:.1f}) | {1000 * int(batch) / d['lean']['ms_wall']:.1f} "
                         f"({1000 * int(batch) / d['lean']['ms_cpu']:.1f}) | **{d['ratio_wall']:.2f}x** "
                         f"({d['ratio_cpu']:.2f}x) | {d['gflop_per_step']:.2f} | {1000 * d['gflop_per_step'] / rates['cpu']:.1f} | "
                         f"{d['weight_mb'] / result['copy_gbs']:.0f} |")
        lines.append(f"\nWeights read per step: {d['weight_mb']:.0f} MB (float32); the host copies memory at "
                     f"{result['copy_gbs']:.1f} GB/s (one 512 MiB copy, read + write, best of 3, measured in this run).")
    lines += ["", result.get("notes", ""), ""]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--models", default="runs/step_cost_models", help="where the two pi_SFT are cached")
    ap.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's own)")
    ap.add_argument("--no-levers", action="store_true")
    ap.add_argument("--setting", choices=("issue", "demo", "lean"), default="issue",
                    help="issue: GRPO 16 x 4, every layout (default); demo: creditflow demo's RL settings "
                         "(RewardFlow, 8 x 8, 1 mini-batch), its layout in float32 and under bf16 autocast, no levers; "
                         "lean: the demo's RL settings, each +shared layout beside its +lean one (policy.decode), "
                         "each phase against the arithmetic, SmolLM2's tokens/s (resumable: rerun to continue)")
    ap.add_argument("--repeats", type=int, default=3, help="lean: interleaved repeats of each phase measurement")
    ap.add_argument("--fresh", action="store_true", help="lean: discard the measurements of an earlier, unfinished run")
    ap.add_argument("--out", default=None, help="default: results/step_cost (issue), results/step_cost_demo (demo), "
                                                "results/step_cost_lean (lean)")
    args = ap.parse_args()
    if args.setting == "lean":
        if args.threads:
            torch.set_num_threads(args.threads)
        out = Path(args.out or Path(__file__).parent / "results" / "step_cost_lean")
        result = run_lean(args)
        result["notes"] = LEAN_NOTES
        out.parent.mkdir(parents=True, exist_ok=True)
        out.with_suffix(".json").write_text(json.dumps(result, indent=2))
        out.with_suffix(".md").write_text(lean_markdown(result))
        print(lean_markdown(result))
        return
    global SETTING, LAYOUTS, BASELINE, OTHERS, FAST
    if args.setting == "demo":
        SETTING, args.no_levers = [], True
        LAYOUTS = {layout: LAYOUTS[layout] for layout in DEMO_LAYOUTS}
        (BASELINE, *OTHERS), FAST = LAYOUTS, DEMO_LAYOUTS[1]
    args.out = args.out or str(Path(__file__).parent / "results" / ("step_cost" if args.setting == "issue"
                                                                      else "step_cost_demo"))
    if args.threads:
        torch.set_num_threads(args.threads)
    models = Path(args.models)
    t_start = time.perf_counter()
    sft = {layout: sft_model(layout, models) for layout in LAYOUTS}
    trainers = {layout: Trainer(layout, sft[layout], models / layout / "rl") for layout in LAYOUTS}
    load_start = load_snapshot()
    steps: dict[str, list[dict]] = {layout: [] for layout in LAYOUTS}
    first: dict[str, list] = {}
    for k in range(args.steps):
        for layout, trainer in trainers.items():
            steps[layout].append(trainer.step(seed=1000 + k))
            print(layout, {key: round(v, 3) for key, v in steps[layout][-1].items()}, flush=True)
            first.setdefault(layout, trainer.trajs)
    conv = "conversation+compact"  # the levers are measured on the trainers without sharing (they switch it)
    lever_rows = [] if args.no_levers else levers(trainers[BASELINE], trainers[conv], first[BASELINE], first[conv])
    load_end = load_snapshot()
    median = {layout: {key: statistics.median(r[key] for r in rows) for key in rows[0]}
              for layout, rows in steps.items()}
    busy = max(load_start["loadavg"][0], load_end["loadavg"][0]) > 1.5 * (torch.get_num_threads() or 1)
    cfg = trainers[BASELINE].cfg
    result = {
        "benchmark": "step_cost",
        "settings": {"setting": args.setting, "algo": cfg.rl.algo, "lr": cfg.rl.lr,
                     "tasks": cfg.rollout.tasks_per_step, "group": cfg.rollout.group_size,
                     "env": "sokoban 6x6, 1 box, describe_positions, max 15 steps",
                     "minibatches": cfg.rl.minibatches, "max_new_tokens": cfg.generation.max_new_tokens,
                     "steps": args.steps, "torch_threads": torch.get_num_threads(),
                     "sft": f"{cfg.sft.demos} expert demos x {cfg.sft.epochs:g} epochs, as creditflow demo",
                     "layouts": LAYOUTS},
        "steps": steps,
        "median": median,
        "speedup": {key: median[BASELINE][key] / max(median[FAST][key], 1e-9)
                    for key in ("rollout_s", "update_s", "step_s")},
        "speedups": {layout: {key: median[BASELINE][key] / max(median[layout][key], 1e-9)
                              for key in ("rollout_s", "update_s", "step_s")} for layout in OTHERS},
        "levers": lever_rows,
        "load": {"start": load_start, "end": load_end,
                 "note": "other jobs were running on the cores" if busy else "no other heavy jobs"},
        "benchmark_minutes": round((time.perf_counter() - t_start) / 60, 1),
        "machine": machine_info(),
        "notes": ("Reference log-probs are 0 s in both layouts because the demo has no KL term; the lever table "
                  "times the pass a KL run adds. Old (behaviour) log-probs come with generation in both "
                  "layouts: no step runs a separate forward for them. Layouts differ in what the docs say they "
                  "change (docs/formats.md, 'Multi-turn layouts'): the prompt text, the context the policy "
                  "conditions on (the whole episode instead of the last 2 pairs), and mini-batches that split "
                  "trajectories instead of decisions; on one batch the loss is the same "
                  "(tests/trainer/test_rl.py). policy.share_prefix changes no sample: its sampling loop makes the "
                  "same draws as transformers' generate from the same torch seed, up to float rounding of the "
                  "probabilities (here the +shared steps took the same episodes, decisions and successes as their layouts' steps), and the update's loss and "
                  "gradients agree to float rounding (tests/trainer/test_rl.py, tests/policy/test_hf_backend.py)."),
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(result, indent=2))
    out.with_suffix(".md").write_text(markdown(result))
    print(markdown(result))


if __name__ == "__main__":
    main()
