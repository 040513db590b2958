"""The ``sft`` stage: π_SFT, the policy (``policy.model``, or the tiny default built here) fine-tuned on the env's
expert demonstrations, in ``out_dir/sft_model``.

:func:`run_sft` is the stage as a run of its own (``creditflow sft``, ``creditflow.sft``); ``train`` (without
``--model``) and ``rro`` run the same :class:`SFTRecipe` inside their own run directory.
"""

from __future__ import annotations

import json
import shlex
import shutil
from pathlib import Path
from typing import Callable

from creditflow.atomic import publish_dir, temporary_dir, write_atomic
from creditflow.config import RunConfig
from creditflow.envs.configured import env_factory, env_label, require_expert
from creditflow.errors import Interrupted, UserError
from creditflow.policy import inference
from creditflow.policy.factory import TINY_CORPUS_SEEDS, build_tiny_default, prompt_builder
from creditflow.policy.load import load_policy
from creditflow.policy.tiny import tiny_model_built
from creditflow.policy.tools import TOOL_MARKUP
from creditflow.recipes.checks import check_run
from creditflow.recipes.progress import RunProgress, rank_progress
from creditflow.recipes.rundir import new_run_dir, start_world
from creditflow.recipes.sections import engine_settings
from creditflow.rollout.expert import expert_corpus, expert_tool_conversations, expert_trajectories
from creditflow.policy.backends.factory import sampling_params
from creditflow.rollout.evaluate import evaluate_seeds, rollout_metrics
from creditflow.rollout.factory import make_engine, success_rule
from creditflow.rollout.seeding import seed_everything, split_seeds
from creditflow.trainer import distributed
from creditflow.trainer.distributed import World
from creditflow.trainer.sft import (check_max_length, demo_examples, prompt_lengths, tool_calling_tokenizer,
                                    tool_corpus, tool_examples, train_sft)
from creditflow.trainer.trl_runner import TRLOptions


class SFTRecipe:
    """π_SFT in torchtune's shape. Construction takes a checked env factory (:func:`run_sft` checks the config
    first; ``train`` and ``rro`` pass their own) and the run directory ``out``; :meth:`setup` (no arguments, as
    :meth:`TrainRecipe.setup <creditflow.recipes.train.TrainRecipe.setup>`) collects the demonstrations and makes
    the policy and its examples; :meth:`run` fine-tunes and publishes ``out/sft_model``. Under N processes TRL
    trains data parallel (each process a share of every batch) and rank 0 saves."""

    def __init__(self, cfg: RunConfig, train_factory, out: Path, log: Callable[[str], None],
                 progress: RunProgress | None = None, world: World = World()):
        self.cfg, self.factory, self.out, self.log, self.world = cfg, train_factory, out, log, world
        self.progress = progress or RunProgress()

    def setup(self) -> SFTRecipe:
        """The demonstrations (the env's faults before any work), the policy and the examples, length-checked."""
        cfg, out = self.cfg, self.out
        notes: list[str] = []  # said once the demonstrations pass the length check (else the error is the one line)
        env = self.factory()
        seeds = [cfg.sft.seed_offset + i for i in range(cfg.sft.demos)]
        if cfg.sft.tools:  # tool-calling chats, for TRL's environment_factory (docs/trl.md)
            demos = expert_tool_conversations(self.factory, seeds, success_rule(cfg.env))
        else:
            demos = expert_trajectories(self.factory, seeds, success_rule(cfg.env))
        if not demos:
            raise UserError(f"{env_label(cfg.env)}: the expert reached the goal in none of the {len(seeds)} demo "
                            f"episodes (sft.demos, seeds {seeds[0]}..{seeds[-1]}; success is info['won']"
                            + (f" or score >= {cfg.env.success_threshold:g}" if cfg.env.success_threshold is not None
                               else "") + "): SFT would have no demonstration")
        if cfg.sft.tools:
            self.model, tok = load_or_build_policy(cfg, out, self.factory, notes.append, self.progress, self.world,
                                                   tool_corpus(demos), TOOL_MARKUP)
            self.tokenizer = tool_calling_tokenizer(tok, cfg.policy.model or env_label(cfg.env))
            self.examples = tool_examples(demos)
        else:
            self.model, self.tokenizer = load_or_build_policy(cfg, out, self.factory, notes.append, self.progress,
                                                              self.world)
            self.examples = demo_examples(demos, prompt_builder(cfg.policy, cfg.rollout, env))
        dropped = check_max_length(prompt_lengths(self.examples, self.tokenizer), cfg.sft.max_length)
        for note in notes:
            self.log(note)
        self.log(f"SFT on {len(self.examples)} expert {'tool-calling turns' if cfg.sft.tools else 'steps'} from "
                 f"{len(demos)} solved episodes")
        if dropped:
            self.log(f"note: sft.max_length={cfg.sft.max_length} drops {dropped} of {len(self.examples)} steps whose "
                     "prompt alone fills it")
        return self

    def run(self) -> tuple:
        """Fine-tune and publish ``out/sft_model`` (metrics first: a complete ``sft_model/`` says SFT is done);
        ``(model, tokenizer, metrics)``."""
        cfg, out, world = self.cfg, self.out, self.world
        target = out / "sft_model"
        tmp = temporary_dir(target) if world.main else target.with_name(f".{target.name}.tmp")
        try:
            with self.progress.bar("SFT", None, unit="steps") as update:
                options = TRLOptions(out, seed=cfg.seed, lora=cfg.policy.lora, autocast=cfg.policy.autocast,
                                     save_to=tmp, progress=lambda step, total, info: update(step, info, total=total))
                metrics = train_sft(self.model, self.tokenizer, self.examples, cfg.sft, options)
        except BaseException:
            if world.main:
                shutil.rmtree(tmp, ignore_errors=True)
            raise
        finally:
            if world.main:
                shutil.rmtree(out / "sft_tmp", ignore_errors=True)  # TRL's scratch dir (nothing is saved there)
        if world.main:
            write_atomic(out / "sft_metrics.json", json.dumps(metrics, indent=2))
            # the prompt layout π_SFT was trained with travels with it
            inference.save(tmp, inference.settings_of(cfg.policy, cfg.rollout))
            publish_dir(tmp, target)
        distributed.barrier(world)  # sft_model is there for every process
        return self.model, self.tokenizer, metrics


