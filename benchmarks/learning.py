"""Shared pieces of the learning-check benchmarks (``credit_learning.py``, ``crps_learning.py``).

Every method starts from the same pi_SFT and trains through the real pipeline (``run_train``, the code
behind ``creditflow train``) with the same budget; these helpers run one (method, seed), pull curves out
of its ``metrics.jsonl``, aggregate seeds and plot curves against env steps.

Statistics (``benchmarks/stats.py``): mean and the interquartile mean (IQM) over seeds, each with a 95%
stratified-bootstrap percentile interval, plus the per-seed values. This is rliable's method (Agarwal et al.,
2021: resample runs with replacement within each task, aggregate, take the 2.5/97.5 percentiles; IQM = mean
of the middle 50% of scores), written in NumPy because the rliable package (1.2.0, 2024) no longer imports
with current pandas/arch releases. ``benchmarks/report/`` adds the t-intervals and the paired differences
between arms that the docs' results pages report; run it (``make report``) once new records are committed, or
tests/test_report.py fails.

Resumable across sessions: each finished run's record is written to ``<results>_runs/<arm>_s<seed>.json``
next to the results table (commit it as it lands) together with the run's full config; a rerun with the
same config reuses the record without training, even on a machine without the run directory. The results
JSON keeps the aggregates (``summarize``) and an index of those records (``run_index``), not the runs again, so
it stays small as arms and seeds join it. A run that
was stopped part-way (Ctrl-C, a killed job, a lease that ended) continues from its newest checkpoint
(``rl.save_every`` steps apart) exactly as ``creditflow train --resume`` does, when its directory is still
there; a run directory of another config is trained again from the start.
A record names the precision its run trained in (``policy.dtype`` resolved: ``auto`` is float32 on a CPU and
bfloat16 on a bf16 GPU) but not the device, so float32 runs made on a lent GPU and on a CPU join one suite.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import time
from pathlib import Path

import numpy as np
import yaml
from matplotlib.figure import Figure

from benchmarks.cache import write_json
from benchmarks.machine import machine_info
from benchmarks.runner import child_env, module_command
from benchmarks.stats import BOOTSTRAP_REPS, interval_estimates, mean_sd  # noqa: F401 (the scripts use the first two)
from creditflow.config import build_config
from creditflow.credit import validate_knobs
from creditflow.recipes.train import run_train
from creditflow.trainer.checkpoint import checkpoint_step, latest_checkpoint
from creditflow.trainer.metrics import read_metrics

def parse_args(doc: str, name: str, methods, default_steps: int, add=None, default_methods=None,
               default_seeds=(0, 1, 2)) -> tuple[argparse.Namespace, Path, Path]:
    """The options every learning check shares; ``add(parser)`` adds the script's own. Sets torch's
    thread count and returns ``(args, results path without suffix, work directory)``; smoke runs get
    ``*_smoke`` paths of both. ``args.module`` is the benchmark's module (``benchmarks.<name>``): what a
    ``--jobs`` child runs."""
    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    ap.add_argument("--model", default=None, help="pi_SFT directory shared by all runs (default: build one)")
    ap.add_argument("--seeds", type=int, nargs="+", default=list(default_seeds))
    ap.add_argument("--steps", type=int, default=default_steps)
    ap.add_argument("--methods", nargs="+", default=list(default_methods or methods), choices=list(methods),
                    help="which arms, in this order (put -- before key=value overrides after this list)")
    ap.add_argument("--work", default=f"runs/{name}", help="run directories go here; finished runs are reused")
    ap.add_argument("--out", default=None, help="results path without suffix")
    ap.add_argument("--smoke", action="store_true", help="seconds-long budget to check the pipeline")
    ap.add_argument("--threads", type=int, default=None,
                    help="torch intra-op threads (1 is much faster for the tiny model on a busy machine)")
    ap.add_argument("--only-recorded", action="store_true",
                    help="train nothing: aggregate the runs that have a record (e.g. runs made on another machine)")
    ap.add_argument("--machine-from", default=None,
                    help="take the machine block from this results JSON (the machine the records were made on)")
    ap.add_argument("--note", default="", help="a paragraph for the results (hardware, load, what was seen)")
    ap.add_argument("--shared", default=None, metavar="TEXT",
                    help="what else ran on this machine while these runs trained (e.g. 'an audit, 1 thread'); kept "
                         "with each new run record's machine block")
    ap.add_argument("--jobs", type=int, default=1,
                    help="train the missing runs as this many processes at once, one torch thread each (a GPU "
                         "machine's cores: they share the GPU); the tables are written once all have finished")
    ap.add_argument("--one", default=None, help=argparse.SUPPRESS)  # METHOD:SEED, a child of --jobs
    if add is not None:
        add(ap)
    ap.add_argument("extra", nargs="*", help="extra key=value overrides for every RL run")
    args = ap.parse_args()
    args.module = f"benchmarks.{name}"
    if args.jobs < 1:
        ap.error(f"--jobs must be at least 1, got {args.jobs}")
    if args.one:  # one run of a --jobs pool: only it, one thread, no tables
        method, _, seed = args.one.rpartition(":")
        args.methods, args.seeds, args.threads, args.jobs = [method], [int(seed)], 1, 1
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    suffix = "_smoke" if args.smoke else ""
    out = Path(args.out or Path(__file__).parent / "results" / f"{name}{suffix}")
    args.records = out.parent / f"{out.name}_runs"
    work = Path(args.work + suffix)
    work.mkdir(parents=True, exist_ok=True)
    return args, out, work


def train_one(out: Path, overrides: list[str], seed: int, curves: tuple[str, ...],
              record: Path | None = None, shared: str | None = None) -> dict:
    """One RL run (``overrides`` must name the policy, env, budget and method); returns its record.

    ``record`` (a JSON path): where the finished run's record is kept, with the machine that trained it
    (:func:`run_machine`; ``shared``: what else ran there); an existing record of the same config is returned
    without training."""
    cfg = build_config(None, [f"out_dir={out}", f"seed={seed}", *overrides])
    want = _config_key(cfg)
    if record is not None and record.exists():
        stored = json.loads(record.read_text())
        if same_config(_before_knobs(stored.get("config")), want):
            return {**stored["record"], "reused": True}
    t0 = time.perf_counter()
    reused = finished_run(out, cfg)
    resumed_at = None
    machine = None if reused else run_machine(shared)
    if not reused:
        resumed_at = resumable_step(out, cfg)
        if resumed_at is not None:  # stopped part-way: continue from its checkpoint (same metrics as one go)
            run_train(cfg, resume=True, log=lambda *_: None)
        else:
            if out.is_symlink():  # a shared arm that is not finished there: train it here
                out.unlink()
            elif out.exists():  # another config, or stopped before its first checkpoint: start again
                shutil.rmtree(out)
            run_train(cfg, log=lambda *_: None)
    result = _record(out, seed, curves, reused, (time.perf_counter() - t0) / 60)
    result["resumed_at_step"] = resumed_at
    model = Path(cfg.policy.model) if cfg.policy.model else None
    if model is not None and model.is_dir():  # which pi_SFT this was: arms are paired only on the same weights
        result["sft_sha256"] = weights_sha256(model)  # ``minutes`` then counts this invocation only; rl_minutes is whole
    if record is not None:
        if machine is not None:
            machine["load_average_end"] = _load_average()
        write_json(record, {"config": want, "record": result, "machine": machine})
    return result


def _load_average() -> list[float] | None:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except (OSError, AttributeError):
        return None


def run_machine(shared: str | None = None) -> dict:
    """The machine block of a run record: :func:`benchmarks.machine.machine_info`, the torch threads the run
    trains with, the 1/5/15-minute load averages when it starts (``load_average_start``; the record adds
    ``load_average_end``) and ``shared``, what else ran on the machine as its operator said (None: not said)."""
    import torch

    return {**machine_info(), "torch_threads": torch.get_num_threads(), "load_average_start": _load_average(),
            "shared": shared}


def weights_sha256(model: Path) -> str:
    """sha256 over a model directory's weight files. Record keys carry it next to the path: a π_SFT rebuilt at
    the same path differs from the original (CPU hosts round differently; docs/architecture.md), and its runs
    must not be pooled with the original's."""
    digest = hashlib.sha256()
    for f in sorted([*model.glob("*.safetensors"), *model.glob("*.bin")]):
        digest.update(f.name.encode())
        with open(f, "rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                digest.update(block)
    return digest.hexdigest()


def train_in_parallel(args, overrides_of, model: Path, work: Path) -> None:
    """Train the (method, seed) runs of ``args`` that have no record as ``args.jobs`` processes at once: each
    is this benchmark again (``python -m benchmarks.<name>``), given ``--one METHOD:SEED`` and the built pi_SFT,
    which trains that run at one torch thread and writes its record (``overrides_of(method, seed)`` is the run's
    overrides, as the caller trains it). Each child's output goes to ``work/logs/<method>_s<seed>.log``. The caller then builds its tables
    from the records, as ``--only-recorded`` does; a failed run has none and is left out."""
    import signal
    import subprocess
    import sys

    todo = [(m, s) for s in args.seeds for m in args.methods
            if not recorded(overrides_of(m, s), work / f"{m}_s{s}", s, args.records / f"{m}_s{s}.json")]
    logs = work / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    running = {}
    print(f"training {len(todo)} runs, {args.jobs} at a time (logs in {logs})", flush=True)

    stopping = False

    def stop(signum, _frame):  # SIGTERM from a job scheduler or `timeout`
        nonlocal stopping
        if stopping:  # `timeout` signals this process and then its whole group: stop once, quietly
            return
        stopping = True
        raise KeyboardInterrupt(f"signal {signum}")

    previous = signal.signal(signal.SIGTERM, stop)
    try:
        while todo or running:
            while todo and len(running) < args.jobs:
                method, seed = todo.pop(0)
                log = (logs / f"{method}_s{seed}.log").open("w")
                cmd = module_command(args.module, "--one", f"{method}:{seed}", "--model", str(model), *sys.argv[1:])
                running[(method, seed)] = (subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT,
                                                            env=child_env()), log, time.time())
            time.sleep(2)
            for key, (proc, log, t0) in list(running.items()):
                if proc.poll() is None:
                    continue
                log.close()
                del running[key]
                status = "finished" if not proc.returncode else f"FAILED (exit {proc.returncode})"
                print(f"{key[0]} seed {key[1]}: {status}"
                      f" after {(time.time() - t0) / 60:.1f} min; log {logs / f'{key[0]}_s{key[1]}.log'}", flush=True)
    except KeyboardInterrupt:
        # stop every child too (none is left running on its own), then say what a rerun does
        stopping = True  # (already so for SIGTERM; Ctrl-C arrives as KeyboardInterrupt itself)
        for proc, log, _ in running.values():
            proc.terminate()
        for proc, log, _ in running.values():
            proc.wait()
            log.close()
        names = ", ".join(f"{m} seed {s}" for m, s in running)
        waiting = f" and {len(todo)} not started" if todo else ""
        raise SystemExit(f"stopped: {names or 'no run'} interrupted{waiting}; rerun the same command to continue "
                         f"them from their newest checkpoints (run directories under {work})") from None
    finally:
        if not stopping:  # once stopping, later signals stay ignored until this process exits
            signal.signal(signal.SIGTERM, previous)


