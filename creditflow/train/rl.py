"""Multi-turn group RL trainer: rollouts -> credit -> PPO-clip + KL update, with eval and checkpoints.

One training step:
  1. draw B training tasks (seeded generator), roll out G episodes each with the current policy;
  2. run the credit estimator (``rl.algo``: grpo, rloo, gigpo, rewardflow, ...) over the groups: it sets
     a per-step advantage that is broadcast to that step's response tokens;
  3. PPO-clip surrogate with per-token ratio against the behaviour log-probs, k3 KL to the reference
     policy (pi_SFT), entropy logged; micro-batches packed by token budget; grad clipping; AdamW.
Evaluation on held-out seeds every ``eval_every`` steps; metrics to JSONL + TensorBoard; checkpoints
hold model, optimizer, RNG states and step so ``--resume`` continues exactly.
"""

from __future__ import annotations

import copy
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import torch

from creditflow import credit
from creditflow.config import RunConfig
from creditflow.policy.backends.base import SamplingParams
from creditflow.rollout.engine import RolloutEngine, TaskSpec
from creditflow.rollout.evaluate import evaluate, rollout_metrics
from creditflow.rollout.hooks import Hooks
from creditflow.rollout.seeding import rng_state, set_rng_state
from creditflow.rollout.trajectory import Trajectory
from creditflow.train.checkpoint import save_checkpoint
from creditflow.train.loss import agg_loss, entropy_term, kl_term, ppo_clip_objective, token_logprobs
from creditflow.train.mismatch import check_mismatch


@dataclass
class Sample:
    """One policy decision: a prompt, the sampled response, its behaviour log-probs and advantage."""

    prompt_ids: list[int]
    response_ids: list[int]
    old_logprobs: list[float]
    advantage: float
    ref_logprobs: list[float] | None = None
    traj_weight: float = 1.0  # 1 / (decisions in its trajectory), used by loss_agg="traj-mean"
    is_weights: list[float] | None = None  # per-token TIS weights (rl.tis_cap), folded into the advantage

    def __len__(self) -> int:
        return len(self.prompt_ids) + len(self.response_ids)


def samples_from(trajectories: list[Trajectory]) -> list[Sample]:
    out = []
    for traj in trajectories:
        steps = [step for step in traj.steps if step.response_ids]
        for step in steps:
            if step.advantage is None:
                raise ValueError(f"step of {traj.traj_id} has no advantage (credit not computed)")
            out.append(Sample(step.prompt_ids, step.response_ids, step.logprobs, float(step.advantage),
                              traj_weight=1.0 / len(steps)))
    return out


def pack_microbatches(samples: list[Sample], token_budget: int) -> list[list[Sample]]:
    """Greedy packing of length-sorted samples so rows x max_len <= token_budget (one row minimum)."""
    order = sorted(samples, key=len)
    batches, cur, cur_max = [], [], 0
    for s in order:
        new_max = max(cur_max, len(s))
        if cur and new_max * (len(cur) + 1) > token_budget:
            batches.append(cur)
            cur, cur_max = [], 0
            new_max = len(s)
        cur.append(s)
        cur_max = new_max
    if cur:
        batches.append(cur)
    return batches


def _collate(batch: list[Sample], pad_id: int, device) -> dict[str, torch.Tensor]:
    width = max(len(s) for s in batch)
    n = len(batch)
    ids = torch.full((n, width), pad_id, dtype=torch.long)
    attn = torch.zeros((n, width), dtype=torch.long)
    mask = torch.zeros((n, width - 1))
    old = torch.zeros((n, width - 1))
    adv = torch.zeros((n, width - 1))
    ref = torch.zeros((n, width - 1))
    # agg_loss(traj-mean)'s row_weights: the weight of each of a row's tokens, w_i / T_i
    row_w = torch.tensor([s.traj_weight / len(s.response_ids) for s in batch], dtype=torch.float32)
    for i, s in enumerate(batch):
        seq = s.prompt_ids + s.response_ids
        ids[i, : len(seq)] = torch.tensor(seq)
        attn[i, : len(seq)] = 1
        lo, hi = len(s.prompt_ids) - 1, len(seq) - 1  # logits at t predict token t+1
        mask[i, lo:hi] = 1.0
        old[i, lo:hi] = torch.tensor(s.old_logprobs, dtype=torch.float32)
        adv[i, lo:hi] = s.advantage if s.is_weights is None else s.advantage * torch.tensor(s.is_weights)
        if s.ref_logprobs is not None:
            ref[i, lo:hi] = torch.tensor(s.ref_logprobs, dtype=torch.float32)
    return {k: v.to(device) for k, v in
            dict(ids=ids, attn=attn, mask=mask, old=old, adv=adv, ref=ref, row_w=row_w).items()}


