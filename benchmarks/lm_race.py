"""The LM learning race (issue 87): the credit audit's tabular race with the LM in the tabular policy's place.

    python -m benchmarks.lm_race --setting demo --model runs/credit_demo100/sft/sft_model --jobs 2 --shared TEXT
    python -m benchmarks.lm_race --setting sokoban7 --build-sft runs/sokoban7_sft      # a setting's pi_SFT
    python -m benchmarks.lm_race --setting sokoban7 --model DIR --measure --seeds 100 101 102 103   # pi_SFT on pools
    python -m benchmarks.lm_race --setting demo --model DIR --pilot --seeds 100 101 --methods grpo rewardflow
    python -m benchmarks.lm_race --smoke                                               # the pipeline, in seconds

Every run starts from one pi_SFT (``--model``) and trains with creditflow's trainer on a **fixed pool** of
``--pool`` tasks (``env.train_pool``): seed ``s`` plays the pool of env seeds ``POOL_BASE + POOL_STRIDE * s + i``
(i < pool), so a seed names its pool, every arm of that seed trains on the same pool with the same task sequence
(the trainer's task draw is seeded by ``s``), and the pools of different seeds are disjoint from each other, from
every training seed (below 10^6), from the held-out levels other checks evaluate on (10^6 + i, i < 512) and from
the test split (2 x 10^6 + i). Every ``--eval-every`` steps the greedy policy plays each pool task once; the
record keeps that curve and the report scores it as the tabular race scores its own
(:func:`creditflow.auditing.race.curve_summary`: area under the curve after its start, final value, first step at
the setting's threshold). ``--test-levels`` new levels (the test split) are played greedily before RL and after
it, by the same runs: the order on new levels beside the order on the pool.

The budget is the 100-step demo check's (``credit_learning_demo100``: 4 tasks x 8 rollouts a step, lr 2e-4, one
mini-batch, no KL, traj-mean loss, 16 new tokens), each estimator at today's defaults and its own default reward
as the learning checks run it (``credit_learning.ARMS``; GRPO with the sample std, ``rl.credit.ddof`` 1, not the
population std the older records pinned; GraphGPO's official preset at the setting's omega); float32.
``STEPS``, ``POOL``, ``EVAL_EVERY`` and the thresholds are fixed by the pilot before the real seeds: ``--pilot``
runs seeds from ``PILOT_FROM`` up only, into records of their own (``lm_race_<setting>_pilot``), and the real
suite refuses those seeds, so nothing reported was tuned on. ``--measure`` is the pilot's first half: pi_SFT's
success on candidate pools, greedy and with ``--group-size`` sampled episodes per task (how many groups would mix
successes and failures), into ``lm_race_pools_<setting>_<sha12>.json``; the issue asks for a harder setting where
pi_SFT solves roughly 10-40% of a pool.

Records, resume, ``--jobs``, ``--shared`` and ``--only-recorded`` are the learning checks' (``benchmarks/learning.py``):
one record per (arm, seed) in ``benchmarks/results/lm_race_<setting>_runs/`` with its config and machine; a rerun
trains only the runs without a record and continues a stopped one from its checkpoint. ``benchmarks/report/``
writes the pages from the records.
"""

from __future__ import annotations

import contextlib
import io
import json
import time
from pathlib import Path

from benchmarks import credit_learning, learning
from benchmarks.machine import machine_info
from creditflow.auditing.race import curve_summary
from creditflow.config import build_config

