"""Multi-turn group RL trainer: rollouts -> credit -> PPO-clip + KL update, with eval and checkpoints.

One training step (:meth:`RLTrainer.train_step`) reads as its phases:

  1. **rollout**: draw B training tasks (seeded generator), roll out G episodes each with the current policy;
  2. **hooks**: the curriculum sees the rollout and says which groups not to train on (:mod:`creditflow.rollout.hooks`);
  3. **credit**: the estimator (``rl.algo``: grpo, rloo, gigpo, rewardflow, ...) sets each step's advantage, which
     the rows (:mod:`creditflow.trainer.sequences`) put on that step's response tokens;
  4. **old / reference log-probs**: the trainer's own log-probs of the sampled tokens where the rollout/trainer
     gap or TIS needs them (:mod:`creditflow.trainer.mismatch`), the reference policy's (pi_SFT) for the KL term;
  5. **update**: PPO-clip surrogate with per-token ratio against the behaviour log-probs, k3 KL to the
     reference, entropy logged; micro-batches packed by token budget; grad clipping; AdamW
     (:func:`policy_update`, every forward pass through one :class:`~creditflow.trainer.forward.Forward`);
  6. **sync**: a generation engine that holds its own weights (vLLM) gets the new ones;
  7. **metrics**: each measured on this process's share, reduced over the processes by the rule declared with
     it (:func:`creditflow.trainer.distributed.reduce_metrics`).

Evaluation on held-out seeds every ``eval_every`` steps; metrics to JSONL + TensorBoard; checkpoints hold
model, optimizer, RNG states and step so ``--resume`` continues exactly.

Under N processes (:mod:`creditflow.trainer.distributed`) every process draws the same B tasks and rolls out
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
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, ContextManager

import numpy as np
import torch

from creditflow import credit
from creditflow.config import CheckpointConfig, EnvConfig, PolicyConfig, RLConfig, RolloutConfig
from creditflow.policy import lora
from creditflow.policy.backends.base import SamplingParams
from creditflow.rollout.engine import RolloutEngine, TaskSpec
from creditflow.rollout.evaluate import evaluate_seeds, rollout_metrics
from creditflow.rollout.hooks import Hooks
from creditflow.rollout.seeding import rng_state, set_rng_state, split_seeds
from creditflow.trainer.checkpoint import save_checkpoint
from creditflow.trainer.distributed import (MAX, MEAN, POOLED_MEAN, POOLED_STD, SUM, Local, World, all_max,
                                          all_reduce_grads, all_sum, broadcast_parameters, gather,
                                          gather_rollout, gather_trajectories, reduce_metrics, shard)
from creditflow.trainer.forward import Forward, spread
from creditflow.trainer.loss import (agg_loss, entropy_from_logits, entropy_term, kl_term, ppo_clip_objective,
                                   token_logprobs)
from creditflow.trainer.mismatch import check_mismatch
from creditflow.trainer.sequences import Row, decisions, rows_from


def fill_ref_logprobs(ref_model, rows: list[Row], fwd: Forward) -> None:
    """Reference log-probs of every decision's sampled tokens."""
    for s, lp in zip(decisions(rows), fwd.logprobs(ref_model, rows)):
        s.ref_logprobs = lp


def rollout_mismatch(model, rows: list[Row], fwd: Forward, tis_cap: float | None) -> dict:
    """``train/rollout_logprob_gap`` between the backend's behaviour log-probs and the trainer's (``model``
    in eval mode, as the backends generate), and with ``tis_cap`` truncated IS (:mod:`creditflow.trainer.mismatch`)."""
    training = model.training
    model.eval()
    try:
        train = fwd.logprobs(model, rows)
    finally:
        model.train(training)
    return check_mismatch(decisions(rows), train, tis_cap)


