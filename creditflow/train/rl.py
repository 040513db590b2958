"""Multi-turn group RL trainer: rollouts -> credit -> PPO-clip + KL update, with eval and checkpoints.

One training step:
  1. draw B training tasks (seeded generator), roll out G episodes each with the current policy;
  2. run the credit estimator (``rl.algo``: grpo, rloo, gigpo, rewardflow, ...) over the groups: it sets
     a per-step advantage that is broadcast to that step's response tokens;
  3. PPO-clip surrogate with per-token ratio against the behaviour log-probs, k3 KL to the reference
     policy (pi_SFT), entropy logged; micro-batches packed by token budget; grad clipping; AdamW.
Evaluation on held-out seeds every ``eval_every`` steps; metrics to JSONL + TensorBoard; checkpoints
hold model, optimizer, RNG states and step so ``--resume`` continues exactly.

Under N processes (:mod:`creditflow.train.distributed`) every process draws the same B tasks and rolls out
its B / N of them; curriculum hooks and rollout metrics see every process's trajectories, credit runs on
each process's own groups, and the update sums gradients over the processes with global normalisers.

With a LoRA policy (:mod:`creditflow.policy.lora`) the optimizer holds the adapter's parameters only, the
KL reference is the same model with the adapter disabled, and checkpoints hold the adapter.
"""

from __future__ import annotations

import copy
import hashlib
import pickle
import time
import weakref
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import torch
from transformers.cache_utils import DynamicLayer

from creditflow import credit
from creditflow.config import RunConfig
from creditflow.policy import lora
from creditflow.policy.backends.base import SamplingParams
from creditflow.policy.model import mixed_precision
from creditflow.rollout.engine import RolloutEngine, TaskSpec
from creditflow.rollout.evaluate import evaluate, rollout_metrics
from creditflow.rollout.hooks import Hooks
from creditflow.rollout.seeding import rng_state, set_rng_state, split_seeds
from creditflow.rollout.trajectory import Trajectory
from creditflow.train.checkpoint import save_checkpoint
from creditflow.train.distributed import (World, all_max, all_reduce_grads, all_sum, broadcast_parameters, gather,
                                          gather_trajectories, reduce_metrics, shard)
from creditflow.train.loss import (agg_loss, entropy_from_logits, entropy_term, kl_term, ppo_clip_objective,
                                   token_logprobs)
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


@dataclass
class Row:
    """One training sequence: token ids and the decisions whose sampled tokens it holds.

    ``window`` layout: one decision, ``ids`` = its prompt + response. ``conversation`` layout: a whole
    trajectory, ``ids`` = its last prompt + response, of which every decision's prompt is a prefix; the
    response of decision ``s`` sits at ``ids[len(s.prompt_ids): len(s.prompt_ids) + len(s.response_ids)]``.
    """

    ids: list[int]
    samples: list[Sample]

    def __len__(self) -> int:
        return len(self.ids)


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


def rows_from(trajectories: list[Trajectory], history: str = "window") -> list[Row]:
    """The training rows of ``trajectories`` in the ``history`` layout (see :class:`Row`)."""
    if history == "window":
        return window_rows(samples_from(trajectories))
    if history != "conversation":
        raise ValueError(f"unknown history layout {history!r}; use window or conversation")
    rows = []
    for traj in trajectories:
        samples = samples_from([traj])
        if samples:
            rows.append(conversation_row(samples, traj.traj_id))
    return rows


def window_rows(samples: list[Sample]) -> list[Row]:
    """One row per decision: its prompt + response."""
    return [Row(s.prompt_ids + s.response_ids, [s]) for s in samples]


def conversation_row(samples: list[Sample], name: str = "") -> Row:
    """One row for a trajectory's decisions: its last prompt + response, checked to hold every decision's
    prompt as a prefix followed by its sampled ids (the conversation layout trains on exactly the ids
    the policy sampled)."""
    last = samples[-1]
    ids = last.prompt_ids + last.response_ids
    for s in samples:
        n = len(s.prompt_ids)
        if ids[:n] != s.prompt_ids or ids[n: n + len(s.response_ids)] != s.response_ids:
            raise ValueError(f"conversation layout: a prompt + response of {name or 'a trajectory'} is not a "
                             "prefix of its last one (were the steps made in the conversation layout?)")
    return Row(ids, samples)