# candidate settings: env overrides, the title pages give them, the pool success the steps-to-threshold count to
# and GraphGPO's omega (its authors' Sokoban run script: 0.8). The demo's threshold is fixed by its pilot
# (lm_race_demo_pilot.json: seeds 100-101, GRPO and RewardFlow, 2026-12-06) by an arm-blind rule: the highest pool
# success every pilot run reached within STEPS. pi_SFT played 0.44-0.56 of the pools; after 40 steps the runs ended
# at 0.69-0.75; 0.75 (12 of 16) was reached by 1 of 4 runs, 11 of 16 by all four (at steps 15-30), so 0.65.
# 7x7 with 1 box, by the same rule (lm_race_sokoban7_pilot.json, 2026-12-06): pi_SFT played 0.06-0.25 of the pools;
# after 40 steps the runs ended at 0.38-0.62; 6 of 16 was reached by all four runs (steps 5-25), 7 of 16 by three,
# so 0.35. The hard setting's threshold stays provisional until its pilot.
SETTINGS = {
    "demo": {"title": "Sokoban 6×6, 1 box (the demo's levels)", "env": credit_learning.SETTINGS["demo"],
             "threshold": 0.65, "omega": 0.8},
    # harder candidates, for --measure: 7x7 with one box (plans of at least 4 moves), and the 2-box hard setting
    # (with its own pi_SFT or a stronger one: --build-sft DIR -- sft.demos=... sft.epochs=...)
    "sokoban7": {"title": "Sokoban 7×7, 1 box", "env": ["env.name=sokoban", "env.kwargs.size=7",
                                                        "env.kwargs.num_boxes=1", "env.kwargs.max_steps=20",
                                                        "env.kwargs.min_plan=4", "env.kwargs.describe_positions=true"],
                 "threshold": 0.35, "omega": 0.8},
    "hard": {"title": "Sokoban 7×7, 2 boxes", "env": credit_learning.SETTINGS["hard"], "threshold": 0.5, "omega": 0.8},
}
METHODS = credit_learning.METHODS
ARMS = {**credit_learning.ARMS, "grpo": ["rl.algo=grpo"]}  # GRPO at today's default std (ddof 1)
DEFAULT_METHODS = ("grpo", "gigpo", "rewardflow", "graphgpo")
SEEDS = tuple(range(10))
# fixed by the demo's pilot: 40 steps of 4 x 8 (the curves rise for 20-35 steps, then hold), pools of 16 and the
# pool played every 5 steps; a run costs 6-8 minutes (pilot) to 8-10 (reported seeds, with test levels) as one of
# two one-thread processes (AMD EPYC, 2 cores)
STEPS, POOL, EVAL_EVERY, TEST_LEVELS = 40, 16, 5, 128
POOL_BASE, POOL_STRIDE = 1_100_000, 1_000
PILOT_FROM = 100  # seeds from here up are the pilot's (tuning), never reported
BUDGET = [*credit_learning.FULL, "rollout.tasks_per_step=4", "rollout.group_size=8", "rl.minibatches=1",
          "policy.dtype=float32"]
SMOKE = [*credit_learning.SMOKE, "policy.dtype=float32"]
CURVES = ("eval/success_rate", "train/success_rate", "test/success_rate", "groups/all_zero_frac", "groups/entropy",
          "train/adv_std")


def pool_offset(seed: int) -> int:
    """The first env seed of seed ``seed``'s pool (``env.eval_seed_offset`` of its runs)."""
    return POOL_BASE + POOL_STRIDE * seed


def pool_seeds(seed: int, pool: int) -> list[int]:
    return [pool_offset(seed) + i for i in range(pool)]


def race_overrides(setting: dict, model: Path, method: str, seed: int, steps: int, pool: int, eval_every: int,
                   test_levels: int, budget: list[str], extra: list[str]) -> list[str]:
    """One run's overrides: the setting, the budget, the arm, then the pool and its evaluation, then ``extra``."""
    omega = [f"rl.credit.omega={setting['omega']}"] if method == "graphgpo" else []
    return [f"policy.model={model}", f"rl.steps={steps}", *ARMS[method], *omega, *setting["env"], *budget,
            f"env.eval_seed_offset={pool_offset(seed)}", f"env.train_pool={pool}", f"rl.eval_episodes={pool}",
            f"rl.eval_every={eval_every}", f"rl.test_episodes={test_levels}", *extra]


def race_scores(record: dict, threshold: float) -> dict:
    """A run record's race numbers: the pool curve's ``auc``, ``final``, ``reached_at`` (RL steps) and ``start``
    (pi_SFT's pool success), the test split before and after RL where it was played, and the training curve's
    area (mean on-policy training success over steps 1..T)."""
    curve = record["curves"]["eval/success_rate"]
    out = {**curve_summary(curve, threshold), "start": curve[0][1]}
    test = record["curves"].get("test/success_rate") or []
    out["test_start"], out["test_final"] = (test[0][1], test[-1][1]) if len(test) >= 2 else (None, None)
    out["train_auc"] = record.get("mean_train_success")
    return out


def task_seed(traj) -> int:
    """The env seed of an evaluation episode (its task id is ``<env>/<seed>``)."""
    return int(traj.task_id.rsplit("/", 1)[1])