def policy_update(model, optimizer, rows: list[Row], rl: RLConfig, fwd: Forward, rng: np.random.Generator,
                  world: World = World(), skip: bool = False) -> dict:
    """PPO epochs x mini-batches over ``rows``, one optimizer step per mini-batch; returns mean stats
    (none when there is no row). ``rl``: the objective's settings; ``fwd``: how the policy runs on rows.

    The objective is :mod:`creditflow.trainer.loss`'s: PPO-clip + k3 KL - entropy per token, aggregated by
    ``rl.loss_agg`` with the mini-batch's normalisers, so the micro-batch gradients add up to the
    mini-batch gradient. Mini-batches split the rows: decisions in the ``window`` layout, whole
    trajectories in the ``conversation`` layout; within one mini-batch the loss is the same in both.

    Under N processes (``world``) each process passes its own rows and splits them into the same number
    of mini-batches; mini-batch k is the union of the processes' k-th parts: its normalisers are totals
    over the processes and the gradients are summed over them before clipping, so every process takes
    the step one process would take on that union. With ``rl.minibatches=1`` that is the whole step's
    batch: the update equals the one-process update on all rows (up to float summation order).

    ``fwd.clock(phase)``, if given, is entered around each phase of the work: ``pack`` (micro-batches packed and
    collated), ``forward`` (logits at the trained positions, log-probs, entropy), ``loss``, ``backward``,
    ``step`` (gradient sum over processes, clipping, the optimizer); benchmarks/step_cost.py times them.

    ``skip``: no term of the loss has a gradient (every advantage 0, no entropy bonus, and no KL term or a
    policy still equal to its reference): no forward or backward pass runs, and the mini-batch order is drawn as
    before. Where AdamW has moments (an earlier step had signal) it steps on zero gradients, as it would have:
    they still move the weights. Where it has none yet and there is no weight decay, nothing would move, and no
    optimizer step is taken (AdamW's step count then starts at the first step with signal).
    """
    phase = fwd.clock or _untimed
    device = next(model.parameters()).device
    stats = {"loss": [], "pg_loss": [], "kl": [], "entropy": [], "clip_frac": [], "ratio": [], "grad_norm": []}
    parts = min(rl.minibatches, all_max(len(rows), world))  # the same on every process; no empty part overall
    if parts == 0:
        return {}
    # a skipped update before AdamW holds any state, without weight decay, moves nothing: no optimizer step either
    idle = skip and not optimizer.state and all(g.get("weight_decay", 0) == 0 for g in optimizer.param_groups)
    model.train()
    for _ in range(rl.ppo_epochs):
        order = rng.permutation(len(rows))
        for chunk in np.array_split(order, parts):
            mini = [rows[i] for i in chunk]  # may be empty on a process with fewer rows than parts
            mini_decisions = decisions(mini)
            # With no KL and no entropy term, a zero-advantage sample contributes exactly zero loss and
            # gradient (-min(r*0, clip(r)*0) = 0): skip the forward/backward of a row whose decisions all
            # have zero advantage. The normalisers below still count them, so the update is identical; only
            # the logged ratio/entropy/clip stats cover fewer rows.
            if skip:
                work = []
            elif rl.kl_coef == 0 and rl.entropy_coef == 0:
                work = [row for row in mini if any(s.advantage != 0.0 for s in row.samples)]
            else:
                work = mini
            # agg_loss normalisers of the whole mini-batch, over every process (see loss.agg_loss); work
            # tokens: the normaliser of the logged token means
            n_tokens, n_seqs, traj_total, work_tokens = all_sum(
                [sum(len(s.response_ids) for s in mini_decisions), len(mini_decisions),
                 sum(s.traj_weight for s in mini_decisions), sum(len(s.response_ids) for s in decisions(work))],
                world)
            n_work = max(1, work_tokens)
            optimizer.zero_grad(set_to_none=True)
            acc = {k: 0.0 for k in ("loss", "pg_loss", "kl", "entropy", "clip_frac", "ratio")}
            batches = fwd.batches(work, device)
            while True:
                with phase("pack"):
                    b = next(batches, (None, None))[1]
                if b is None:
                    break
                mask = b["mask"]
                with phase("forward"):
                    logits, targets = fwd.trained_logits(model, b)
                    logp = spread(token_logprobs(logits, targets), mask)
                    with torch.set_grad_enabled(rl.entropy_coef > 0):  # else entropy is only logged
                        entropy = spread(entropy_from_logits(logits), mask)
                with phase("loss"):
                    pg, pg_stats = ppo_clip_objective(logp, b["old"], b["adv"], mask, clip_low=rl.clip_eps,
                                                      clip_high=rl.clip_eps_high, n_tokens=n_work)
                    kl, kl_stats = kl_term(logp, b["ref"], mask, coef=rl.kl_coef, n_tokens=n_work)
                    ent, ent_stats = entropy_term(entropy, mask, coef=rl.entropy_coef, n_tokens=n_work)
                    loss = agg_loss(pg + kl + ent, mask, rl.loss_agg, n_tokens=n_tokens, n_seqs=n_seqs,
                                    row_weights=b["row_w"], total_weight=traj_total, seq_lengths=b["seq_len"])
                with phase("backward"):
                    loss.backward()
                for k, v in {"loss": loss.detach(), **pg_stats, **kl_stats, **ent_stats}.items():
                    acc[k] += float(v)
            if skip and idle:  # nothing moves: no moments yet, no weight decay (the same on every process)
                for k in acc:
                    stats[k].append(0.0)
                stats["grad_norm"].append(0.0)
                continue
            with phase("step"):
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


