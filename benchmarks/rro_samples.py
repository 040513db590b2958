"""RRO vs fixed-size exploration with the tiny model: samples per step and held-out results.

    python -m benchmarks.rro_samples [--env sokoban|webshop] [--model SFT_DIR] [--seeds 0 1 2] [--tasks 32] [--smoke]

``--env webshop`` runs the shopping env, whose graded score (WebShop's reward) is where RRO's process
rewards differ most between candidates; results go to ``rro_samples_webshop.{json,md}``. The π_SFT of the
committed webshop suite is ``benchmarks/results/webshop_sft_E4b/sft_model`` (a rebuild differs by host; its
weights are not in git: ``benchmarks/sft_models.py`` says how to rebuild them).

From one shared π_SFT (``--model DIR``, else built here by the SFT pipeline), for every seed: collect
preference data with fixed-size exploration (N = ``--candidates``, §4.2) and with reward-rising sampling
(N_max = ``--candidates``, Alg. 1), train π_DPO on each (reference π_SFT), and evaluate π_SFT and both
π_DPO on held-out levels. Reports "# samples" (candidates sampled per step, the paper's Table 1 column),
rollouts, generated tokens, wall time, pairs, and held-out success/score, mean ± std over seeds; writes
``benchmarks/results/rro_samples.{json,md}`` with machine info. Goal: RRO at <= 40% of fixed-5's
samples per step with a held-out score >= fixed-5's (the paper: 1.86 and 1.64 samples/step vs 5).

CPU-sized choices (the paper's values are for Gemma-2 2B on 8 A100s): the tiny default policy on the demo's
observations (``describe_positions``; ``--bare-grid`` for plain ones); sampling temperature 1.0 for
candidates and MC rollouts (the paper does not state its temperature; at 0.4 the tiny π_SFT's candidates
are mostly the same action, so most steps give no contrasting pair); DPO learning rate 1e-4 and batch 16
instead of 3e-6 / 32 (β 0.1, 3 epochs, warmup 0.1, constant schedule as §4.3; on webshop 1e-4 breaks π_SFT
and 3e-6 to 5e-5 do not: ``results/rro_dpo_settings_webshop.md``); m = 5 rollouts and N = 5 as §4.3. Held-out
evaluation is greedy (``generation.eval_temperature`` 0), so π_SFT is evaluated once. The work
directory (``--work``, default ``runs/bench_rro``) keeps every collection: rerunning the same command
resumes an interrupted collection. ``--smoke`` runs a tiny budget end to end (about a minute with
``--model``; it also builds a small π_SFT without one) and writes ``*_smoke.{json,md}``.

Resumable: every finished run (collection + DPO + evaluation of one method and seed), and π_SFT's
evaluation, is stored under ``benchmarks/results/<name>_runs/`` with the settings it ran with (commit it
as it lands); a rerun with the same settings reuses it, even on a machine without the work directory, so
a suite can accumulate across sessions. A record's key holds the π_SFT's path and the sha256 of its
weights, so the runs of a rebuilt π_SFT at the same path are not pooled with the old ones. Collections not
finished when the command stops (Ctrl-C, SIGTERM, or a session's end) are kept in
``<name>_runs/unfinished_collections_<sha>.tgz`` (commit it too); a rerun, on any machine, unpacks them and
goes on where they stopped. The results carry, per arm, ``summary.<arm>.final_eval_score`` and
``final_eval_success`` with the per-seed ``values``, the ``mean`` and a 95% stratified-bootstrap
``ci95`` (benchmarks/learning.py), and ``settings.seeds``. ``--methods rising`` (or ``fixed``) runs one arm
now and reuses the other's finished runs; a session too short for a whole seed can still finish one arm.

DPO variants train on the plain runs' collections in their own directories and records
(``<name><suffix>_runs/``): ``--dpo-lr``, ``--dpo-sft-weight`` (RPO), ``--dpo-pairs valid_chosen`` and
``--device cuda`` (DPO and evaluation on a GPU, float32 weights; on an H200 its numbers matched the CPU's to
three decimals).
``benchmarks/rro_dpo_settings.py`` tabulates every variant's finished runs per collection.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import sys
import tarfile
import tempfile
import time
from pathlib import Path


from benchmarks import cache
from benchmarks.cache import stored
from benchmarks.learning import weights_sha256
from benchmarks.stats import interval_estimates, mean_sd, paired
from benchmarks.machine import machine_info
from benchmarks.sft_models import require_weights
from creditflow.config import build_config
from creditflow.envs.configured import env_factory
from creditflow.recipes.rro import held_out_metrics, run_collect, run_dpo
from creditflow.recipes.sft import SFTRecipe
from creditflow.rollout.seeding import seed_everything

METHODS = ("fixed", "rising")
ENVS = {  # per-env settings on top of the shared ones
    "sokoban": [],
    # webshop: the compact template (a results page makes prompts of ~450 tokens even so); the tiny policy's
    # tokenizer (4096 words, case folded, one token per product ID) is the env's own choice
    # (docs/environments.md "webshop"); SFT batches of 16 (benchmarks/results/webshop_sft.md, run E4)
    "webshop": ["env.name=webshop", "sft.max_length=2048", "policy.template=compact", "sft.batch_size=16"],
}
# per-env defaults of the flags left unset: (H, SFT demos, SFT epochs, max new tokens). webshop: H = 0 (the
# task is in every prompt; shorter prompts) and a π_SFT of 1,024 demos x 6 epochs, which clicks a real
# product 84% of the time (webshop_sft.md, E4)
DEFAULTS = {"sokoban": (2, 512, 3.0, 16), "webshop": (0, 1024, 6.0, 48)}
NAMES = {"sft": "π_SFT", "fixed": "fixed-size exploration + DPO", "rising": "RRO (reward rising) + DPO"}


DPO_LR = 1e-4  # the suite's DPO learning rate; another one is a DPO variant


def variant(args) -> str:
    """The DPO variant's suffix of run directories and result names ('' for plain DPO at the suite's lr, on
    the CPU)."""
    return ((f"_lr{args.dpo_lr:g}" if args.dpo_lr != DPO_LR else "")
            + (f"_sftw{args.dpo_sft_weight:g}" if args.dpo_sft_weight else "")
            + ("_validchosen" if args.dpo_pairs == "valid_chosen" else "")
            + ("_cuda" if args.device == "cuda" else ""))


def collection_variant(args) -> str:
    """The collection variant's suffix of the result name and the work directory ('' for the paper's rule):
    its collections differ, so they live apart, with their own records and snapshot."""
    return "" if args.invalid_action_reward is None else f"_invalid{args.invalid_action_reward:g}"


def run_overrides(args, work: Path, method: str, seed: int) -> list[str]:
    """A run's own overrides. A DPO variant trains in its own directory on the plain run's collection, so
    one collection serves every DPO setting."""
    collection = work / f"{method}_s{seed}"
    out = [f"seed={seed}", f"rro.exploration={method}", f"out_dir={collection}{variant(args)}"]
    return out + ([f"rro.data_dir={collection / 'preferences'}"] if variant(args) else [])


def settings(args) -> list[str]:
    """Overrides shared by every run of the benchmark."""
    out = [f"generation.temperature={args.temperature}", f"generation.max_new_tokens={args.max_new_tokens}",
           f"rro.tasks={args.tasks}", f"rro.mc_rollouts={args.mc_rollouts}", f"rro.candidates={args.candidates}",
           f"rro.eval_episodes={args.eval_episodes}", f"rro.executor={args.executor}",
           f"rro.dpo.lr={args.dpo_lr}", f"rro.dpo.batch_size={args.dpo_batch}", f"rro.dpo.epochs={args.dpo_epochs}",
           "tensorboard=false"]
    out += [f"rro.dpo.sft_weight={args.dpo_sft_weight}"] if args.dpo_sft_weight else []  # default: plain DPO
    out += [f"rro.dpo.pairs={args.dpo_pairs}"] if args.dpo_pairs != "all" else []  # default: every pair
    # a GPU run keeps float32 weights: policy.dtype=auto would load bfloat16 there, whose rounding (2^-8 of a
    # weight) swallows DPO's small steps; the CPU runs' keys stay as they were (main hides any GPU from them)
    out += ["policy.device=cuda", "policy.dtype=float32"] if args.device == "cuda" else []
    out += ([f"rro.invalid_action_reward={args.invalid_action_reward}"]
            if args.invalid_action_reward is not None else [])  # default: the paper's MC estimate
    out += [f"env.kwargs.max_steps={args.env_max_steps}"] if args.env_max_steps else []
    if args.env == "sokoban" and not args.bare_grid:
        out += ["env.kwargs.describe_positions=true"]  # as the demo's pi_SFT sees it
    return out + ENVS[args.env] + [f"rollout.history_length={args.history}"]


def cached(path: Path, key: dict, compute, note: str = ""):
    """``cache.cached`` with the machine it ran on and ``note`` (what shared its cores) in the record."""
    return cache.cached(path, key, compute, lambda: {"machine": machine_info(), "note": note})


def shopping_table(args, base: list[str], sft: Path, sft_sha: str, work: Path, records: Path) -> dict[str, dict]:
    """webshop only: how far each policy's greedy episodes get (search, product click, purchase), so a score
    that falls after DPO says which step broke. One cached record per policy; a π_DPO whose work directory
    is gone (another machine) and that has no record is left out."""
    from benchmarks.webshop_sft import shopping_metrics
    from creditflow.recipes.eval import evaluate_saved_policy as evaluate_with_trajectories

    policies = {"π_SFT": sft} | {f"{m} s{s}": work / f"{m}_s{s}{variant(args)}" / "dpo_model"
                                 for s in args.seeds for m in METHODS}
    table = {}
    for label, path in policies.items():
        record = records / f"shopping_{label.replace('π_', '').replace(' ', '_')}.json"
        key = {"model": str(path), "sft_sha256": sft_sha, "overrides": base, "eval_episodes": args.eval_episodes}
        if not path.exists() and not record.exists():
            continue
        cfg = build_config(None, base + [f"out_dir={work / 'eval_shopping'}"])
        table[label] = cached(record, key, lambda: shopping_metrics(
            evaluate_with_trajectories(cfg, path, args.eval_episodes)[1]), args.note)
    return table


def _tasks_done(collection: Path) -> int:
    tasks = collection / "preferences" / "tasks.jsonl"
    return sum(1 for line in tasks.open() if line.strip()) if tasks.exists() else 0


def restore_collections(snapshot: Path, work: Path, log) -> None:
    """Unpack the snapshot's unfinished collections where the work directory has fewer of their tasks (a fresh
    clone has none), so a collection that a session could not finish goes on in the next one."""
    if not snapshot.exists():
        return
    with tarfile.open(snapshot) as tar:
        names = sorted({m.name.split("/")[0] for m in tar.getmembers()})
        with tempfile.TemporaryDirectory() as tmp:
            tar.extractall(tmp, filter="data")
            for name in names:
                have, saved = _tasks_done(work / name), _tasks_done(Path(tmp) / name)
                if saved > have:
                    log(f"{name}: {saved} tasks from {snapshot.name} (the work directory had {have})")
                    shutil.rmtree(work / name / "preferences", ignore_errors=True)
                    (work / name).mkdir(parents=True, exist_ok=True)
                    shutil.copytree(Path(tmp) / name / "preferences", work / name / "preferences")


def unfinished(args, key: dict, work: Path, records: Path) -> list[str]:
    """Every collection in the work directory, of any seed (not only this command's), whose run has no record."""
    names = []
    for d in sorted(work.iterdir()):
        method, _, seed = d.name.partition("_s")
        if d.is_dir() and method in METHODS and seed.isdigit() and stored(
                records / f"{d.name}.json", record_key(args, key, method, int(seed))) is None:
            names.append(d.name)
    return names


def snapshot_collections(snapshot: Path, work: Path, names: list[str]) -> None:
    """Keep the unfinished collections (their ``preferences`` directories) in ``snapshot``, next to the
    records, to commit with them; removed once every collection of the suite has its run."""
    started = [name for name in names if _tasks_done(work / name)]
    if not started:
        snapshot.unlink(missing_ok=True)
        return
    snapshot.parent.mkdir(parents=True, exist_ok=True)
    tmp = snapshot.with_suffix(".tmp")
    with tarfile.open(tmp, "w:gz") as tar:
        for name in started:
            tar.add(work / name / "preferences", arcname=f"{name}/preferences")
    tmp.replace(snapshot)


def build_sft(args, work: Path, log) -> Path:
    extra = ([f"sft.demos={args.sft_demos}", f"sft.epochs={args.sft_epochs}"]
             + (["policy.tiny_hidden_size=64", "policy.tiny_layers=2"] if args.smoke else []))
    cfg = build_config(None, settings(args) + extra + [f"out_dir={work / 'sft'}"])
    target = work / "sft" / "sft_model"
    if not (target / "config.json").exists():  # trained once, into the work directory
        seed_everything(cfg.seed)
        SFTRecipe(cfg, env_factory(cfg.env, cfg.rollout.max_steps, "train"), work / "sft", log).setup().run()
    return target


def _arm_stat(values: list[float]) -> dict:
    """``mean``, per-seed ``values`` and the 95% stratified-bootstrap ``ci95`` of the mean (None with one
    seed). π_SFT is evaluated once (greedy): its value is repeated per seed and its interval is a point."""
    vals = [float(v) for v in values]
    return {"mean": statistics.fmean(vals), "values": vals, "ci95": interval_estimates(vals)["ci95"]}


def _interval(stat: dict) -> str:
    vals = ", ".join(f"{v:.3f}" for v in stat["values"])
    ci = f" [{stat['ci95'][0]:.3f}, {stat['ci95'][1]:.3f}]" if stat["ci95"] else ""
    return f"{stat['mean']:.3f}{ci} ({vals})"


def mean_std(values: list[float]) -> tuple[float, float]:
    """Mean and sample sd (``stats.mean_sd``; 0 for one value)."""
    mean, sd = mean_sd(values)
    return mean, (sd if sd is not None else 0.0)


def record_key(args, key: dict, method: str, seed: int) -> dict:
    return {**key, "seed": seed, "method": method, "settings": settings(args)}


def train_runs(args, base: list[str], key: dict, sft: Path, sft_eval: dict, work: Path, records: Path,
               log) -> tuple[list[dict], list[str]]:
    """Every seed x arm: its stored run, or, for the arms of ``--methods``, a new one (collection, DPO,
    held-out evaluation), stored as it finishes. Returns the runs and the names of the other arms' missing
    ones."""
    runs: list[dict] = []
    missing: list[str] = []
    for seed in args.seeds:
        for method in [*args.methods, *[m for m in METHODS if m not in args.methods]]:
            cfg = build_config(None, base + run_overrides(args, work, method, seed))

            def one_run() -> dict:
                log(f"== {method} exploration, seed {seed}")
                t0 = time.perf_counter()
                col = run_collect(cfg, log, model_path=sft)
                t1 = time.perf_counter()
                if col["pairs"]:
                    dpo_path, dpo = run_dpo(cfg, log, model_path=sft)
                    ev = held_out_metrics(cfg, dpo_path, args.eval_episodes)
                else:
                    log("no pairs: π_DPO = π_SFT")
                    dpo, ev = {"dpo/steps": 0, "dpo/train_loss": None}, sft_eval
                return {
                    "method": method, "seed": seed, "samples_per_step": col["samples_per_step"],
                    "steps": col["steps"], "pairs": col["pairs"], "rollouts": col["rollouts"],
                    "generated_tokens": col["generated_tokens"],
                    # the collection's own clock (per-task seconds summed): a resumed collection counts every
                    # session's time, not only the last one's
                    "collect_seconds": round(col.get("wall_seconds", t1 - t0), 1),
                    "omitted_no_rising": col["totals"]["omitted_no_rising"],
                    "omitted_no_contrast": col["totals"]["omitted_no_contrast"],
                    "dpo_steps": dpo["dpo/steps"], "dpo_train_loss": dpo["dpo/train_loss"],
                    # β·log π_θ/π_ref of the chosen / rejected actions over DPO's last epoch
                    "dpo_chosen_reward": dpo.get("dpo/last_epoch_chosen"),
                    "dpo_rejected_reward": dpo.get("dpo/last_epoch_rejected"),
                    "success_rate": ev.get("eval/success_rate", 0.0), "score": ev.get("eval/score", 0.0),
                }

            run_key = record_key(args, key, method, seed)
            if method not in args.methods:
                record = stored(records / f"{method}_s{seed}.json", run_key)
                if record is None:
                    missing.append(f"{method}_s{seed}")
                    continue
                runs.append(record)
            else:
                runs.append(cached(records / f"{method}_s{seed}.json", run_key, one_run, args.note))
            log(json.dumps(runs[-1]))
    return runs, missing


def parse_args() -> argparse.Namespace:
    """The options, with each env's defaults filled in and the smoke budget applied; hides a GPU from CPU runs
    and sets torch's threads."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--env", default="sokoban", choices=sorted(ENVS))
    ap.add_argument("--history", type=int, default=None,
                    help="H: observation/action pairs in the prompt (default: 2 as the papers; webshop 0)")
    ap.add_argument("--model", default=None, help="π_SFT directory (default: build one with the SFT pipeline)")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--methods", nargs="+", default=list(METHODS), choices=METHODS,
                    help="the arms to run now, in this order (default: both); the others' finished runs are "
                         "reused, and the tables are written once every seed of every arm has one")
    ap.add_argument("--tasks", type=int, default=32, help="training tasks per collection")
    ap.add_argument("--candidates", type=int, default=5, help="N (fixed) / N_max (rising)")
    ap.add_argument("--mc-rollouts", type=int, default=5, help="m rollouts per process reward")
    ap.add_argument("--eval-episodes", type=int, default=64)
    ap.add_argument("--temperature", type=float, default=1.0, help="sampling temperature of candidates and rollouts")
    ap.add_argument("--max-new-tokens", type=int, default=None, help="default: 16 (sokoban), 48 (webshop)")
    ap.add_argument("--env-max-steps", type=int, default=None, help="Sokoban episode cap (default: env's 15)")
    ap.add_argument("--dpo-lr", type=float, default=DPO_LR,
                    help="rro.dpo.lr; another value is a DPO variant like --dpo-sft-weight: it reuses the plain "
                         "runs' collections and writes <name>_lr<LR>.{json,md}")
    ap.add_argument("--dpo-batch", type=int, default=16)
    ap.add_argument("--dpo-epochs", type=float, default=3.0)
    ap.add_argument("--dpo-sft-weight", type=float, default=0.0,
                    help="rro.dpo.sft_weight: an NLL term on the chosen action (RPO); a variant reuses the plain "
                         "runs' collections and writes <name>_sftw<W>.{json,md} (default 0: plain DPO)")
    ap.add_argument("--dpo-pairs", choices=["all", "valid_chosen"], default="all",
                    help="rro.dpo.pairs: valid_chosen drops the pairs whose chosen action is invalid; a variant "
                         "that reuses the plain runs' collections and writes <name>_validchosen.{json,md}")
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"],
                    help="where DPO and evaluation run; cuda (float32 weights) is a variant like --dpo-lr: it "
                         "trains on the plain runs' collections and writes <name>_cuda, apart from the CPU runs")
    ap.add_argument("--invalid-action-reward", type=float, default=None,
                    help="rro.invalid_action_reward: an invalid candidate's process reward, with no MC rollouts "
                         "(e.g. -1); its own collections in <work>_invalid<X>, results <name>_invalid<X> "
                         "(default: the paper's MC estimate)")
    ap.add_argument("--sft-demos", type=int, default=None, help="SFT demos when building π_SFT (512; webshop 1024)")
    ap.add_argument("--sft-epochs", type=float, default=None, help="(3; webshop 6)")
    ap.add_argument("--bare-grid", action="store_true",
                    help="plain Sokoban observations (default: the demo's describe_positions=true)")
    ap.add_argument("--executor", default="inprocess", choices=["inprocess", "ray"])
    ap.add_argument("--work", default=None, help="work directory (default runs/bench_rro; smoke: a temp dir)")
    ap.add_argument("--out", default=None, help="results path without suffix")
    ap.add_argument("--threads", type=int, default=None,
                    help="torch CPU threads (default: torch's; 1 avoids spin-waiting on a shared, busy machine)")
    ap.add_argument("--smoke", action="store_true", help="tiny budget, end to end")
    ap.add_argument("--note", default="", help="a line for the report: what shared the cores, resumed sessions")
    args = ap.parse_args()
    for name, value in zip(("history", "sft_demos", "sft_epochs", "max_new_tokens"), DEFAULTS[args.env]):
        if getattr(args, name) is None:
            setattr(args, name, value)
    if args.device == "cpu":  # policy.device stays auto in the CPU runs' keys: hide a GPU so auto means the CPU
        os.environ["CUDA_VISIBLE_DEVICES"] = ""
    if args.threads is None and args.smoke:
        args.threads = 1
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    if args.smoke:
        args.seeds = [0] if args.seeds == [0, 1, 2] else args.seeds
        args.tasks, args.candidates, args.mc_rollouts, args.eval_episodes = 3, 3, 3, 4
        args.sft_demos, args.sft_epochs, args.dpo_epochs = 64, 2.0, 1.0
    return args


def aggregate(args, runs: list[dict], sft_eval: dict):
    """Per arm: mean ± sd of every run metric (``aggregate``), the held-out score and success with their intervals
    (``summary``, π_SFT included); the RRO / fixed ratio of samples per step, RRO − fixed seed by seed, and the
    goal the issue set."""
    agg: dict[str, dict] = {}
    for method in METHODS:
        rows = [r for r in runs if r["method"] == method]
        agg[method] = {k: mean_std([r[k] for r in rows]) for k in
                       ("samples_per_step", "pairs", "rollouts", "generated_tokens", "collect_seconds",
                        "success_rate", "score")}
    summary = {"sft": {"final_eval_score": _arm_stat([sft_eval.get("eval/score", 0.0)] * len(args.seeds)),
                       "final_eval_success": _arm_stat([sft_eval.get("eval/success_rate", 0.0)] * len(args.seeds))}}
    for method in METHODS:
        rows = [r for r in runs if r["method"] == method]
        summary[method] = {"final_eval_score": _arm_stat([r["score"] for r in rows]),
                           "final_eval_success": _arm_stat([r["success_rate"] for r in rows]),
                           "samples_per_step": _arm_stat([r["samples_per_step"] for r in rows]),
                           "pairs": _arm_stat([r["pairs"] for r in rows])}
    ratio = agg["rising"]["samples_per_step"][0] / max(agg["fixed"]["samples_per_step"][0], 1e-9)
    # RRO − fixed-5 held-out score seed by seed (both arms collect from the same π_SFT with the same seed)
    diff = paired({r["seed"]: r["score"] for r in runs if r["method"] == "rising"},
                  {r["seed"]: r["score"] for r in runs if r["method"] == "fixed"})
    goal = {"samples_ratio": ratio, "samples_ratio_le_0.4": ratio <= 0.4,
            "score_ge_fixed": agg["rising"]["score"][0] >= agg["fixed"]["score"][0],
            "score_diff": {"seeds": diff.seeds, "values": diff.diffs, "mean": diff.summary.mean,
                           "bootstrap_ci95": diff.summary.boot, "t_ci95": diff.summary.t,
                           "separated": diff.separated}}
    return agg, summary, diff, goal


def markdown(args, result: dict, diff) -> str:
    """The results table (``<name>.md``) of ``result``; ``diff``: RRO − fixed seed by seed."""
    agg, summary, goal, runs, shopping = (result["aggregate"], result["summary"], result["goal"], result["runs"],
                                          result["shopping"])
    ratio = goal["samples_ratio"]
    m = result["machine"]

    def fmt(pair, digits=3):
        return f"{pair[0]:.{digits}f} ± {pair[1]:.{digits}f}"

    def interval(ci) -> str:
        return f"[{ci[0]:+.3f}, {ci[1]:+.3f}]" if ci else "none (one seed)"

    lines = [
        f"# RRO vs fixed-size exploration on {args.env} (tiny model){' — SMOKE RUN' if args.smoke else ''}", "",
        f"Machine: {m['cpu']} ({m['cores']} cores), torch {m.get('torch')}, {m['date']}. "
        f"Seeds {args.seeds}; {args.tasks} tasks per collection, N = N_max = {args.candidates}, "
        f"m = {args.mc_rollouts}, temperature {args.temperature}; DPO lr {args.dpo_lr}, batch {args.dpo_batch}, "
        f"{args.dpo_epochs} epochs, β 0.1"
        + (f", plus {args.dpo_sft_weight:g} × the chosen action's NLL (RPO)" if args.dpo_sft_weight else "")
        + ("; only the pairs whose chosen action is valid" if args.dpo_pairs == "valid_chosen" else "")
        + (f"; an invalid candidate's process reward is {args.invalid_action_reward:g}, not its MC estimate"
           if args.invalid_action_reward is not None else "")
        + f"; held-out eval: {args.eval_episodes} levels, greedy."
        + (f" {args.note}" if args.note else ""), "",
        "Mean ± sd over seeds (sample sd, ddof 1):", "",
        "| method | # samples / step | pairs | MC rollouts | generated tokens | collect s | success | score |",
        "|---|---|---|---|---|---|---|---|",
        f"| {NAMES['sft']} | 0 | – | – | – | – | {result['sft']['success_rate']:.3f} | {result['sft']['score']:.3f} |",
    ]
    for method in METHODS:
        a = agg[method]
        lines.append(f"| {NAMES[method]} | {fmt(a['samples_per_step'], 2)} | {fmt(a['pairs'], 1)} | "
                     f"{fmt(a['rollouts'], 0)} | {fmt(a['generated_tokens'], 0)} | {fmt(a['collect_seconds'], 1)} | "
                     f"{fmt(a['success_rate'])} | {fmt(a['score'])} |")
    lines += ["", "Held-out score, mean over seeds with its 95% stratified-bootstrap interval "
              "(benchmarks/learning.py) and the per-seed values:", "", "| arm | score | success |", "|---|---|---|"]
    for arm in ("sft", *METHODS):
        lines.append(f"| {NAMES[arm]} | {_interval(summary[arm]['final_eval_score'])} | "
                     f"{_interval(summary[arm]['final_eval_success'])} |")
    lines += ["", f"RRO / fixed samples per step: {ratio:.2f} (goal ≤ 0.40: {'yes' if goal['samples_ratio_le_0.4'] else 'no'}); "
                  f"RRO score ≥ fixed in the mean: {'yes' if goal['score_ge_fixed'] else 'no'}, over {diff.n} paired "
                  f"seed{'s' if diff.n != 1 else ''}: RRO − fixed {diff.summary.mean:+.3f}, 95% bootstrap interval "
                  f"{interval(diff.summary.boot)}, t-interval {interval(diff.summary.t)}; "
                  + ("separated from zero" if diff.separated else "not separated from zero")
                  + " (benchmarks/stats.py). Paper (Table 1): RRO 1.86 / 1.64 samples per step vs 5 for fixed-size "
                  "exploration.", "",
              "Per run (DPO chosen / rejected: the implicit rewards β·log π_θ/π_ref of the pairs' actions, mean over "
              "DPO's last epoch; a negative chosen value means DPO made its preferred actions less likely too):", "",
              "| method | seed | # samples | steps | pairs | no rising | no contrast | rollouts | DPO chosen | "
              "DPO rejected | success | score |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|"]

    def implicit(value) -> str:
        return "–" if value is None else f"{value:+.3f}"

    for r in runs:
        lines.append(f"| {r['method']} | {r['seed']} | {r['samples_per_step']:.2f} | {r['steps']} | {r['pairs']} | "
                     f"{r['omitted_no_rising']} | {r['omitted_no_contrast']} | {r['rollouts']} | "
                     f"{implicit(r.get('dpo_chosen_reward'))} | {implicit(r.get('dpo_rejected_reward'))} | "
                     f"{r['success_rate']:.3f} | {r['score']:.3f} |")
    if shopping:
        lines += ["", "What the policies do on the held-out goals (greedy; `benchmarks/webshop_sft.py`'s metrics): "
                  "first action a valid search, second a click that opens a real product, a purchase:", "",
                  "| policy | valid search | product click | bought | score | invalid actions | won |",
                  "|---|---|---|---|---|---|---|"]
        for label, s in shopping.items():
            lines.append(f"| {label} | {s['first_action_valid_search']:.2f} | {s['second_action_valid_product_click']:.2f} | "
                         f"{s['bought']:.2f} | {s['mean_score']:.3f} | {s['invalid_frac']:.2f} | {s['success_rate']:.3f} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    args = parse_args()
    name = ("rro_samples" + ("" if args.env == "sokoban" else f"_{args.env}") + collection_variant(args)
            + variant(args) + ("_smoke" if args.smoke else ""))
    out = Path(args.out or Path(__file__).parent / "results" / name)
    tmp = tempfile.TemporaryDirectory() if args.smoke and not args.work else None
    work = Path(args.work or (tmp.name if tmp else "runs/bench_rro" + ("" if args.env == "sokoban" else f"_{args.env}")
                              + collection_variant(args)))
    work.mkdir(parents=True, exist_ok=True)

    def log(msg) -> None:
        print(msg, file=sys.stderr, flush=True)

    records = work / "records" if args.smoke else out.parent / f"{out.name}_runs"  # smoke: nothing committed
    t_start = time.perf_counter()
    sft = require_weights(args.model) if args.model else build_sft(args, work, log)
    base = settings(args) + [f"policy.model={sft}"]
    cfg0 = build_config(None, base + [f"out_dir={work / 'eval_sft'}"])
    log(f"π_SFT = {sft}; evaluating it on {args.eval_episodes} held-out levels")
    # records made before 2026-11-27 have no sft_sha256 and match no run now (their π_SFT's weights are lost)
    sft_sha = weights_sha256(sft)
    key = {"model": str(sft), "sft_sha256": sft_sha, "overrides": base, "eval_episodes": args.eval_episodes}
    sft_eval = cached(records / "sft_eval.json", key, lambda: held_out_metrics(cfg0, sft, args.eval_episodes),
                      args.note)
    # unfinished collections travel between sessions and machines in a snapshot, one per π_SFT. A DPO variant
    # trains on the plain runs' collections: it reads their snapshot and leaves writing it to the plain suite
    plain = out.with_name(out.name.removesuffix(variant(args))) if variant(args) else out
    snapshot = ((records if args.smoke else plain.parent / f"{plain.name}_runs")
                / f"unfinished_collections_{sft_sha[:12]}.tgz")
    restore_collections(snapshot, work, log)
    try:
        runs, missing = train_runs(args, base, key, sft, sft_eval, work, records, log)
    finally:
        if not args.smoke and not variant(args):
            snapshot_collections(snapshot, work, unfinished(args, key, work, records))
    # webshop: each finished π_DPO's shopping record is made now, while its work directory is here
    shopping = shopping_table(args, base, sft, sft_sha, work, records) if args.env == "webshop" else {}
    if missing:
        log(f"not run yet: {', '.join(missing)} (--methods {' '.join(args.methods)}); the finished runs are stored "
            f"under {records}, and the tables are written once every arm has every seed")
        return
    runs.sort(key=lambda r: (r["seed"], METHODS.index(r["method"])))
    agg, summary, diff, goal = aggregate(args, runs, sft_eval)
    result = {
        "benchmark": "rro_samples", "smoke": args.smoke,
        "settings": {k: v for k, v in vars(args).items() if k not in ("out", "work", "note", "methods")} | {
            "model": str(sft), "sft_sha256": sft_sha, "overrides": base,
            "env": ("sokoban 6x6, 1 box" + ("" if args.bare_grid else ", describe_positions")
                    if args.env == "sokoban" else "webshop (generated catalog, 1000 products)")},
        "sft": {"success_rate": sft_eval.get("eval/success_rate"), "score": sft_eval.get("eval/score")},
        "runs": runs, "shopping": shopping, "aggregate": agg, "summary": summary, "goal": goal,
        "note": args.note, "wall_seconds": round(time.perf_counter() - t_start, 1),
        "machine": machine_info(),
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(result, indent=2))
    text = markdown(args, result, diff)
    out.with_suffix(".md").write_text(text)
    print(text.removesuffix("\n"))
    print(f"\nwrote {out.with_suffix('.json')} and {out.with_suffix('.md')} ({result['wall_seconds']} s)")
    if tmp:
        tmp.cleanup()


def _stop_on_sigterm(signum, _frame) -> None:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # later signals wait while the snapshot is written
    raise KeyboardInterrupt(f"signal {signum}")


def cli() -> int:
    """``main()`` with Ctrl-C and SIGTERM (``kill``, ``timeout``, a job scheduler) both stopping it cleanly: the
    finished runs are kept and the unfinished collections go into the snapshot; exit code 130. A background
    job started from a script ignores SIGINT, so SIGTERM is how one is stopped."""
    from creditflow.errors import Interrupted

    previous = signal.signal(signal.SIGTERM, _stop_on_sigterm)
    try:
        main()
    except (Interrupted, KeyboardInterrupt) as exc:
        saved = f" {exc.saved};" if isinstance(exc, Interrupted) else ""
        print(f"interrupted:{saved} the same command goes on from there", file=sys.stderr)
        return 130
    finally:
        signal.signal(signal.SIGTERM, previous)
    return 0


if __name__ == "__main__":
    sys.exit(cli())
