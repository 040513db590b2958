"""The RRO recipes behind ``creditflow rro {collect,train,run}`` (RRO paper §3: SFT → reward-rising
sampling → DPO).

A run directory (``out_dir``) holds ``config.yaml``, π_SFT in ``sft_model/`` (when creditflow trained
it), the preference data in ``preferences/`` (``rro.data_dir``; see
:mod:`creditflow.pairs.preferences`), π_DPO in ``dpo_model/`` with ``dpo_metrics.json``, and for
``rro run`` the comparison ``rro_summary.{json,md}``.

π_SFT is ``policy.model`` when given, else ``<out_dir>/sft_model`` when it exists, else it is trained
first by the SFT pipeline (``creditflow sft``).

:class:`RRORecipe` has :class:`~creditflow.recipes.train.TrainRecipe`'s shape, for one of three stages
(``collect``, ``dpo`` or the whole pipeline, ``run``): its construction checks everything that can be checked
before any work, :meth:`~RRORecipe.setup` finds (or trains) π_SFT, :meth:`~RRORecipe.run` runs the stage.
:func:`run_collect`, :func:`run_dpo` and :func:`run_rro` are the three calls the API makes.
"""

from __future__ import annotations

import json
import shutil
import time
import warnings
from pathlib import Path
from typing import Callable

from creditflow.atomic import publish_dir, temporary_dir, write_atomic
from creditflow.config import RunConfig
from creditflow.errors import RERUN, Interrupted, UserError, noted
from creditflow.envs.configured import env_factory, require_expert
from creditflow.policy import inference
from creditflow.policy.backends.factory import check_backend, close_backend, make_backend
from creditflow.policy.load import load_policy, load_tokenizer
from creditflow.pairs.collect import PreferenceCollector
from creditflow.pairs.preferences import PreferenceWriter, check_collection, chosen_valid, read_preferences
from creditflow.recipes.checks import check_run
from creditflow.recipes.eval import evaluate_saved_policy
from creditflow.recipes.progress import RunProgress, rank_progress
from creditflow.recipes.resolve import with_model_settings
from creditflow.recipes.rundir import first_missing, new_run_dir, start_world
from creditflow.recipes.sections import engine_settings
from creditflow.recipes.sft import SFTRecipe
from creditflow.rollout.executors import make_env_executor
from creditflow.rollout.factory import make_engine
from creditflow.rollout.seeding import seed_everything
from creditflow.spill import write_results
from creditflow.trainer import distributed
from creditflow.trainer.dpo import train_dpo
from creditflow.trainer.trl_runner import TRLOptions


def data_dir(cfg: RunConfig) -> Path:
    """Where the preference data is: ``rro.data_dir``, else ``<out_dir>/preferences``."""
    return Path(cfg.rro.data_dir) if cfg.rro.data_dir else Path(cfg.out_dir) / "preferences"


def run_collect(cfg: RunConfig, log: Callable[[str], None] | None = None, model_path: Path | None = None,
                progress: RunProgress | None = None) -> dict:
    """``rro collect``: preference data with ``cfg.rro`` (resuming a partial collection in the same directory) from
    π = ``model_path`` (default: the served model's local copy, or π_SFT, trained first when absent); the
    collection's summary."""
    recipe = RRORecipe(cfg, "collect", model_path=model_path, log=log, progress=progress)
    recipe.setup()
    return recipe.run()


def run_dpo(cfg: RunConfig, log: Callable[[str], None] | None = None, model_path: Path | None = None,
            progress: RunProgress | None = None) -> tuple[Path, dict]:
    """``rro train``: DPO from π_SFT (``model_path``, ``policy.model`` or ``<out_dir>/sft_model``) on
    ``rro.data_dir`` -> ``(<out_dir>/dpo_model, metrics)``."""
    recipe = RRORecipe(cfg, "dpo", model_path=model_path, log=log, progress=progress)
    recipe.setup()
    return recipe.run()


def run_rro(cfg: RunConfig, log: Callable[[str], None] | None = None, progress: RunProgress | None = None) -> dict:
    """``rro run``: π_SFT (given or trained) → collect → DPO → held-out evaluation of both; the summary."""
    recipe = RRORecipe(cfg, "run", log=log, progress=progress)
    recipe.setup()
    return recipe.run()