def pack_microbatches(rows: list, token_budget: int, pad: bool = True) -> list[list]:
    """Greedy packing of length-sorted rows so rows x max_len <= token_budget (one row minimum).

    ``pad=False``: only rows of equal length share a micro-batch, so nothing is padded and attention takes
    its causal fast path (no mask); the conversation layout's long rows run 1.6-2x faster that way
    (benchmarks/results/step_cost.md), while short window rows gain nothing from it.
    """
    order = sorted(rows, key=len)
    batches, cur, cur_max = [], [], 0
    for s in order:
        new_max = max(cur_max, len(s))
        if cur and (new_max * (len(cur) + 1) > token_budget or (not pad and len(s) != cur_max)):
            batches.append(cur)
            cur, cur_max = [], 0
            new_max = len(s)
        cur.append(s)
        cur_max = new_max
    if cur:
        batches.append(cur)
    return batches


def _collate(batch: list[Row], pad_id: int, device) -> dict[str, torch.Tensor]:
    """Right-padded (B, T) tensors; position t of the (B, T - 1) ones holds the prediction of token t + 1.

    ``mask`` is 1 on the sampled tokens; ``old``, ``adv``, ``ref`` are their behaviour log-probs, advantage
    and reference log-probs; ``row_w`` the traj-mean weight of each token (w / T_d, w = 1 / decisions in
    its trajectory, T_d = tokens of its decision) and ``seq_len`` T_d (see loss.agg_loss).
    """
    width = max(len(r) for r in batch)
    n = len(batch)
    ids = torch.full((n, width), pad_id, dtype=torch.long)
    attn = torch.zeros((n, width), dtype=torch.long)
    mask, old, adv, ref, row_w, seq_len = (torch.zeros((n, width - 1)) for _ in range(6))
    for i, row in enumerate(batch):
        ids[i, : len(row)] = torch.tensor(row.ids)
        attn[i, : len(row)] = 1
        for s in row.samples:
            lo = len(s.prompt_ids) - 1  # logits at t predict token t+1
            hi = lo + len(s.response_ids)
            mask[i, lo:hi] = 1.0
            old[i, lo:hi] = torch.tensor(s.old_logprobs, dtype=torch.float32)
            adv[i, lo:hi] = s.advantage if s.is_weights is None else s.advantage * torch.tensor(s.is_weights)
            row_w[i, lo:hi] = s.traj_weight / len(s.response_ids)
            seq_len[i, lo:hi] = len(s.response_ids)
            if s.ref_logprobs is not None:
                ref[i, lo:hi] = torch.tensor(s.ref_logprobs, dtype=torch.float32)
    return {k: v.to(device) for k, v in dict(ids=ids, attn=attn, mask=mask, old=old, adv=adv, ref=ref,
                                             row_w=row_w, seq_len=seq_len).items()}


_PLAIN_HEAD: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def _plain_head(model) -> bool:
    """Whether the model's logits are its output embedding applied to the decoder's last hidden states
    (Qwen2 / Llama style; not where logits are post-processed, e.g. Gemma-2's soft-capping). Checked once
    per model on a few tokens."""
    if model not in _PLAIN_HEAD:
        ids = torch.arange(4, device=next(model.parameters()).device)[None] % model.config.vocab_size
        with torch.inference_mode():
            full = model(input_ids=ids).logits
            head = model.get_output_embeddings()(model.get_decoder()(input_ids=ids).last_hidden_state)
        _PLAIN_HEAD[model] = bool(torch.allclose(full.float(), head.float(), rtol=1e-4, atol=1e-4))
    return _PLAIN_HEAD[model]