def load_or_build_policy(cfg: RunConfig, out: Path, factory, log: Callable[[str], None] = print,
                         progress: RunProgress | None = None, world: World = World(), corpus: list[str] = (),
                         words: tuple[str, ...] = ()):
    """``(model, tokenizer)``: ``policy.model``, or the tiny default built into ``out/tiny_model`` (once; rank 0
    builds it from the expert's text on ``factory()`` envs, the other processes wait and load it). ``corpus`` and
    ``words``: more tokenizer text and whole-word tokens (``sft --tools``: the tool-calling chats and markup)."""
    if cfg.policy.model:
        return load_policy(cfg.policy.model, cfg.policy.device, cfg.policy.weights_dtype)
    tiny_dir = out / "tiny_model"
    if world.main and not tiny_model_built(tiny_dir):
        with (progress or RunProgress()).bar("building the tiny default policy", None, keep=False):
            env = factory()
            texts = expert_corpus(factory, prompt_builder(cfg.policy, cfg.rollout, env), list(TINY_CORPUS_SEEDS),
                                  rng_seed=cfg.seed) + list(corpus)
            build_tiny_default(cfg.policy, cfg.seed, tiny_dir, env, texts, words)
        log(f"built tiny default policy in {tiny_dir}")
    distributed.barrier(world)
    return load_policy(tiny_dir, cfg.policy.device, cfg.policy.weights_dtype)


def run_sft(cfg: RunConfig, progress: RunProgress | None = None) -> tuple[Path, dict]:
    """SFT of ``cfg`` as a run of its own (``creditflow sft``): π_SFT in ``out_dir/sft_model``; its path and the
    SFT metrics. Everything is checked before any work."""
    check_run(cfg, tools=True)
    train_factory = env_factory(cfg.env, cfg.rollout.max_steps, "train")
    require_expert(cfg.env, train_factory, "SFT trains on expert demonstrations (RL can start from a given --model "
                                       "instead)")
    world = start_world(cfg)
    progress = rank_progress(progress or RunProgress(), world)
    with new_run_dir(cfg, world) as out:
        try:
            model, tok, metrics = SFTRecipe(cfg, train_factory, out, progress.log, progress, world).setup().run()
        except KeyboardInterrupt:
            raise Interrupted(f"during SFT; nothing saved yet ({out / 'sft_model'} is written when SFT ends)"
                              + kept_tiny(out)) from None
    target = out / "sft_model"
    done = f"SFT done: loss {metrics['sft/train_loss']:.4f} over {metrics['sft/steps']} steps -> {target}"
    if not cfg.sft.evaluate or cfg.sft.tools:
        progress.log(done + ("" if cfg.sft.tools else " (not evaluated: sft.evaluate=false)"))
        return target, metrics
    progress.log(done)
    try:  # after the run directory is complete: a failure here keeps π_SFT
        held_out = evaluate_in_memory(cfg, model, tok, world, progress)
    except KeyboardInterrupt:
        raise Interrupted(f"while evaluating π_SFT; π_SFT is saved in {target} (creditflow eval --model "
                          f"{shlex.quote(str(target))} evaluates it)") from None
    metrics = {**metrics, **held_out}
    if world.main:
        write_atomic(out / "sft_metrics.json", json.dumps(metrics, indent=2))
    progress.log(f"π_SFT: held-out success {held_out['eval/success_rate']:.3f} on {held_out['eval/episodes']} "
                 f"validation tasks of {cfg.env.name} ({100 * held_out['eval/invalid_frac']:.0f}% of its actions "
                 f"invalid; creditflow train --model {shlex.quote(str(target))} starts RL from it)")
    return target, metrics


def evaluate_in_memory(cfg: RunConfig, model, tok, world: World = World(), progress: RunProgress | None = None) -> dict:
    """``eval/*`` of ``model`` on the ``rl.eval_episodes`` validation tasks ``train`` evaluates at step 0 (greedy by
    default), each process a share of them under N processes."""
    factory = env_factory(cfg.env, cfg.rollout.max_steps, "test")
    seeds = split_seeds(cfg.env, "validation", cfg.rl.eval_episodes, cfg.rl.eval_episodes)
    seed_everything(cfg.seed + world.rank)
    model.eval()
    engine = make_engine(engine_settings(cfg), model, tok, factory, progress=progress, watch="eval π_SFT")
    _, trajs = evaluate_seeds(engine, distributed.shard(seeds, world),
                              sampling_params(cfg.generation, tok, evaluation=True), cfg.env.name)
    return rollout_metrics(distributed.gather_trajectories(trajs, world), "eval")


def kept_tiny(out: Path) -> str:
    """What an interrupted SFT keeps for the next attempt: the tiny default policy, when it was built."""
    tiny = out / "tiny_model"
    return f"; the untrained tiny policy in {tiny} is reused next time" if tiny_model_built(tiny) else ""