def recorded(overrides: list[str], out: Path, seed: int, record: Path) -> bool:
    """True when ``record`` holds a finished run of exactly this config (what ``train_one`` would reuse)."""
    if not record.exists():
        return False
    cfg = build_config(None, [f"out_dir={out}", f"seed={seed}", *overrides])
    return same_config(_before_knobs(json.loads(record.read_text()).get("config")), _config_key(cfg))


def machine_of(args, default: dict) -> dict:
    """The machine block of the results: ``default`` (this machine) unless ``--machine-from`` names a results
    JSON whose runs these are."""
    if not args.machine_from:
        return default
    return json.loads(Path(args.machine_from).read_text())["machine"]


def same_config(stored: dict | None, want: dict) -> bool:
    """``stored`` (a record's config) is the run ``want`` asks for. A setting that a later version added
    (absent from ``stored``) matches when ``want`` leaves it at its default, so records stay valid when new
    options appear."""
    if stored is None:
        return False
    return _same(_effective(stored), _effective(want), _config_key(build_config(None, [])))


# knobs a later version added, with the value a record made before them ran at (what the arms now pin):
# GRPO's std was the population std until issue 74 (ddof 0; today's default is 1); GraphGPO's default was the
# reading that is now preset=reproduction, and GiGPO had no invalid penalty, until issue 84
EARLIER_KNOBS = {"grpo": {"ddof": 0}, "graphgpo": {"preset": "reproduction"}, "gigpo": {"invalid_penalty": 0.0}}