def _trained_logits(model, b: dict[str, torch.Tensor], autocast: str = "none",
                    share: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    """Logits (N, V) and targets (N,) at the N trained positions of a collated batch only: the LM head is
    applied to those positions' hidden states, never to prompt or environment positions. ``autocast``
    (``policy.autocast``): the forward pass in bfloat16; the logits come back in float32 either way.
    ``share`` (``policy.share_prefix``): each distinct row, and each prefix rows share, is computed once
    (:func:`_trained_hidden`)."""
    keep = b["mask"].bool()
    targets = b["ids"][:, 1:][keep]
    with mixed_precision(model, autocast):
        if _plain_head(model):
            hidden = _trained_hidden(model.get_decoder(), b["ids"], b["attn"], keep, share)
            logits = model.get_output_embeddings()(hidden)
        else:
            logits = model(input_ids=b["ids"], attention_mask=b["attn"]).logits[:, :-1][keep]
    return logits.float(), targets


# policy.share_prefix in the update: a micro-batch's distinct rows go through the model level by level of
# their prefix tree, at most PREFIX_LEVELS forward passes; a level is cut only where it saves more token
# positions than LEVEL_COST (the price of one more pass on the tiny policy, measured in step_cost.md)
PREFIX_LEVELS = 4
LEVEL_COST = 32


def _adjacent_lcp(key: torch.Tensor) -> torch.Tensor:
    """Common-prefix length of each pair of consecutive rows of ``key`` (U, T) -> (U - 1,)."""
    return (key[1:] == key[:-1]).long().cumprod(1).sum(1)


def prefix_levels(width: int, lcp: torch.Tensor, max_levels: int | None = None,
                  level_cost: int | None = None) -> list[int]:
    """Depths ``0 = d_0 < d_1 < ... < d_K = width`` (K <= ``max_levels``) at which to cut the prefix tree of
    lexicographically sorted distinct rows whose consecutive common prefixes are ``lcp``.

    Level k runs positions ``d_k .. d_{k+1} - 1`` once per distinct prefix of length ``d_{k+1}``; with
    sorted rows that count is ``1 + #(lcp < d_{k+1})``. The cuts minimise the positions computed plus
    ``level_cost`` per level (dynamic programme over the depths where rows part, which is where an optimal
    cut lies). One level (``[0, width]``) is every distinct row in full. Defaults: ``PREFIX_LEVELS`` and
    ``LEVEL_COST`` as they are at the call."""
    max_levels = PREFIX_LEVELS if max_levels is None else max_levels
    level_cost = LEVEL_COST if level_cost is None else level_cost
    if len(lcp) == 0:
        return [0, width]
    depths = sorted({0, width, *(int(d) for d in lcp.unique() if 0 < int(d) < width)})
    prefixes = [1 + int((lcp < d).sum()) for d in depths]
    n, inf = len(depths), float("inf")
    best = [[inf] * n for _ in range(max_levels + 1)]  # best[k][j]: positions up to depths[j] in k levels
    came = [[0] * n for _ in range(max_levels + 1)]
    best[0][0] = 0.0
    for k in range(1, max_levels + 1):
        for j in range(1, n):
            for i in range(j):
                cost = best[k - 1][i] + prefixes[j] * (depths[j] - depths[i]) + level_cost
                if cost < best[k][j]:
                    best[k][j], came[k][j] = cost, i
    k = min(range(1, max_levels + 1), key=lambda k: best[k][n - 1])
    cuts, j = [width], n - 1
    for k in range(k, 0, -1):
        j = came[k][j]
        cuts.append(depths[j])
    return cuts[::-1]


def _trained_hidden(decoder, ids: torch.Tensor, attn: torch.Tensor, keep: torch.Tensor,
                    share: bool = True) -> torch.Tensor:
    """The decoder's last hidden states (N, H) at the N trained positions ``keep`` (B, T - 1) of right-padded
    rows ``ids`` / ``attn`` (B, T), in row-major order.

    With ``share``, each distinct row is computed once (group rollouts of one task repeat prompts and, at
    low entropy, whole responses), and so is each prefix several rows share: the rows are sorted into their
    prefix tree, which is cut into at most ``PREFIX_LEVELS`` levels (:func:`prefix_levels`); a level runs
    each distinct prefix's next span of tokens once, attending to its parent prefix's keys/values as a
    cache, and hands each child a view of them. On window rows the levels are the template's instruction
    (shared by every row), the step count and history a group's rows share, and each row's own tail.
    Causal attention makes this exact: a position's hidden state depends on its own tokens and the ones
    before it only; the gradients of a shared span are the sums over the rows that share it. Rows of a
    model whose cache is not a plain dynamic cache (sliding-window layers, ...) fall back to the full
    forward.
    """
    rows, cols = keep.nonzero(as_tuple=True)
    if not share or len(rows) == 0:
        return decoder(input_ids=ids, attention_mask=attn).last_hidden_state[:, :-1][keep]
    key = torch.where(attn.bool(), ids, torch.full_like(ids, -1))  # -1: padding
    distinct, inverse = torch.unique(key, dim=0, return_inverse=True)  # sorted lexicographically
    lcp = _adjacent_lcp(distinct)
    cuts = prefix_levels(distinct.shape[1], lcp)  # [0, width]: one level, every distinct row in full
    at, parts = [], []  # which trained positions each level returns, and their hidden states
    cache, parent_of = None, None
    for lo, hi in zip(cuts, cuts[1:]):
        starts = torch.ones(len(distinct), dtype=torch.bool, device=ids.device)
        starts[1:] = lcp < hi  # a distinct row starts a new prefix of length hi
        prefix_of = starts.long().cumsum(0) - 1  # each distinct row's prefix at depth hi
        first = starts.nonzero(as_tuple=True)[0]  # one distinct row per prefix
        if cache is not None:  # each prefix attends to its parent's keys/values (a gather: gradients add up)
            for layer in cache.layers:
                layer.keys = layer.keys.index_select(0, parent_of[first])
                layer.values = layer.values.index_select(0, parent_of[first])
        span = distinct[first, :hi]
        positions = torch.arange(lo, hi, device=ids.device).expand(len(first), -1)
        deeper = hi < cuts[-1]  # a next level attends to this one's keys/values
        out = decoder(input_ids=span[:, lo:].clamp_min(0), attention_mask=(span >= 0).long(),
                      position_ids=positions, past_key_values=cache, use_cache=deeper)
        cache = out.past_key_values if deeper else None
        if deeper and not all(type(layer) is DynamicLayer for layer in getattr(cache, "layers", [None])):
            return decoder(input_ids=ids, attention_mask=attn).last_hidden_state[rows, cols]
        inside = ((cols >= lo) & (cols < hi)).nonzero(as_tuple=True)[0]
        at.append(inside)
        parts.append(out.last_hidden_state[prefix_of[inverse[rows[inside]]], cols[inside] - lo])
        parent_of = prefix_of
    order = torch.empty(len(rows), dtype=torch.long, device=ids.device)
    order[torch.cat(at)] = torch.arange(len(rows), device=ids.device)
    return torch.cat(parts)[order]


def _spread(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Values at the trained positions (N,) back into the batch layout (B, T), zeros elsewhere."""
    return torch.zeros(mask.shape, dtype=values.dtype, device=values.device).masked_scatter(mask.bool(), values)


@torch.inference_mode()
def decision_logprobs(model, rows: list[Row], pad_id: int, token_budget: int, pad: bool = True,
                      autocast: str = "none", share: bool = True) -> list[list[float]]:
    """log pi(a|s) of every decision's sampled tokens under ``model`` as it is, in the order of
    ``[s for row in rows for s in row.samples]`` (``pad``: see :func:`pack_microbatches`; ``autocast``:
    ``policy.autocast``)."""
    device = next(model.parameters()).device
    found: dict[int, list[float]] = {}  # by id() of the sample: the micro-batches hold the rows by length
    for batch in pack_microbatches(rows, token_budget, pad):
        b = _collate(batch, pad_id, device)
        logits, targets = _trained_logits(model, b, autocast, share)
        lp = token_logprobs(logits, targets).tolist()  # row-major: rows in order, their decisions in order
        at = 0
        for row in batch:
            for s in row.samples:
                found[id(s)] = lp[at: at + len(s.response_ids)]
                at += len(s.response_ids)
    return [found[id(s)] for row in rows for s in row.samples]


def fill_ref_logprobs(ref_model, rows: list[Row], pad_id: int, token_budget: int, pad: bool = True,
                      autocast: str = "none", share: bool = True) -> None:
    """Reference log-probs of every decision's sampled tokens (``pad``: see :func:`pack_microbatches`)."""
    samples = [s for row in rows for s in row.samples]
    for s, lp in zip(samples, decision_logprobs(ref_model, rows, pad_id, token_budget, pad, autocast, share)):
        s.ref_logprobs = lp


def rollout_mismatch(model, rows: list[Row], pad_id: int, token_budget: int, pad: bool,
                     tis_cap: float | None, autocast: str = "none", share: bool = True) -> dict:
    """``train/rollout_logprob_gap`` between the backend's behaviour log-probs and the trainer's (``model``
    in eval mode, as the backends generate), and with ``tis_cap`` truncated IS (:mod:`creditflow.train.mismatch`)."""
    training = model.training
    model.eval()
    try:
        train = decision_logprobs(model, rows, pad_id, token_budget, pad, autocast, share)
    finally:
        model.train(training)
    return check_mismatch([s for row in rows for s in row.samples], train, tis_cap)


def policy_update(model, optimizer, rows: list[Row], cfg: RunConfig, pad_id: int,
                  rng: np.random.Generator, world: World = World()) -> dict:
    """PPO epochs x mini-batches over ``rows``, one optimizer step per mini-batch; returns mean stats
    (none when there is no row).

    The objective is :mod:`creditflow.train.loss`'s: PPO-clip + k3 KL - entropy per token, aggregated by
    ``rl.loss_agg`` with the mini-batch's normalisers, so the micro-batch gradients add up to the
    mini-batch gradient. Mini-batches split the rows: decisions in the ``window`` layout, whole
    trajectories in the ``conversation`` layout; within one mini-batch the loss is the same in both.

    Under N processes (``world``) each process passes its own rows and splits them into the same number
    of mini-batches; mini-batch k is the union of the processes' k-th parts: its normalisers are totals
    over the processes and the gradients are summed over them before clipping, so every process takes
    the step one process would take on that union. With ``rl.minibatches=1`` that is the whole step's
    batch: the update equals the one-process update on all rows (up to float summation order).
    """
    rl = cfg.rl
    device = next(model.parameters()).device
    stats = {"loss": [], "pg_loss": [], "kl": [], "entropy": [], "clip_frac": [], "ratio": [], "grad_norm": []}
    parts = min(rl.minibatches, all_max(len(rows), world))  # the same on every process; no empty part overall
    if parts == 0:
        return {}
    model.train()
    for _ in range(rl.ppo_epochs):
        order = rng.permutation(len(rows))
        for chunk in np.array_split(order, parts):
            mini = [rows[i] for i in chunk]  # may be empty on a process with fewer rows than parts
            decisions = [s for row in mini for s in row.samples]
            # With no KL and no entropy term, a zero-advantage sample contributes exactly zero loss and
            # gradient (-min(r*0, clip(r)*0) = 0): skip the forward/backward of a row whose decisions all
            # have zero advantage. The normalisers below still count them, so the update is identical; only
            # the logged ratio/entropy/clip stats cover fewer rows.
            if rl.kl_coef == 0 and rl.entropy_coef == 0:
                work = [row for row in mini if any(s.advantage != 0.0 for s in row.samples)]
            else:
                work = mini
            # agg_loss normalisers of the whole mini-batch, over every process (see loss.agg_loss); work
            # tokens: the normaliser of the logged token means
            n_tokens, n_seqs, traj_total, work_tokens = all_sum(
                [sum(len(s.response_ids) for s in decisions), len(decisions), sum(s.traj_weight for s in decisions),
                 sum(len(s.response_ids) for row in work for s in row.samples)], world)
            n_work = max(1, work_tokens)
            optimizer.zero_grad(set_to_none=True)
            acc = {k: 0.0 for k in ("loss", "pg_loss", "kl", "entropy", "clip_frac", "ratio")}
            for micro in pack_microbatches(work, rl.token_budget, pad=cfg.rollout.history == "window"):
                b = _collate(micro, pad_id, device)
                mask = b["mask"]
                logits, targets = _trained_logits(model, b, cfg.policy.autocast, cfg.policy.share_prefix)
                logp = _spread(token_logprobs(logits, targets), mask)
                with torch.set_grad_enabled(rl.entropy_coef > 0):  # else entropy is only logged
                    entropy = _spread(entropy_from_logits(logits), mask)
                pg, pg_stats = ppo_clip_objective(logp, b["old"], b["adv"], mask, clip_low=rl.clip_eps,
                                                  clip_high=rl.clip_eps_high, n_tokens=n_work)
                kl, kl_stats = kl_term(logp, b["ref"], mask, coef=rl.kl_coef, n_tokens=n_work)
                ent, ent_stats = entropy_term(entropy, mask, coef=rl.entropy_coef, n_tokens=n_work)
                loss = agg_loss(pg + kl + ent, mask, rl.loss_agg, n_tokens=n_tokens, n_seqs=n_seqs,
                                row_weights=b["row_w"], total_weight=traj_total, seq_lengths=b["seq_len"])
                loss.backward()
                for k, v in {"loss": loss.detach(), **pg_stats, **kl_stats, **ent_stats}.items():
                    acc[k] += float(v)
            if not work:  # all-zero gradient, but AdamW's moments still move the weights, as unskipped
                for p in model.parameters():
                    if p.requires_grad:
                        p.grad = torch.zeros_like(p)
            all_reduce_grads(model.parameters(), world)
            grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), rl.max_grad_norm)
            optimizer.step()
            for k, v in zip(acc, all_sum(list(acc.values()), world)):  # each process holds its share of the sums
                stats[k].append(v)
            stats["grad_norm"].append(float(grad_norm))
    return {f"train/{k}": float(np.mean(v)) for k, v in stats.items() if v}