def _response_logits(model, ids, attn):
    logits = model(input_ids=ids, attention_mask=attn).logits[:, :-1]
    return logits, ids[:, 1:]


@torch.no_grad()
def fill_ref_logprobs(ref_model, samples: list[Sample], pad_id: int, token_budget: int) -> None:
    device = next(ref_model.parameters()).device
    for batch in pack_microbatches(samples, token_budget):
        b = _collate(batch, pad_id, device)
        logits, targets = _response_logits(ref_model, b["ids"], b["attn"])
        lp = token_logprobs(logits, targets)
        for i, s in enumerate(batch):
            lo = len(s.prompt_ids) - 1
            s.ref_logprobs = lp[i, lo: lo + len(s.response_ids)].tolist()


def policy_update(model, optimizer, samples: list[Sample], cfg: RunConfig, pad_id: int,
                  rng: np.random.Generator) -> dict:
    """PPO epochs x mini-batches over ``samples``, one optimizer step per mini-batch; returns mean stats.

    The objective is :mod:`creditflow.train.loss`'s: PPO-clip + k3 KL - entropy per token, aggregated by
    ``rl.loss_agg`` with the mini-batch's normalisers, so the micro-batch gradients add up to the
    mini-batch gradient.
    """
    rl = cfg.rl
    device = next(model.parameters()).device
    stats = {"loss": [], "pg_loss": [], "kl": [], "entropy": [], "clip_frac": [], "ratio": [], "grad_norm": []}
    model.train()
    for _ in range(rl.ppo_epochs):
        order = rng.permutation(len(samples))
        for chunk in np.array_split(order, min(rl.minibatches, len(samples))):
            mini = [samples[i] for i in chunk]
            if not mini:
                continue
            # agg_loss normalisers of the whole mini-batch (see loss.agg_loss)
            n_tokens = sum(len(s.response_ids) for s in mini)
            traj_total = sum(s.traj_weight for s in mini)
            # With no KL and no entropy term, a zero-advantage sample contributes exactly zero loss and
            # gradient (-min(r*0, clip(r)*0) = 0): skip its forward/backward. The normalisers above still
            # count it, so the update is identical; only the logged ratio/entropy/clip stats cover fewer rows.
            if rl.kl_coef == 0 and rl.entropy_coef == 0:
                work = [s for s in mini if s.advantage != 0.0]
            else:
                work = mini
            n_work = max(1, sum(len(s.response_ids) for s in work))  # stats: token means over forwarded rows
            optimizer.zero_grad(set_to_none=True)
            acc = {k: 0.0 for k in ("loss", "pg_loss", "kl", "entropy", "clip_frac", "ratio")}
            for micro in pack_microbatches(work, rl.token_budget):
                b = _collate(micro, pad_id, device)
                mask = b["mask"]
                logits, targets = _response_logits(model, b["ids"], b["attn"])
                logp = token_logprobs(logits, targets)
                pg, pg_stats = ppo_clip_objective(logp, b["old"], b["adv"], mask, clip_low=rl.clip_eps,
                                                  clip_high=rl.clip_eps_high, n_tokens=n_work)
                kl, kl_stats = kl_term(logp, b["ref"], mask, coef=rl.kl_coef, n_tokens=n_work)
                ent, ent_stats = entropy_term(logits, mask, coef=rl.entropy_coef, n_tokens=n_work)
                loss = agg_loss(pg + kl + ent, mask, rl.loss_agg, n_tokens=n_tokens, n_seqs=len(mini),
                                row_weights=b["row_w"], total_weight=traj_total)
                loss.backward()
                for k, v in {"loss": loss.detach(), **pg_stats, **kl_stats, **ent_stats}.items():
                    acc[k] += float(v)
            if not work:  # all-zero gradient, but AdamW's moments still move the weights, as unskipped
                for p in model.parameters():
                    if p.requires_grad:
                        p.grad = torch.zeros_like(p)
            grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), rl.max_grad_norm)
            optimizer.step()
            for k, v in acc.items():
                stats[k].append(v)
            stats["grad_norm"].append(float(grad_norm))
    return {f"train/{k}": float(np.mean(v)) for k, v in stats.items() if v}