def measure(args, setting: dict, model: Path, out: Path) -> dict:
    """pi_SFT on each seed's pool: greedy (one episode a task) and ``--group-size`` episodes a task at the training
    temperature; written to ``out`` with the machine."""
    from rich.console import Console

    from creditflow.recipes.eval import evaluate_saved_policy
    from creditflow.recipes.progress import RunProgress

    quiet = RunProgress(Console(file=io.StringIO()))
    t0 = time.perf_counter()
    seeds = {}
    base = [*setting["env"], f"policy.model={model}", *(SMOKE if args.smoke else BUDGET), *args.extra]
    for seed in args.seeds:
        pool = [*base, f"env.eval_seed_offset={pool_offset(seed)}", f"rl.eval_episodes={args.pool}"]
        cfg = build_config(None, [*pool, f"seed={seed}"])
        _, trajs = evaluate_saved_policy(cfg, model, args.pool, progress=quiet)
        greedy = [float(t.success) for t in sorted(trajs, key=task_seed)]
        wins = [0] * args.pool
        for g in range(args.group_size):
            cfg = build_config(None, [*pool, f"seed={g}", f"generation.eval_temperature={cfg.generation.temperature}"])
            _, trajs = evaluate_saved_policy(cfg, model, args.pool, progress=quiet)
            for t in trajs:
                wins[task_seed(t) - pool_offset(seed)] += int(t.success)
        sampled = [w / args.group_size for w in wins]
        seeds[str(seed)] = {"pool": pool_seeds(seed, args.pool), "greedy": greedy, "sampled": sampled}
        mixed = sum(0 < p < 1 for p in sampled) / args.pool
        print(f"seed {seed}: greedy {sum(greedy) / args.pool:.3f}, sampled {sum(sampled) / args.pool:.3f}, "
              f"tasks whose group of {args.group_size} mixes outcomes {mixed:.2f}", flush=True)
    result = {"benchmark": "lm_race --measure", "setting": args.setting, "title": setting["title"],
              "env": setting["env"], "model": str(model), "sft_sha256": learning.weights_sha256(model),
              "pool": args.pool, "group_size": args.group_size, "temperature": cfg.generation.temperature,
              "smoke": args.smoke, "seeds": seeds, "minutes": (time.perf_counter() - t0) / 60,
              "machine": learning.run_machine(args.shared)}
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2))
    print(f"-> {out}")
    return result


def summary(runs: dict[str, list[dict]], threshold: float) -> dict:
    """Per arm: the race numbers' mean, std (ddof 0) and per-seed values, and how many runs reached the threshold."""
    out = {}
    for arm, rs in runs.items():
        scores = [race_scores(r, threshold) for r in rs]
        out[arm] = {k: learning.ms_of([s[k] for s in scores if s[k] is not None])
                    for k in ("auc", "final", "start", "test_start", "test_final", "train_auc")}
        out[arm]["reached"] = sum(s["reached_at"] is not None for s in scores)
    return out


def markdown(result: dict) -> str:
    s = result["settings"]
    lines = ["# LM race: " + s["title"], "",
             ("**SMOKE RUN: tiny budget, the numbers say nothing about the methods.**\n" if s["smoke"] else "")
             + ("**PILOT: tuning seeds, not reported.**\n" if s["pilot"] else ""),
             f"{s['steps']} RL steps of {s['B']} × {s['G']} on a pool of {s['pool']} tasks per seed, greedy pool "
             f"success every {s['eval_every']} steps; threshold {s['threshold']:g}; seeds {s['seeds']}; π_SFT "
             f"{s['model']} (sha256 {(s['sft_sha256'] or 'not recorded')[:12]}). The report's page has the paired "
             "differences.", "",
             "| arm | pool AUC | final | π_SFT on the pool | reached threshold | test before → after |",
             "|---|---|---|---|---|---|"]
    for arm, r in result["summary"].items():
        test = (f"{r['test_start']['mean']:.3f} → {r['test_final']['mean']:.3f}" if r["test_final"]["mean"] is not None
                else "–")
        lines.append(f"| {arm} | {r['auc']['mean']:.3f} | {r['final']['mean']:.3f} | {r['start']['mean']:.3f} | "
                     f"{r['reached']} of {len(r['auc']['values'])} | {test} |")
    return "\n".join(lines) + "\n"


def add_options(ap) -> None:
    ap.add_argument("--setting", default="demo", choices=list(SETTINGS), help="see SETTINGS")
    ap.add_argument("--pool", type=int, default=POOL, help="tasks in each seed's pool")
    ap.add_argument("--eval-every", type=int, default=EVAL_EVERY, help="RL steps between greedy plays of the pool")
    ap.add_argument("--test-levels", type=int, default=TEST_LEVELS,
                    help="new levels (test split) played greedily before and after RL (0: none)")
    ap.add_argument("--threshold", type=float, default=None, help="pool success the steps are counted to "
                    "(default: the setting's)")
    ap.add_argument("--pilot", action="store_true", help=f"tuning runs: seeds >= {PILOT_FROM} only, own records")
    ap.add_argument("--measure", action="store_true", help="measure pi_SFT on each seed's pool and stop")
    ap.add_argument("--group-size", type=int, default=8, help="--measure: sampled episodes per pool task")
    ap.add_argument("--build-sft", default=None, metavar="DIR",
                    help="build only the setting's pi_SFT (the demo's SFT budget, then the -- overrides), into "
                         "DIR/sft_model, and stop")