class RLTrainer:
    """Owns policy, reference, optimizer, engines and the loop state of one RL run.

    ``world``: this process among the launched ones (:mod:`creditflow.train.distributed`); every process
    runs the same loop, rank 0's ``logger`` writes the metrics and rank 0 writes the checkpoints.
    """

    def __init__(self, cfg: RunConfig, model, tokenizer, train_engine: RolloutEngine, eval_engine: RolloutEngine,
                 out_dir: Path, logger, hooks: Hooks | None = None, progress: Callable | None = None,
                 ref_model=None, eval_sampling: SamplingParams | None = None, world: World = World()):
        self.cfg = cfg
        self.world = world
        broadcast_parameters(model, world)  # the copies start equal (as DDP's wrapper makes them)
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
        # reference = the policy RL starts from (pi_SFT) unless given; with LoRA that is the model itself
        # with the adapter disabled (see reference()), so no copy is made
        if cfg.rl.kl_coef > 0 and not lora.is_lora(model):
            self.ref_model = (ref_model if ref_model is not None else copy.deepcopy(model)).eval()
            for p in self.ref_model.parameters():
                p.requires_grad_(False)
        # LoRA: the adapter's parameters only (the rest do not require gradients)
        self.optimizer = torch.optim.AdamW(lora.trainable_parameters(model), lr=cfg.rl.lr,
                                           weight_decay=cfg.rl.weight_decay)
        self.task_rng = np.random.default_rng(cfg.seed)
        self.update_rng = np.random.default_rng(cfg.seed + 1)
        self.step = 0
        self.env_steps = 0
        self.eval_seeds = split_seeds(cfg.env, "validation", cfg.rl.eval_episodes, cfg.rl.eval_episodes)
        self.test_seeds = split_seeds(cfg.env, "test", cfg.rl.test_episodes, cfg.rl.eval_episodes,
                                      eval_engine.env_factory)

    # -- pieces --------------------------------------------------------------------------------
    def fresh_specs(self, step: int) -> list[TaskSpec]:
        seeds = self.task_rng.integers(0, self.cfg.env.eval_seed_offset, size=self.cfg.rollout.tasks_per_step)
        name = self.cfg.env.name
        return [TaskSpec(task_id=f"{name}/{int(s)}", seed=int(s), group_id=f"step{step}/{name}/{int(s)}")
                for s in seeds]

    @contextmanager
    def reference(self):
        """The reference policy of the KL term: the frozen copy, or the LoRA policy with its adapter off."""
        if self.ref_model is not None:
            yield self.ref_model
        else:
            with lora.adapter_disabled(self.model) as base:
                yield base

    def run_eval(self, split: str = "validation") -> dict:
        """Held-out evaluation on the validation split (``eval/*``) or the test split (``test/*``); under N
        processes each evaluates its share of the seeds and the metrics are those of all the episodes."""
        seeds = self.eval_seeds if split == "validation" else self.test_seeds
        _, trajs = evaluate(self.eval_engine, shard(seeds, self.world), self.eval_sampling, self.cfg.env.name)
        return rollout_metrics(gather_trajectories(trajs, self.world), "eval" if split == "validation" else "test")

    def train_step(self) -> dict:
        cfg = self.cfg
        step = self.step + 1
        t0 = time.perf_counter()
        specs = self.hooks.make_specs(step, self.fresh_specs(step))  # the same on every process
        trajs = self.train_engine.rollout(shard(specs, self.world), cfg.rollout.group_size)
        t_roll = time.perf_counter() - t0
        everyone = gather_trajectories(trajs, self.world)  # `trajs` itself in one process
        hook_metrics = self.hooks.after_rollout(step, specs, everyone)  # may drop groups in place
        if everyone is not trajs:  # drop here the groups the hooks dropped from everyone's trajectories
            kept = {t.group_id for t in everyone}
            trajs[:] = [t for t in trajs if t.group_id in kept]
        metrics = rollout_metrics(everyone, "train")
        metrics.update(hook_metrics)
        t1 = time.perf_counter()
        credit_metrics = self.estimator(trajs, self.credit_knobs)  # groups are whole on each process
        credit_metrics["time/credit_ms"] = (time.perf_counter() - t1) * 1000
        rows = rows_from(trajs, cfg.rollout.history)
        samples = [s for row in rows for s in row.samples]
        t_ref = time.perf_counter()
        gap = cfg.rl.logprob_gap if cfg.rl.logprob_gap is not None else (
            cfg.policy.backend != "hf" or cfg.rl.tis_cap is not None)
        mismatch = {}
        if rows and (gap or cfg.rl.tis_cap is not None):  # rollout_logprob_gap; rl.tis_cap: TIS (mismatch.py)
            mismatch = rollout_mismatch(self.model, rows, self.tok.pad_token_id, cfg.rl.token_budget,
                                        pad=cfg.rollout.history == "window", tis_cap=cfg.rl.tis_cap,
                                        autocast=cfg.policy.autocast, share=cfg.policy.share_prefix)
        t_mismatch = time.perf_counter()
        if cfg.rl.kl_coef > 0:
            with self.reference() as ref:
                fill_ref_logprobs(ref, rows, self.tok.pad_token_id, cfg.rl.token_budget,
                                  pad=cfg.rollout.history == "window", autocast=cfg.policy.autocast,
                                  share=cfg.policy.share_prefix)
        t2 = time.perf_counter()
        update = policy_update(self.model, self.optimizer, rows, cfg, self.tok.pad_token_id, self.update_rng,
                               self.world)
        if update:
            metrics.update(update)
            self.train_engine.backend.sync_weights(self.model)  # a vLLM engine gets the new weights
        times = {
            "time/rollout_s": t_roll,
            "time/mismatch_s": t_mismatch - t_ref,
            "time/ref_s": t2 - t_mismatch,
            "time/update_s": time.perf_counter() - t2,
            "time/step_s": time.perf_counter() - t0,
        }
        # what each process measured on its own share: credit metrics (per trajectory), the rollout/trainer
        # gap (per token), advantages and response lengths (exact over all samples), times (the slowest)
        tokens = sum(len(s.response_ids) for s in samples)
        parts = gather({"credit": credit_metrics, "trajs": len(trajs), "mismatch": mismatch, "tokens": tokens,
                        "advs": [s.advantage for s in samples], "lengths": [len(s.response_ids) for s in samples],
                        "times": times}, self.world)
        metrics.update(reduce_metrics([(p["credit"], p["trajs"]) for p in parts], sums=("/groups", "/anchor_groups"),
                                      maxes=("time/", "credit/time_ms")))
        metrics.update(reduce_metrics([(p["mismatch"], p["tokens"]) for p in parts]))
        advs = [a for p in parts for a in p["advs"]]
        lengths = [n for p in parts for n in p["lengths"]]
        self.env_steps += sum(len(t) for t in everyone)
        metrics.update({
            "step": step,
            "env_steps": self.env_steps,
            "dist/world_size": self.world.size,
            "train/samples": len(advs),
            "train/adv_mean": float(np.mean(advs)) if advs else 0.0,
            "train/adv_std": float(np.std(advs)) if advs else 0.0,
            "train/response_tokens": float(np.mean(lengths)) if lengths else 0.0,
            **reduce_metrics([(p["times"], 1) for p in parts], maxes=("time/",)),
        })
        self.step = step
        return metrics

    # -- loop ----------------------------------------------------------------------------------
    def fit(self) -> dict:
        cfg = self.cfg.rl
        last: dict = {}
        if self.step == 0:
            first = self.run_eval()
            if self.test_seeds:  # pi_SFT on the test split, for the reported gain
                first.update(self.run_eval("test"))
            first.update({"step": 0, "env_steps": 0, "dist/world_size": self.world.size})
            self.logger.log(first)
        while self.step < cfg.steps:
            metrics = self.train_step()
            if (cfg.eval_every and self.step % cfg.eval_every == 0) or self.step == cfg.steps:
                metrics.update(self.run_eval())
            if self.test_seeds and self.step == cfg.steps:
                metrics.update(self.run_eval("test"))
            self.logger.log(metrics)
            last = metrics
            if self.progress:
                self.progress(self.step, metrics)
            if (cfg.save_every and self.step % cfg.save_every == 0) or self.step == cfg.steps:
                save_checkpoint(self)
        return last

    def state_dict(self) -> dict:
        """The loop state. Under N processes (a collective: every process calls it) ``rng`` holds each
        process's RNG states in rank order (they sample different rollouts and mini-batch orders) and
        ``hooks_digests`` each process's digest of the curriculum state, which must all be equal."""
        rng = rng_state(self.task_rng, self.update_rng)
        hooks = self.hooks.state_dict()
        state = {"step": self.step, "env_steps": self.env_steps, "rng": rng, "hooks": hooks,
                 "world_size": self.world.size}
        if self.world.distributed:
            state["rng"] = gather(rng, self.world)
            state["hooks_digests"] = gather(state_digest(hooks), self.world)
            if len(set(state["hooks_digests"])) != 1:
                raise RuntimeError(f"step {self.step}: the curriculum state differs between processes "
                                   f"({state['hooks_digests']}); the run is not data-parallel any more")
        return state

    def load_state_dict(self, state: dict) -> None:
        """The loop state of :meth:`state_dict`, from a checkpoint of as many processes as this run has."""
        saved = int(state.get("world_size", 1))
        if saved != self.world.size:
            raise ValueError(f"the checkpoint was written by {saved} process(es), this run has {self.world.size}")
        self.step = state["step"]
        self.env_steps = state["env_steps"]
        rng = state["rng"][self.world.rank] if isinstance(state["rng"], list) else state["rng"]
        set_rng_state(rng, self.task_rng, self.update_rng)
        self.hooks.load_state_dict(state.get("hooks", {}))


def state_digest(state: dict) -> str:
    """A digest of a (picklable) state dict, to check that processes hold the same state."""
    return hashlib.sha256(pickle.dumps(state, protocol=4)).hexdigest()