def _untimed(phase: str) -> ContextManager:
    return nullcontext()


class Stopwatch(dict):
    """Wall times of named phases in seconds (``scale=1000``: milliseconds), and the total since it started."""

    def __init__(self):
        super().__init__()
        self.start = time.perf_counter()

    @contextmanager
    def __call__(self, phase: str, scale: float = 1.0):
        t0 = time.perf_counter()
        yield
        self[phase] = (time.perf_counter() - t0) * scale

    def total(self, name: str) -> dict:
        self[name] = time.perf_counter() - self.start
        return self


@dataclass(frozen=True)
class RLRun:
    """One RL run as the trainer sees it, handed down by the recipe: the sections of the run config it reads
    (never the whole config), the run directory, this process among the launched ones (``world``,
    :mod:`creditflow.trainer.distributed`) and the sampling of held-out evaluation (default: the eval engine's)."""

    rl: RLConfig
    env: EnvConfig
    rollout: RolloutConfig
    policy: PolicyConfig
    checkpoint: CheckpointConfig
    seed: int
    out_dir: Path
    world: World = World()
    eval_sampling: SamplingParams | None = None


class RLTrainer:
    """Owns policy, reference, optimizer, engines and the loop state of one RL run.

    ``run.world``: this process among the launched ones; every process runs the same loop, rank 0's ``logger``
    writes the metrics and rank 0 writes the checkpoints. ``progress(step, metrics)``, set by the recipe, is
    called after each step (and with step 0 after the first evaluation).
    """

    def __init__(self, run: RLRun, model, tokenizer, train_engine: RolloutEngine, eval_engine: RolloutEngine,
                 logger, hooks: Hooks | None = None, ref_model=None):
        cfg = self.cfg = run
        self.world = world = run.world
        broadcast_parameters(model, world)  # the copies start equal (as DDP's wrapper makes them)
        self.model = model
        self.tok = tokenizer
        self.train_engine = train_engine
        self.eval_engine = eval_engine
        self.out_dir = Path(run.out_dir)
        self.logger = logger
        self.hooks = hooks or Hooks()
        self.progress: Callable | None = None
        self.eval_sampling = run.eval_sampling or eval_engine.sampling
        # unknown algo or bad knob => one-line error before any work; the knobs are validated once, here
        self.estimator = credit.get_estimator(cfg.rl.algo)
        self.credit_knobs = credit.validate_knobs(cfg.rl.algo, cfg.rl.credit)
        # how the policy runs on training rows (update, reference and trainer log-probs), once for the run
        self.forward = Forward.from_sections(cfg.rl, cfg.rollout, cfg.policy, tokenizer.pad_token_id)
        # the trainer's own log-probs of the sampled tokens: for rl.logprob_gap (default: when another
        # backend or a bf16 rollout copy generates) and for TIS (rl.tis_cap), which trains against them (mismatch.py)
        gap = cfg.rl.logprob_gap if cfg.rl.logprob_gap is not None else (
            cfg.policy.backend != "hf" or cfg.policy.rollout_dtype != "same" or cfg.rl.tis_cap is not None)
        self.trainer_logprobs = gap or cfg.rl.tis_cap is not None
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
        # the policy equals its KL reference (a fresh start: the reference is a copy of it, or a LoRA policy's
        # fresh adapter, which adds 0): the KL term has no gradient until an update moves the weights
        self.at_reference = ref_model is None
        self.on_checkpoint: Callable[[Path], None] | None = None  # the recipe's: says the first one's size
        self.eval_seeds = split_seeds(cfg.env, "validation", cfg.rl.eval_episodes, cfg.rl.eval_episodes)
        self.test_seeds = split_seeds(cfg.env, "test", cfg.rl.test_episodes, cfg.rl.eval_episodes,
                                      eval_engine.env_factory)

    # -- pieces --------------------------------------------------------------------------------
    def fresh_specs(self, step: int) -> list[TaskSpec]:
        """The step's training tasks: fresh seeds below ``env.eval_seed_offset``, or ``env.train_pool``'s tasks."""
        env, n = self.cfg.env, self.cfg.rollout.tasks_per_step
        if env.train_pool:  # a fixed pool: the first train_pool validation seeds, distinct within a step
            seeds = env.eval_seed_offset + self.task_rng.choice(env.train_pool, size=n, replace=False)
        else:
            seeds = self.task_rng.integers(0, env.eval_seed_offset, size=n)
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
        _, trajs = evaluate_seeds(self.eval_engine, shard(seeds, self.world), self.eval_sampling, self.cfg.env.name)
        return rollout_metrics(gather_trajectories(trajs, self.world), "eval" if split == "validation" else "test")

    # -- one step ------------------------------------------------------------------------------
    def train_step(self) -> dict:
        """One RL step: rollout -> hooks -> credit -> old/ref log-probs -> update -> sync -> metrics."""
        cfg, step, clock = self.cfg, self.step + 1, Stopwatch()
        with clock("rollout_s"):  # every process the same specs, each its own share of them
            specs = self.hooks.make_specs(step, self.fresh_specs(step))
            mine = self.train_engine.rollout_groups(shard(specs, self.world), cfg.rollout.group_size)
        everyone = gather_rollout(mine, self.world)  # every process's trajectories (without token ids)
        review = self.hooks.after_rollout(step, specs, everyone)  # curriculum: metrics, the groups to drop
        trajs, seen = review.kept(mine.trajectories), review.kept(everyone.trajectories)
        metrics = {**rollout_metrics(seen, "train"), **review.metrics}
        with clock("credit_ms", scale=1000):  # per-step advantages, in place; groups are whole on each process
            credit_metrics = self.estimator(trajs, self.credit_knobs)
        rows = rows_from(trajs, cfg.rollout.history)
        skip = self.no_gradient(rows)  # no signal and no other loss term: no reference or backward pass
        with clock("mismatch_s"):  # old log-probs: the trainer's, for the rollout/trainer gap and TIS
            mismatch = rollout_mismatch(self.model, rows, self.forward, cfg.rl.tis_cap) if (
                rows and self.trainer_logprobs) else {}
        with clock("ref_s"):  # reference log-probs for the KL term
            if cfg.rl.kl_coef > 0 and not skip:
                with self.reference() as ref:
                    fill_ref_logprobs(ref, rows, self.forward)
        with clock("update_s"):
            update = policy_update(self.model, self.optimizer, rows, cfg.rl, self.forward, self.update_rng, self.world,
                                   skip=skip)
            if update:  # sync: a vLLM engine or a bf16 rollout copy gets the new weights
                self.train_engine.backend.sync_weights(self.model)
        if update and (not skip or cfg.rl.weight_decay > 0):  # the weights moved off the reference
            self.at_reference = False
        metrics.update(update)
        metrics["train/update_skipped"] = float(skip)
        self.step, self.env_steps = step, self.env_steps + sum(len(t) for t in seen)
        metrics.update({"step": step, "env_steps": self.env_steps, "dist/world_size": self.world.size})
        metrics.update(self.step_metrics(len(trajs), rows, credit_metrics, mismatch, clock.total("step_s")))
        return metrics

    def no_gradient(self, rows: list[Row]) -> bool:
        """The step carries no signal and no other term of the loss has a gradient, so its update needs no
        forward or backward pass: every decision's advantage is 0 on every process, there is no entropy bonus,
        and the KL term is off or the policy is still its reference (its gradient is 0 there)."""
        rl = self.cfg.rl
        if rl.entropy_coef > 0 or (rl.kl_coef > 0 and not self.at_reference):
            return False
        nonzero = sum(1 for s in decisions(rows) if s.advantage != 0.0)
        return all_max(nonzero, self.world) == 0

    def step_metrics(self, n_trajs: int, rows: list[Row], credit_metrics: dict, mismatch: dict,
                     times: dict) -> dict:
        """The step's metrics measured on this process's share, each with its rule over the processes."""
        samples = decisions(rows)
        advantages, lengths = [s.advantage for s in samples], [len(s.response_ids) for s in samples]
        return reduce_metrics({
            **{k: Local(v, credit.METRIC_RULES.get(k, MEAN), weight=n_trajs)  # per trajectory, counts added
               for k, v in credit_metrics.items()},
            **{k: Local(v, MEAN, weight=sum(lengths)) for k, v in mismatch.items()},  # per token
            "train/samples": Local(len(samples), SUM),
            "train/adv_mean": Local(advantages, POOLED_MEAN),  # exact over every process's decisions
            "train/adv_std": Local(advantages, POOLED_STD),
            "train/response_tokens": Local(lengths, POOLED_MEAN),
            **{f"time/{k}": Local(v, MAX) for k, v in times.items()},  # the slowest process sets the pace
        }, self.world)

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
            if self.progress:  # the policy RL starts from, before step 1
                self.progress(0, first)
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
                path = save_checkpoint(self)
                if self.on_checkpoint is not None and self.world.main:
                    self.on_checkpoint(path)
        return last

    def state_dict(self) -> dict:
        """The loop state. Under N processes (a collective: every process calls it) ``rng`` holds each
        process's RNG states in rank order (they sample different rollouts and mini-batch orders) and
        ``hooks_digests`` each process's digest of the curriculum state, which must all be equal."""
        rng = rng_state(self.task_rng, self.update_rng)
        hooks = self.hooks.state_dict()
        state = {"step": self.step, "env_steps": self.env_steps, "rng": rng, "hooks": hooks,
                 "world_size": self.world.size, "at_reference": self.at_reference}
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
        # a policy no update has moved yet (every step so far without signal) is still its reference; checkpoints
        # from before this was saved: moved
        self.at_reference = bool(state.get("at_reference", False))
        rng = state["rng"][self.world.rank] if isinstance(state["rng"], list) else state["rng"]
        set_rng_state(rng, self.task_rng, self.update_rng)
        self.hooks.load_state_dict(state.get("hooks", {}))


def state_digest(state: dict) -> str:
    """A digest of a (picklable) state dict, to check that processes hold the same state."""
    return hashlib.sha256(pickle.dumps(state, protocol=4)).hexdigest()