def check_seeds(args, ap_error) -> None:
    tuning = [s for s in args.seeds if s >= PILOT_FROM]
    if args.pilot or args.measure:
        if len(tuning) < len(args.seeds):
            ap_error(f"--pilot and --measure take tuning seeds only (>= {PILOT_FROM}), got {args.seeds}")
    elif tuning and not args.smoke:
        ap_error(f"seeds >= {PILOT_FROM} are the pilot's (tuning, never reported): {tuning}; add --pilot")


def main() -> None:
    args, out, work = learning.parse_args(__doc__, "lm_race", METHODS, default_steps=STEPS, add=add_options,
                                          default_methods=DEFAULT_METHODS, default_seeds=SEEDS)
    setting = SETTINGS[args.setting]

    def error(message):
        raise SystemExit(f"error: {message}")

    check_seeds(args, error)
    if args.build_sft:
        model = credit_learning.build_sft(Path(args.build_sft), args.smoke, setting["env"], args.extra)
        print(f"pi_SFT: {model} (sha256 {learning.weights_sha256(model)})", flush=True)
        return
    pool = 2 if args.smoke else args.pool
    args.pool = pool
    suffix = ("_pilot" if args.pilot else "") + ("_smoke" if args.smoke else "")
    if args.out is None:  # each setting (and the pilot) keeps its own records
        out = out.with_name(f"lm_race_{args.setting}{suffix}")
        args.records = out.parent / f"{out.name}_runs"
    if args.work == "runs/lm_race":
        work = work.with_name(f"lm_race_{args.setting}{suffix}")
        work.mkdir(parents=True, exist_ok=True)
    if not args.model:
        if not args.smoke:
            error("give --model DIR, the pi_SFT every arm starts from (--build-sft DIR builds one)")
        with contextlib.redirect_stdout(io.StringIO()):
            args.model = str(credit_learning.build_sft(work / "sft", True, setting["env"]))
    model = Path(args.model)
    if args.measure:
        sha = learning.weights_sha256(model)[:12]
        measure(args, setting, model, out.parent / f"lm_race_pools_{args.setting}_{sha}{suffix}.json")
        return
    steps, budget = (2, SMOKE) if args.smoke else (args.steps, BUDGET)
    eval_every, test_levels = (1, 2) if args.smoke else (args.eval_every, args.test_levels)
    threshold = args.threshold if args.threshold is not None else setting["threshold"]

    def overrides_of(method, seed):
        return race_overrides(setting, model, method, seed, steps, pool, eval_every, test_levels, budget, args.extra)

    t0 = time.perf_counter()
    if args.jobs > 1 and not args.only_recorded:
        learning.train_in_parallel(args, overrides_of, model, work)
    runs: dict[str, list[dict]] = {}
    for seed in args.seeds:  # seed-major: an interrupted suite still has every arm on the first seeds
        for method in args.methods:
            record, overrides = args.records / f"{method}_s{seed}.json", overrides_of(method, seed)
            if ((args.only_recorded or args.jobs > 1)
                    and not learning.recorded(overrides, work / f"{method}_s{seed}", seed, record)):
                print(f"{method} seed {seed}: no record, skipped", flush=True)
                continue
            r = learning.train_one(work / f"{method}_s{seed}", overrides, seed, CURVES, record=record,
                                   shared=args.shared)
            runs.setdefault(method, []).append(r)
            s = race_scores(r, threshold)
            print(f"{method} seed {seed}: pool success {s['start']:.3f} -> {s['final']:.3f}, AUC {s['auc']:.3f}, "
                  f"threshold {threshold:g} at step {s['reached_at']}", flush=True)
    if args.one:  # a child of --jobs: its record is written; the parent makes the tables
        return
    cfg = build_config(None, [*setting["env"], *budget, *args.extra])
    sha = learning.weights_sha256(model) if model.is_dir() else None
    result = {
        "benchmark": "lm_race",
        "settings": {"setting": args.setting, "title": setting["title"], "env": setting["env"], "steps": steps,
                     "B": cfg.rollout.tasks_per_step, "G": cfg.rollout.group_size, "pool": pool,
                     "eval_every": eval_every, "threshold": threshold, "test_levels": test_levels,
                     "pool_base": POOL_BASE, "pool_stride": POOL_STRIDE, "model": str(model), "sft_sha256": sha,
                     "seeds": sorted({r["seed"] for rs in runs.values() for r in rs}), "pilot": args.pilot,
                     "smoke": args.smoke, "overrides": [*setting["env"], *budget, *args.extra], "extra": args.extra},
        "summary": summary(runs, threshold),
        "runs": learning.run_index(runs, args.records),
        "minutes": (time.perf_counter() - t0) / 60,
        "note": args.note,
        "machine": learning.machine_of(args, machine_info()),
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(result, indent=2))
    out.with_suffix(".md").write_text(markdown(result))
    print(markdown(result))
    print(f"-> {out.with_suffix('.json')}, .md")


if __name__ == "__main__":
    main()