def collection_settings(cfg: RunConfig, model_path: Path) -> dict:
    """What the collected data depends on (a restart must match it), plus resumable knobs: of ``cfg`` with the
    model's saved settings, as the collection runs."""
    r = cfg.rro
    served = {"served_model": cfg.policy.model_name} if cfg.policy.backend == "openai" else {}
    return {
        "exploration": r.exploration, "candidates": r.candidates, "mc_rollouts": r.mc_rollouts,
        "seed": cfg.seed, "seed_offset": r.seed_offset, "tasks": r.tasks, "env": cfg.env.name,
        "env_kwargs": dict(cfg.env.kwargs), "model": str(model_path), "temperature": cfg.generation.temperature,
        "top_p": cfg.generation.top_p, "max_new_tokens": cfg.generation.max_new_tokens,
        "history_length": cfg.rollout.history_length, "max_steps": cfg.rollout.max_steps,
        "executor": r.executor, "ray_address": r.ray_address, "ray_workers": r.ray_workers, **served,
        # None (the paper's rule) matches collections made before this setting existed
        "invalid_action_reward": r.invalid_action_reward,
    }


def held_out_metrics(cfg: RunConfig, model_path: Path, episodes: int, progress: RunProgress | None = None) -> dict:
    """The metrics alone of :func:`~creditflow.recipes.eval.evaluate_saved_policy`: held-out success/score of a
    saved policy (greedy by default, ``generation.eval_temperature``)."""
    return evaluate_saved_policy(cfg, model_path, episodes, progress)[0]