def _before_knobs(stored: dict | None) -> dict | None:
    """A record's config with the knobs of :data:`EARLIER_KNOBS` that it does not name set to the values it ran
    at. Records made since name them (``_config_key``)."""
    rl = (stored or {}).get("rl")
    earlier = EARLIER_KNOBS.get(rl.get("algo")) if isinstance(rl, dict) else None
    if not earlier:
        return stored
    credit = rl.get("credit") or {}
    return {**stored, "rl": {**rl, "credit": {**{k: v for k, v in earlier.items() if k not in credit}, **credit}}}


TINY_BUILD = ("tiny_vocab_size", "tiny_hidden_size", "tiny_layers")  # used only to build the tiny default


DTYPE_ALIASES = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16",
                 # records made before keys held the resolved precision: every such ``auto`` run was on a CPU
                 "auto": "float32"}


def _effective(key: dict) -> dict:
    """``key`` without the settings that cannot change the run: the device (hardware, like the CPU model:
    a run's machine is in its results' notes), how often checkpoints are saved (``rl.save_every``), the tiny
    default's build settings when the run starts from a given model (``policy.model``); precision names are
    made canonical (``fp32`` = ``float32``), what is kept of checkpoints and where metrics are tracked
    (``checkpoint``, ``logging``, and ``tensorboard``, their switch before ``logging.report_to``); the local paths
    are compared absolute (a run directory's ``config.yaml`` keeps them so, a record as they were given, from the
    repository root)."""
    key = {k: v for k, v in key.items() if k not in ("checkpoint", "logging", "tensorboard")}
    for section, name in (("policy", "model"), ("rro", "data_dir")):
        inner = key.get(section)
        if isinstance(inner, dict) and isinstance(inner.get(name), str) and inner[name]:
            key = {**key, section: {**inner, name: os.path.abspath(inner[name])}}
    if isinstance(key.get("rl"), dict) and "save_every" in key["rl"]:
        key = {**key, "rl": {k: v for k, v in key["rl"].items() if k != "save_every"}}
    dpo = (key.get("rro") or {}).get("dpo")
    if isinstance(dpo, dict) and dpo.get("lora") is False:  # before LoRA moved to policy.lora: off = today's default
        key = {**key, "rro": {**key["rro"], "dpo": {k: v for k, v in dpo.items() if not k.startswith("lora")}}}
    policy = key.get("policy")
    if not isinstance(policy, dict):
        return key
    policy = {k: v for k, v in policy.items() if k != "device" and not (policy.get("model") and k in TINY_BUILD)}
    if "dtype" in policy:
        policy["dtype"] = DTYPE_ALIASES.get(policy["dtype"], policy["dtype"])
    return {**key, "policy": policy}