class RLTrainer:
    """Owns policy, reference, optimizer, engines and the loop state of one RL run."""

    def __init__(self, cfg: RunConfig, model, tokenizer, train_engine: RolloutEngine, eval_engine: RolloutEngine,
                 out_dir: Path, logger, hooks: Hooks | None = None, progress: Callable | None = None,
                 ref_model=None, eval_sampling: SamplingParams | None = None):
        self.cfg = cfg
        self.model = model
        self.tok = tokenizer
        self.train_engine = train_engine
        self.eval_engine = eval_engine
        self.out_dir = Path(out_dir)
        self.logger = logger
        self.hooks = hooks or Hooks()
        self.progress = progress
        self.eval_sampling = eval_sampling or eval_engine.sampling
        # unknown algo or bad knob => one-line error before any work; the knobs are validated once, here
        self.estimator = credit.get_estimator(cfg.rl.algo)
        self.credit_knobs = credit.validate_knobs(cfg.rl.algo, cfg.rl.credit)
        self.ref_model = None
        if cfg.rl.kl_coef > 0:  # reference = the policy RL starts from (pi_SFT) unless given
            self.ref_model = (ref_model if ref_model is not None else copy.deepcopy(model)).eval()
            for p in self.ref_model.parameters():
                p.requires_grad_(False)
        self.optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.rl.lr, weight_decay=cfg.rl.weight_decay)
        self.task_rng = np.random.default_rng(cfg.seed)
        self.update_rng = np.random.default_rng(cfg.seed + 1)
        self.step = 0
        self.env_steps = 0
        self.eval_seeds = [cfg.env.eval_seed_offset + i for i in range(cfg.rl.eval_episodes)]

    # -- pieces --------------------------------------------------------------------------------
    def fresh_specs(self, step: int) -> list[TaskSpec]:
        seeds = self.task_rng.integers(0, self.cfg.env.eval_seed_offset, size=self.cfg.rollout.tasks_per_step)
        name = self.cfg.env.name
        return [TaskSpec(task_id=f"{name}/{int(s)}", seed=int(s), group_id=f"step{step}/{name}/{int(s)}")
                for s in seeds]

    def run_eval(self) -> dict:
        metrics, _ = evaluate(self.eval_engine, self.eval_seeds, self.eval_sampling, self.cfg.env.name)
        return metrics

    def train_step(self) -> dict:
        cfg = self.cfg
        step = self.step + 1
        t0 = time.perf_counter()
        specs = self.hooks.make_specs(step, self.fresh_specs(step))
        trajs = self.train_engine.rollout(specs, cfg.rollout.group_size)
        t_roll = time.perf_counter() - t0
        hook_metrics = self.hooks.after_rollout(step, specs, trajs)  # may drop groups in place
        metrics = rollout_metrics(trajs, "train")
        metrics.update(hook_metrics)
        t1 = time.perf_counter()
        metrics.update(self.estimator(trajs, self.credit_knobs))
        metrics["time/credit_ms"] = (time.perf_counter() - t1) * 1000
        samples = samples_from(trajs)
        if samples:  # train/rollout_logprob_gap; with rl.tis_cap, TIS (train/mismatch.py)
            metrics.update(check_mismatch(self.model, samples, self.tok.pad_token_id, cfg.rl.token_budget,
                                          cfg.rl.tis_cap))
        if self.ref_model is not None:
            fill_ref_logprobs(self.ref_model, samples, self.tok.pad_token_id, cfg.rl.token_budget)
        t2 = time.perf_counter()
        if samples:
            metrics.update(policy_update(self.model, self.optimizer, samples, cfg, self.tok.pad_token_id,
                                         self.update_rng))
            self.train_engine.backend.sync_weights(self.model)  # a vLLM engine gets the new weights
        advs = [s.advantage for s in samples]
        self.env_steps += sum(len(t) for t in trajs)
        metrics.update({
            "step": step,
            "env_steps": self.env_steps,
            "train/samples": len(samples),
            "train/adv_mean": float(np.mean(advs)) if advs else 0.0,
            "train/adv_std": float(np.std(advs)) if advs else 0.0,
            "train/response_tokens": float(np.mean([len(s.response_ids) for s in samples])) if samples else 0.0,
            "time/rollout_s": t_roll,
            "time/update_s": time.perf_counter() - t2,
            "time/step_s": time.perf_counter() - t0,
        })
        self.step = step
        return metrics

    # -- loop ----------------------------------------------------------------------------------
    def fit(self) -> dict:
        cfg = self.cfg.rl
        last: dict = {}
        if self.step == 0:
            first = self.run_eval()
            first.update({"step": 0, "env_steps": 0})
            self.logger.log(first)
        while self.step < cfg.steps:
            metrics = self.train_step()
            if (cfg.eval_every and self.step % cfg.eval_every == 0) or self.step == cfg.steps:
                metrics.update(self.run_eval())
            self.logger.log(metrics)
            last = metrics
            if self.progress:
                self.progress(self.step, metrics)
            if (cfg.save_every and self.step % cfg.save_every == 0) or self.step == cfg.steps:
                save_checkpoint(self)
        return last

    def state_dict(self) -> dict:
        return {"step": self.step, "env_steps": self.env_steps,
                "rng": rng_state(self.task_rng, self.update_rng), "hooks": self.hooks.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        self.step = state["step"]
        self.env_steps = state["env_steps"]
        set_rng_state(state["rng"], self.task_rng, self.update_rng)
        self.hooks.load_state_dict(state.get("hooks", {}))