class RRORecipe:
    """One RRO stage in torchtune's shape: construction checks (the config, the env factories, the collection
    directory or the preference data, before any work), :meth:`setup` finds π_SFT (training it where the stage
    needs it and there is none), :meth:`run` runs the stage.

    ``stage``: ``collect`` (``model_path``: the policy to collect with), ``dpo`` (``model_path``: π_SFT, the
    start and the reference) or ``run`` (the whole pipeline). ``rro train`` launched as N processes trains data
    parallel and rank 0 writes the results."""

    STAGES = ("collect", "dpo", "run")

    def __init__(self, cfg: RunConfig, stage: str, model_path: Path | None = None,
                 log: Callable[[str], None] | None = None, progress: RunProgress | None = None):
        if stage not in self.STAGES:
            raise ValueError(f"stage must be one of {', '.join(self.STAGES)}, got {stage!r}")
        self.cfg, self.stage, self.model_path = cfg, stage, model_path
        self.progress = progress or RunProgress()
        self.log = log or self.progress.log
        if stage == "dpo":
            self._check_dpo()
            return
        if stage == "run":
            if cfg.policy.backend == "openai":
                raise UserError("rro run trains and evaluates π_DPO in this process; with a server use "
                                "`rro collect --backend openai ...`, then `rro train`")
            self.model_path = Path(cfg.policy.model) if cfg.policy.model else None
        self.train_factory = self._check_collect(self.model_path)
        if stage == "run":
            env_factory(cfg.env, cfg.rollout.max_steps, "test")  # the held-out envs of the final evaluation

    # -- checks (before any work) ------------------------------------------------------------------------

    def _check_collect(self, model_path: Path | None):
        """The checks of ``rro collect`` before any work; returns the training env factory."""
        cfg = self.cfg
        check_run(cfg, model=model_path)
        check_backend(cfg.policy)
        train_factory = env_factory(cfg.env, cfg.rollout.max_steps, "train")
        if model_path is None:
            model_path = self._collect_model()
            if not (model_path / "config.json").exists():  # π_SFT is trained first
                require_expert(cfg.env, train_factory, "π_SFT is trained on expert demonstrations first; give "
                                                   "--model DIR, the policy to collect with")
        check_collection(data_dir(cfg), collection_settings(cfg, model_path))
        return train_factory

    def _check_dpo(self) -> None:
        """``rro train``: every pair checked (``file:line``) before the model loads, then π_SFT's directory."""
        cfg = self.cfg
        pairs = read_preferences(data_dir(cfg))
        self.collected = len(pairs)
        if not pairs:
            raise UserError(f"{data_dir(cfg)}: no preference pairs to train DPO on")
        if cfg.rro.dpo.pairs == "valid_chosen":
            pairs = [p for p, ok in zip(pairs, chosen_valid(data_dir(cfg), pairs)) if ok]
            if not pairs:
                raise UserError(f"rro.dpo.pairs=valid_chosen: all {self.collected} pairs of {data_dir(cfg)} choose "
                                "an invalid action; nothing is left to train on")
        self.pairs = pairs
        self.model_path = self._dpo_start()
        check_run(cfg, model=self.model_path)
        self.cfg = with_model_settings(cfg, self.model_path, self.log)

    # -- π_SFT ---------------------------------------------------------------------------------------------

    def _collect_model(self) -> Path:
        """The policy ``rro collect`` samples from when none is given: the served model's local copy
        (``policy.backend=openai``), else π_SFT (``policy.model``, else ``<out_dir>/sft_model``)."""
        cfg = self.cfg
        if cfg.policy.backend == "openai":
            return self._served_model_dir(Path(cfg.out_dir))
        return Path(cfg.policy.model) if cfg.policy.model else Path(cfg.out_dir) / "sft_model"

    def _served_model_dir(self, out: Path) -> Path:
        """``policy.backend=openai``: the local directory with the served model's tokenizer (``policy.model``,
        else ``policy.model_name`` when it is a directory, as ``vllm serve DIR`` names it, else ``out/sft_model``)."""
        cfg = self.cfg
        for candidate in (cfg.policy.model, cfg.policy.model_name, out / "sft_model"):
            if candidate and (Path(candidate) / "config.json").exists():
                return Path(candidate)
        raise UserError("policy.backend=openai: give --model DIR, a local copy of the served model (its tokenizer "
                        "builds the token-id prompts)")

    def _sft_model(self, out: Path) -> Path:
        """Where π_SFT lives; trains it (SFT pipeline) when neither ``policy.model`` nor ``out/sft_model`` exists."""
        cfg = self.cfg
        if cfg.policy.model:
            return Path(cfg.policy.model)
        target = out / "sft_model"
        if not (target / "config.json").exists():
            seed_everything(cfg.seed)
            try:
                SFTRecipe(cfg, self.train_factory, out, self.log, self.progress).setup().run()
            except KeyboardInterrupt:
                raise Interrupted(f"during SFT; nothing saved yet ({target} is written when SFT ends)",
                                  RERUN) from None
        return target

    def _dpo_start(self) -> Path:
        """π_SFT for ``rro train``: ``model_path``, ``policy.model`` or ``<out_dir>/sft_model``."""
        cfg = self.cfg
        if self.model_path is not None:
            return self.model_path
        if cfg.policy.model:
            return Path(cfg.policy.model)
        if (Path(cfg.out_dir) / "sft_model" / "config.json").exists():
            return Path(cfg.out_dir) / "sft_model"
        raise UserError("rro train: no π_SFT; give --model DIR (or run `creditflow rro run`)")

    def setup(self) -> None:
        """π_SFT for the whole pipeline (trained now into ``out_dir/sft_model`` where there is none); the other
        stages find theirs as they start (``collect``: inside its run directory, which a failure removes)."""
        if self.stage == "run":
            started = time.perf_counter()
            with new_run_dir(self.cfg) as out:
                self.model_path = self._sft_model(out)
            self.out, self.sft_seconds = out, time.perf_counter() - started

    # -- the stages ----------------------------------------------------------------------------------------

    def run(self):
        """The stage: ``collect`` the collection's summary, ``dpo`` ``(dpo_model, metrics)``, ``run`` the
        pipeline's summary."""
        if self.stage == "collect":
            return self._collect_stage(self.cfg, self.model_path)
        if self.stage == "dpo":
            return self._dpo_stage(self.cfg, self.model_path, self.pairs, self.collected)
        return self._pipeline()

    def _collect_stage(self, cfg: RunConfig, model_path: Path | None) -> dict:
        """Collect preference data with ``cfg.rro`` (resumes a partial collection in the same directory). A user
        error (an env that breaks the protocol mid-run) before the first task is saved leaves nothing of this
        command; after it, the saved tasks stay and the same command continues them."""
        made_data = first_missing(data_dir(cfg))  # created by this command: removed after a failed start
        writers: list[PreferenceWriter] = []
        try:
            with new_run_dir(cfg, keep=lambda: bool(writers and writers[0].records)) as out:
                if model_path is None:
                    model_path = (self._served_model_dir(out) if cfg.policy.backend == "openai"
                                  else self._sft_model(out))
                cfg = with_model_settings(cfg, model_path, self.log)  # the prompt layout π was trained with
                writers.append(PreferenceWriter(data_dir(cfg), collection_settings(cfg, model_path)))
                return self._collect(cfg, writers[0], model_path)
        except UserError as exc:
            if not (writers and writers[0].records):
                if made_data is not None:
                    shutil.rmtree(made_data, ignore_errors=True)
                raise
            raise noted(exc, f"the {len(writers[0].records)} finished task(s) are kept in {writers[0].dir}: after "
                             "the fix, the same command continues them") from None

    def _collect(self, cfg: RunConfig, writer: PreferenceWriter, model_path: Path) -> dict:
        log, progress = self.log, self.progress
        seeds = [cfg.rro.seed_offset + i for i in range(cfg.rro.tasks)]
        if writer.resumed:
            log(f"resuming the collection in {writer.dir}: {len(writer.records)} task(s) already done")
        if all(writer.done(f"{cfg.env.name}/{s}") for s in seeds):
            return writer.write_summary()
        if cfg.policy.backend == "openai":  # the server generates; only the tokenizer is needed here
            model, tok = None, load_tokenizer(model_path)
        else:
            model, tok = load_policy(model_path, cfg.policy.device, cfg.policy.weights_dtype)
        backend = make_backend(cfg.policy, cfg.seed, model, tok, model_path)
        executor = make_env_executor(cfg.rro.executor, self.train_factory, num_workers=cfg.rro.ray_workers,
                                     address=cfg.rro.ray_address)
        done0 = sum(1 for s in seeds if writer.done(f"{cfg.env.name}/{s}"))
        try:
            engine = make_engine(engine_settings(cfg), model, tok, self.train_factory, env_executor=executor,
                                 backend=backend)
            collector = PreferenceCollector(engine, exploration=cfg.rro.exploration,
                                            candidates=cfg.rro.candidates, mc_rollouts=cfg.rro.mc_rollouts,
                                            seed=cfg.seed, env_name=cfg.env.name,
                                            invalid_action_reward=cfg.rro.invalid_action_reward)
            with progress.bar("collect", len(seeds), completed=done0, unit="tasks") as update:
                def on_task(done: int, total: int, rec: dict) -> None:
                    update(done, f"{writer.pairs} pairs")
                    log(f"task {done}/{total} {rec['task_id']}: {rec['steps']} steps, {rec['samples']} samples, "
                        f"{rec['pairs']} pairs, {rec['rollouts']} rollouts" + (" (failed)" if rec.get("failed") else
                                                                                "")
                        + f" ({update.eta()})")

                summary = collector.collect(seeds, writer, on_task)
        except KeyboardInterrupt:
            raise Interrupted(f"after {len(writer.records)} of {len(seeds)} tasks, which are saved in {writer.dir} "
                              "(the task under way is redone)", RERUN) from None
        finally:
            executor.close()
            close_backend(backend)
        log(f"collected: {summary['samples_per_step']:.2f} samples/step over {summary['steps']} steps, "
            f"{summary['pairs']} pairs, {summary['rollouts']} rollouts -> {writer.dir}")
        return summary

    def _dpo_stage(self, cfg: RunConfig, model_path: Path, pairs: list[dict], collected: int) -> tuple[Path, dict]:
        """DPO from π_SFT (``model_path``) on ``pairs`` -> ``<out_dir>/dpo_model``."""
        log, progress = self.log, self.progress
        world = start_world(cfg)
        if not world.main:
            progress = rank_progress(progress, world)
            log = progress.log
        with new_run_dir(cfg, world) as out:
            seed_everything(cfg.seed)
            model, tok = load_policy(model_path, cfg.policy.device, cfg.policy.weights_dtype)
        target = out / "dpo_model"
        tmp = temporary_dir(target) if world.main else target.with_name(f".{target.name}.tmp")
        dropped = collected - len(pairs)  # rro.dpo.pairs=valid_chosen
        log(f"DPO on {len(pairs)} pairs from {model_path}"
            + (f" ({dropped} of {collected} dropped: invalid chosen action)" if dropped else ""))
        try:
            with progress.bar("DPO", None, unit="steps") as update:
                options = TRLOptions(out, seed=cfg.seed, lora=cfg.policy.lora, autocast=cfg.policy.autocast,
                                     save_to=tmp, progress=lambda step, total, info: update(step, info, total=total))
                _, metrics = train_dpo(model, tok, pairs, cfg.rro.dpo, options)
        except BaseException as exc:
            if world.main:
                shutil.rmtree(tmp, ignore_errors=True)
            if isinstance(exc, KeyboardInterrupt):
                raise Interrupted(f"during DPO; nothing saved yet ({target} is written when DPO ends)",
                                  RERUN) from None
            raise
        finally:
            if world.main:
                shutil.rmtree(out / "dpo_tmp", ignore_errors=True)  # TRL's scratch dir (nothing is saved there)
        metrics["dpo/reference"] = str(model_path)
        metrics["dpo/pairs_dropped"] = dropped
        if world.main:  # the metrics first: a complete dpo_model/ is the sign that DPO is done
            write_atomic(out / "dpo_metrics.json", json.dumps(metrics, indent=2))
            inference.save(tmp, inference.settings_of(cfg.policy, cfg.rollout))
            publish_dir(tmp, target)
        distributed.barrier(world)
        log(f"DPO done: loss {metrics['dpo/train_loss']:.4f} over {metrics['dpo/steps']} steps -> {target}")
        return target, metrics

    def _pipeline(self) -> dict:
        """π_SFT (:meth:`setup`) → collect → DPO → held-out eval of both; ``rro_summary.{json,md}``."""
        cfg, log, progress, out, sft_path = self.cfg, self.log, self.progress, self.out, self.model_path
        t_sft = time.perf_counter()
        collection = run_collect(cfg, log, model_path=sft_path, progress=progress)
        t_collect = time.perf_counter()
        if collection["pairs"]:
            dpo_path, dpo_metrics = run_dpo(cfg, log, model_path=sft_path, progress=progress)
        else:  # no preference pair: DPO has nothing to learn from, π_DPO = π_SFT
            log("no preference pairs were collected: DPO skipped, π_DPO = π_SFT")
            dpo_path, dpo_metrics = sft_path, {"dpo/train_loss": None, "dpo/steps": 0}
        t_dpo = time.perf_counter()
        try:
            sft_eval = held_out_metrics(cfg, sft_path, cfg.rro.eval_episodes, progress)
            dpo_eval = sft_eval if dpo_path == sft_path else held_out_metrics(cfg, dpo_path, cfg.rro.eval_episodes,
                                                                              progress)
        except KeyboardInterrupt:
            raise Interrupted(f"during the held-out evaluation; π_SFT ({sft_path}), the preference data "
                              f"({data_dir(cfg)}) and π_DPO ({dpo_path}) are saved and reused", RERUN) from None
        summary = {
            "exploration": cfg.rro.exploration, "candidates": cfg.rro.candidates, "mc_rollouts": cfg.rro.mc_rollouts,
            "samples_per_step": collection["samples_per_step"], "steps": collection["steps"],
            "pairs": collection["pairs"], "rollouts": collection["rollouts"],
            "generated_tokens": collection["generated_tokens"],
            "sft": sft_eval, "dpo": dpo_eval,
            "dpo_train_loss": dpo_metrics["dpo/train_loss"], "dpo_steps": dpo_metrics["dpo/steps"],
            "seconds": {"sft": round(self.sft_seconds, 1), "collect": round(t_collect - t_sft, 1),
                        "dpo": round(t_dpo - t_collect, 1), "eval": round(time.perf_counter() - t_dpo, 1)},
            "sft_model": str(sft_path), "dpo_model": str(dpo_path), "data": str(data_dir(cfg)),
        }
        write_results(out / "rro_summary.json", lambda p: write_atomic(p, json.dumps(summary, indent=2)), "results")
        md = [f"# RRO on {cfg.env.name} ({cfg.rro.exploration} exploration)", "",
              "| policy | success | score | steps |", "|---|---|---|---|"]
        for name, m in (("π_SFT", sft_eval), ("π_DPO", dpo_eval)):
            md.append(f"| {name} | {m.get('eval/success_rate', 0):.3f} | {m.get('eval/score', 0):.3f} | "
                      f"{m.get('eval/steps', 0):.1f} |")
        md += ["", f"Collection: {collection['samples_per_step']:.2f} samples/step over {collection['steps']} steps, "
                   f"{collection['pairs']} pairs, {collection['rollouts']} MC rollouts, "
                   f"{collection['generated_tokens']} generated tokens.", ""]
        write_results(out / "rro_summary.md", lambda p: write_atomic(p, "\n".join(md)), "results")
        return summary


def __getattr__(name: str):
    if name == "evaluate_policy":  # its name until 0.2, shared with another function that returned more
        warnings.warn("creditflow.recipes.rro.evaluate_policy is now held_out_metrics; the old name goes in the "
                      "next release", DeprecationWarning, stacklevel=2)
        return held_out_metrics
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