def _same(stored, want, default) -> bool:
    if isinstance(stored, dict) and isinstance(want, dict):
        return all(_same(stored[k], want[k], (default or {}).get(k)) if k in stored else want[k] == (default or {}).get(k)
                   for k in want) and set(stored) <= set(want)
    return stored == want


def _config_key(cfg) -> dict:
    """The run's identity: its config, with ``policy.dtype`` resolved to the precision it trains in on this
    machine (``auto`` is bfloat16 on a CUDA card with bf16 and float32 elsewhere, so a run made with ``auto``
    on a GPU is not the same run as one made on a CPU)."""
    key = json.loads(json.dumps(cfg.model_dump(exclude={"out_dir", "resumes"})))  # JSON-normal (tuples -> lists)
    policy = key.get("policy")
    if isinstance(policy, dict) and policy.get("dtype") == "auto" and policy.get("autocast", "none") == "none":
        from creditflow.errors import UserError
        from creditflow.policy.load import resolve_device, resolve_dtype

        try:
            policy["dtype"] = str(resolve_dtype("auto", resolve_device(policy.get("device", "auto")))).removeprefix("torch.")
        except UserError:  # a device this machine lacks (tables made elsewhere): what auto means there is unknown
            pass
    rl = key.get("rl")
    if isinstance(rl, dict) and rl.get("algo") in EARLIER_KNOBS and isinstance(rl.get("credit"), dict):
        # the knobs of EARLIER_KNOBS named even at their defaults: a record without them is older (_before_knobs)
        defaults = validate_knobs(rl["algo"], {})
        for knob in EARLIER_KNOBS[rl["algo"]]:
            rl["credit"].setdefault(knob, getattr(defaults, knob))
    return key


DIAGNOSTICS = ("train/noop_frac", "train/invalid_frac", "train/adv_std")  # per-run means in each record


def _record(out: Path, seed: int, curves: tuple[str, ...], reused: bool, minutes: float) -> dict:
    rows = read_metrics(out / "metrics.jsonl")
    train_rows = [r for r in rows if r.get("step", 0) > 0]

    def mean_of(key):
        vals = [r[key] for r in train_rows if key in r]
        return float(np.mean(vals)) if vals else None

    return {
        "seed": seed, "minutes": minutes, "reused": reused,
        "curves": {k: [[r["step"], r[k]] for r in rows if k in r] for k in curves},
        # held-out success against env steps consumed (equal env-step budgets are what arms are compared at)
        "eval_by_env_steps": [[r.get("env_steps", 0), r["eval/success_rate"]] for r in rows
                              if "eval/success_rate" in r],
        "final_eval_success": rows[-1].get("eval/success_rate"),
        "initial_eval_success": rows[0].get("eval/success_rate"),
        "final_eval_score": rows[-1].get("eval/score"),
        "mean_train_success": mean_of("train/success_rate"),
        "mean_all_zero_frac": mean_of("groups/all_zero_frac"),
        "mean_entropy": mean_of("groups/entropy"),
        "env_steps": rows[-1].get("env_steps"),
        "rl_minutes": sum(r.get("time/step_s", 0.0) for r in train_rows) / 60,  # training steps, no evals
        "restore_mismatches": rows[-1].get("crps/restore_mismatches", 0),
        # what each arm's credit saw (e.g. groups with a success, degenerate groups) and what it changed
        "diagnostics": {k: mean_of(k) for k in sorted({k for r in train_rows for k in r})
                        if k.startswith("credit/") or k in DIAGNOSTICS},
    }


def finished_run(out: Path, cfg) -> bool:
    """True when ``out`` (a directory or a link to one, e.g. another benchmark's run) holds a finished
    run of this configuration (all but ``out_dir``, matched as ``same_config`` matches a record): rerunning a
    benchmark, or a second benchmark that shares an arm with the first, reuses it instead of training again."""
    try:
        saved = yaml.safe_load((out / "config.yaml").read_text(encoding="utf-8"))
        rows = read_metrics(out / "metrics.jsonl")
    except Exception:  # missing or unreadable: not finished
        return False
    for key in ("out_dir", "resumes"):  # where a run lives and its resume log don't matter
        saved.pop(key, None)
    return same_config(saved, _config_key(cfg)) and bool(rows) and rows[-1].get("step") == cfg.rl.steps


def resumable_step(out: Path, cfg) -> int | None:
    """The step of the newest checkpoint when ``out`` (a real directory, not a shared arm's link) holds an
    unfinished run of this configuration, else None."""
    if out.is_symlink():
        return None
    try:
        saved = yaml.safe_load((out / "config.yaml").read_text(encoding="utf-8"))
        step = checkpoint_step(latest_checkpoint(out))
    except Exception:  # no config, no checkpoint, or an unreadable one: nothing to continue
        return None
    for key in ("out_dir", "resumes"):
        saved.pop(key, None)
    return step if same_config(saved, _config_key(cfg)) and 0 < step < cfg.rl.steps else None


SCALARS = ("final_eval_success", "initial_eval_success", "final_eval_score", "mean_train_success",
           "mean_all_zero_frac", "mean_entropy", "env_steps", "rl_minutes")


def summarize(runs: list[dict], curves: tuple[str, ...]) -> dict:
    """Mean, std and per-seed values of the scalars; for held-out success and the gain also the IQM and
    95% bootstrap intervals of mean and IQM (``ci95``, ``iqm_ci95``); per-step mean/std of every curve and
    the held-out curve against env steps."""

    out = {k: ms_of([r[k] for r in runs if r.get(k) is not None]) for k in SCALARS}
    out["gain"] = ms_of([r["final_eval_success"] - r["initial_eval_success"] for r in runs
                         if r.get("final_eval_success") is not None and r.get("initial_eval_success") is not None])
    for key in ("final_eval_success", "gain"):
        out[key].update(interval_estimates(out[key]["values"]))
    # the k-th evaluation of every run (a suite's runs share one eval schedule), at the seeds' mean env
    # steps: runs of one arm reach an evaluation after different env-step counts (episodes end early on
    # success), so points keyed by raw env steps would not line up across seeds
    by_eval: dict[int, list[tuple[float, float]]] = {}
    for r in runs:
        for k, (env_steps, v) in enumerate(r.get("eval_by_env_steps", [])):
            by_eval.setdefault(k, []).append((env_steps, v))
    out["eval_by_env_steps"] = [[float(np.mean([e for e, _ in pts])), float(np.mean([v for _, v in pts])),
                                 float(np.std([v for _, v in pts]))] for _, pts in sorted(by_eval.items())]
    out["curves"] = {}
    for key in curves:
        by_step: dict[int, list[float]] = {}
        for r in runs:
            for step, v in r["curves"].get(key, []):
                by_step.setdefault(step, []).append(v)
        out["curves"][key] = [[s, float(np.mean(v)), float(np.std(v))] for s, v in sorted(by_step.items())]
    return out


def run_index(runs: dict[str, list[dict]], records: Path) -> dict[str, list[dict]]:
    """A summary's ``runs``: per arm, each run's seed and its record (``<arm>_s<seed>.json`` in ``records``, named
    from the results folder). The records hold each run (curves, diagnostics, config); the summary keeps only
    their aggregates, so it stays small however many arms and seeds join it."""
    return {arm: [{"seed": r["seed"], "record": f"{records.name}/{arm}_s{r['seed']}.json"} for r in rs]
            for arm, rs in runs.items()}


def ms_of(vals: list[float]) -> dict:
    """Mean, ``std`` (``stats.mean_sd`` with ddof 0, as these summaries have always kept it) and the values."""
    mean, sd = mean_sd(vals, ddof=0)
    return {"mean": mean, "std": sd, "values": [float(v) for v in vals]}


def fmt(stat: dict, digits: int = 3) -> str:
    """``mean [ci95 lo, hi] (v1, v2, ...)`` (or ``mean ± std`` without an interval, labelled: ddof 0) for a
    table cell."""
    if stat.get("mean") is None:
        return "-"
    vals = ", ".join(f"{v:.2f}" for v in stat["values"])
    if stat.get("ci95"):
        lo, hi = stat["ci95"]
        return f"{stat['mean']:.{digits}f} [{lo:.{digits}f}, {hi:.{digits}f}] ({vals})"
    return f"{stat['mean']:.{digits}f} ± {stat['std']:.{digits}f} sd (ddof 0; {vals})"


def plot(summary: dict[str, dict], panels: list[tuple[str, str]], title: str, path: Path) -> None:
    """First panel: held-out success against env steps (mean over seeds, ± std band); then one panel per
    (curve key, title) against training steps; one line per method."""
    fig = Figure(figsize=(5 * (len(panels) + 1), 4))
    axes = fig.subplots(1, len(panels) + 1, squeeze=False)[0]
    for method, s in summary.items():
        pts = s.get("eval_by_env_steps")
        if pts:
            x, m, sd = (np.array(v) for v in zip(*pts))
            axes[0].plot(x, m, marker="o" if len(x) < 15 else None, label=method)
            axes[0].fill_between(x, m - sd, m + sd, alpha=0.2)
    axes[0].set_title("held-out success vs env steps")
    axes[0].set_xlabel("env steps")
    for ax, (key, panel_title) in zip(axes[1:], panels):
        for method, s in summary.items():
            pts = s["curves"].get(key)
            if not pts:
                continue
            st, m, sd = (np.array(x) for x in zip(*pts))
            ax.plot(st, m, marker="o" if len(st) < 15 else None, label=method)
            ax.fill_between(st, m - sd, m + sd, alpha=0.2)
        ax.set_title(panel_title)
        ax.set_xlabel("training step")
    if axes[0].get_legend_handles_labels()[0]:  # no lines when no run is recorded yet
        axes[0].legend()
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
