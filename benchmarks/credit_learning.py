"""Learning check for state-graph credit: GRPO vs GiGPO vs RewardFlow with the tiny policy.

    python -m benchmarks.credit_learning [--setting demo|hard|household|webshop] [--model SFT_DIR] [--seeds 0 1 2 3 4]
                                         [--steps 100] [--threads 1] [--smoke] [key=value ...]
    python -m benchmarks.credit_learning --setting hard --build-sft runs/hard_sft   # only pi_SFT -> DIR/sft_model
    python -m benchmarks.credit_learning --setting hard --build-sft runs/hard_sft -- policy.dtype=float32  # on a GPU

Settings (``SETTINGS``): ``demo`` (Sokoban 6x6, 1 box, the demo's levels), ``hard`` (2 boxes in 7x7: long
horizons with many shared states, where the paper says graph credit matters), ``household`` (TextWorld
pick-and-place, medium: 2 rooms, 6 objects, 25 steps) and ``webshop``; each writes
its own ``credit_learning[_<setting>].*`` (``--out`` and ``--work``, when given, are used as they are) and
keeps per-run records in ``*_runs/`` (resumable).

All methods start from the same pi_SFT (``--model``; without it the script builds one exactly as ``creditflow
demo`` does; ``--build-sft DIR`` builds only that pi_SFT, into ``DIR/sft_model``, to share between invocations
and machines: the committed records name it by the sha256 of its weights) and get the same budget: the same
steps of B tasks x G rollouts, the same training-task sequence per seed, the same PPO-clip loss and optimizer,
the same held-out levels. Only ``rl.algo`` differs, with every estimator at its paper defaults (RewardFlow:
gamma 0.9, alpha 1, mean_std normalisation, ``state_key`` graph; GiGPO: omega 1, gamma 0.95). Per method and
seed it records the held-out success curve (greedy) and training diagnostics, and writes
``benchmarks/results/credit_learning.{json,md,png}`` with machine info. ``--smoke`` runs a seconds-long budget
to check the pipeline; its results go to ``*_smoke.*`` and say nothing about the methods.
"""

from __future__ import annotations

import json
import time
from pathlib import Path


from benchmarks import learning
from benchmarks.machine import machine_info
from creditflow.config import build_config
from creditflow.recipes.demo import DEMO_DEFAULTS, DEMO_ENV_SETTINGS

METHODS = ("grpo", "gigpo", "rewardflow", "rewardflow_official", "gigpo_official", "graphgpo", "graphgpo_reproduction",
           "g2po", "gagpo")
# arm -> its overrides: the estimator, at its paper defaults unless the arm says otherwise. The *_official arms
# run the estimator as its authors' trainer does (``rl.credit.preset=official``): RewardFlow's node values start
# from the env reward of the step that entered them (Sokoban's shaped reward), GiGPO normalises as verl-agent's
# mean_norm; both take the summed env reward as the return (docs/methods.md)
# grpo: the records were run with GRPO's population std (ddof=0, its default until issue 74), kept so they reproduce
# gigpo_official: recorded before verl-agent's invalid-action penalty joined the preset (issue 84), which it pins off
ARMS = {"grpo": ["rl.algo=grpo", "rl.credit.ddof=0"], "gigpo": ["rl.algo=gigpo"], "rewardflow": ["rl.algo=rewardflow"],
        "rewardflow_official": ["rl.algo=rewardflow", "rl.credit.preset=official"],
        "gigpo_official": ["rl.algo=gigpo", "rl.credit.preset=official", "rl.credit.invalid_penalty=0"],
        # the two graph estimators a reviewer compares RewardFlow with (issue 72): GraphGPO as its authors' recipe
        # computes it (preset=official, the default since issue 84; omega per setting below) and as creditflow read
        # it before the recipe was reachable (the issue-72 records)
        "graphgpo": ["rl.algo=graphgpo"], "graphgpo_reproduction": ["rl.algo=graphgpo", "rl.credit.preset=reproduction"],
        "g2po": ["rl.algo=g2po"],
        # GAGPO (issue 84) at its defaults (gamma = lam = 0.95; built from its abstract, docs/methods.md)
        "gagpo": ["rl.algo=gagpo"]}
# GraphGPO's omega (the recipe's algorithm.gamma) per setting, from its run scripts: Sokoban 0.8, ALFWorld 0.1
# (household is creditflow's ALFWorld-like env), WebShop 0.2
GRAPHGPO_OMEGA = {"demo": 0.8, "hard": 0.8, "household": 0.1, "webshop": 0.2}
DEFAULT_METHODS = ("grpo", "gigpo", "rewardflow")
SETTINGS = {  # where RewardFlow's graph has shared states to work with
    "demo": ["env.name=sokoban"] + [f"{k}={str(v).lower()}" for k, v in DEMO_ENV_SETTINGS["sokoban"].items()],
    # long horizons, many shared states (the paper's Sokoban setting): 2 boxes in 7x7
    "hard": ["env.name=sokoban", "env.kwargs.size=7", "env.kwargs.num_boxes=2", "env.kwargs.max_steps=20",
             "env.kwargs.min_plan=4", "env.kwargs.describe_positions=true"],
    # ALFWorld-like pick-and-place in TextWorld (the paper's ALFWorld setting): 2 rooms, 6 objects, 25 steps
    "household": ["env.name=household", "env.kwargs.difficulty=medium", "env.kwargs.num_games=400"],
    "webshop": ["env.name=webshop", "generation.max_new_tokens=48", "sft.max_length=2048"],
}

SFT = [f"sft.{k}={v}" for k, v in DEMO_DEFAULTS["sft"].items()] + ["generation.max_new_tokens=16"]
FULL = ["rollout.tasks_per_step=8", "rollout.group_size=4", "generation.max_new_tokens=16",
        "rl.lr=2e-4", "rl.kl_coef=0", "rl.minibatches=2",  # as recorded (the demo itself now takes 1)
        "rl.loss_agg=traj-mean", "rl.eval_every=0", "rl.eval_episodes=128",
        "rl.save_every=10", "tensorboard=false"]  # checkpoints: a stopped run continues (learning.train_one)
# pi_SFT per setting on top of SFT: with the demo's 384 demos x 2 epochs the tiny policy solves 0 of 128 held-out
# household games (it writes object names from its training games); 800 demos of 400 games x 4 epochs: 0.055
SFT_EXTRA = {"household": ["sft.demos=800", "sft.epochs=4"]}
SMOKE_SFT = ["sft.demos=8", "sft.epochs=1", "policy.tiny_hidden_size=32", "policy.tiny_layers=1",
             "policy.tiny_vocab_size=400"]
SMOKE = ["rollout.tasks_per_step=2", "rollout.group_size=2", "generation.max_new_tokens=6", "rl.lr=1e-3",
         "rl.eval_every=1", "rl.eval_episodes=2", "rl.save_every=0", "rollout.max_steps=4", "tensorboard=false"]
CURVES = ("eval/success_rate", "train/success_rate", "groups/all_zero_frac", "groups/entropy",
          "credit/reach_success_frac", "credit/unique_state_ratio", "train/adv_std")
PANELS = [("eval/success_rate", "held-out success (greedy)"), ("train/success_rate", "training success (T=1)")]


def build_sft(out: Path, smoke: bool, env: list[str], extra: list[str] = ()) -> Path:
    """pi_SFT as the demo builds it (``creditflow.api.sft``, what ``creditflow sft`` runs), plus a setting's
    ``SFT_EXTRA``."""
    import contextlib
    import io

    from creditflow import api

    overrides = [f"out_dir={out}", *env, *(SMOKE_SFT if smoke else [*SFT, *extra])]
    with contextlib.redirect_stderr(io.StringIO()) if smoke else contextlib.nullcontext():
        return api.sft(overrides=overrides).model


def markdown(result: dict) -> str:
    s, m = result["settings"], result["machine"]
    lines = [
        "# Learning check: GRPO vs GiGPO vs RewardFlow", "",
        ("**SMOKE RUN: tiny budget, the numbers say nothing about the methods.**\n" if s["smoke"] else ""),
        f"Setting `{s['setting']}` ({' '.join(s['env'])}); {s['steps']} steps of B={s['B']} × G={s['G']}, "
        f"{s['minibatches']} mini-batch(es) a step; "
        f"seeds {s['seeds']}; shared π_SFT: {s['model']}. Same loss (PPO-clip, {s['loss_agg']}), lr {s['lr']}, "
        f"KL coef {s['kl_coef']}, held-out set of {s['eval_episodes']} levels (greedy)."
        + (f" Extra overrides: {' '.join(s['extra'])}." if s["extra"] else ""),
        f"Machine: {m['cpu']} ({m['cores']} cores), torch {m.get('torch')}, {m['date']}; "
        f"wall time of this invocation {result['minutes']:.1f} min (finished runs in the work directory are "
        "reused); RL steps took " + ", ".join(f"{m} {r['rl_minutes']['mean']:.1f}" for m, r in result["summary"].items())
        + " min per run (mean).", "",
        "| method | held-out success after RL, mean [95% CI] (per seed) | π_SFT | gain | mean train success | env steps |",
        "|---|---|---|---|---|---|",
    ]
    for method, r in result["summary"].items():
        lines.append(f"| {method} | {learning.fmt(r['final_eval_success'])} | "
                     f"{r['initial_eval_success']['mean']:.3f} | {learning.fmt(r['gain'])} | "
                     f"{r['mean_train_success']['mean']:.3f} | {r['env_steps']['mean']:.0f} |")
    lines += ["", "Mean over seeds with its 95% stratified-bootstrap interval (per-seed values in brackets; "
              "IQM and its interval are in the JSON). Curves (mean over seeds, against env steps and steps) are in "
              "the JSON and the PNG next to this file.", ""]
    if result.get("note"):
        lines += [result["note"], ""]
    return "\n".join(lines)


def main() -> None:
    args, out, work = learning.parse_args(
        __doc__, "credit_learning", METHODS, default_steps=12, default_methods=DEFAULT_METHODS,
        add=lambda ap: (ap.add_argument("--setting", default="demo", choices=list(SETTINGS), help="see SETTINGS"),
                        ap.add_argument("--build-sft", default=None, metavar="DIR",
                                        help="build only the setting's pi_SFT, into DIR/sft_model, and stop")))
    ENV = SETTINGS[args.setting]
    if args.build_sft:
        model = build_sft(Path(args.build_sft), args.smoke, ENV, [*SFT_EXTRA.get(args.setting, []), *args.extra])
        print(f"pi_SFT: {model} (sha256 {learning.weights_sha256(model)})", flush=True)
        return
    if args.setting != "demo":  # each setting keeps its own results and runs; a given --out / --work is kept as is
        if args.out is None:
            out = out.with_name(out.name.replace("credit_learning", f"credit_learning_{args.setting}"))
            args.records = out.parent / f"{out.name}_runs"
        if args.work == "runs/credit_learning":
            work = work.with_name(work.name + f"_{args.setting}")
    budget = SMOKE if args.smoke else FULL
    steps = 2 if args.smoke else args.steps
    t0 = time.perf_counter()
    model = Path(args.model) if args.model or args.only_recorded else build_sft(work / "sft", args.smoke, ENV,
                                                                               SFT_EXTRA.get(args.setting, []))
    print(f"pi_SFT: {model}", flush=True)
    runs: dict[str, list[dict]] = {}

    def overrides_of(method, seed=None):  # the same for every seed
        omega = [f"rl.credit.omega={GRAPHGPO_OMEGA[args.setting]}"] if method == "graphgpo" else []
        return [f"policy.model={model}", f"rl.steps={steps}", *ARMS[method], *omega, *ENV, *budget, *args.extra]

    if args.jobs > 1 and not args.only_recorded:
        learning.train_in_parallel(args, overrides_of, model, work)
    for seed in args.seeds:  # seed-major: an interrupted run still has every method on the first seeds
        for method in args.methods:
            overrides = overrides_of(method)
            record = args.records / f"{method}_s{seed}.json"
            if ((args.only_recorded or args.jobs > 1)
                    and not learning.recorded(overrides, work / f"{method}_s{seed}", seed, record)):
                print(f"{method} seed {seed}: no record, skipped", flush=True)
                continue
            r = learning.train_one(work / f"{method}_s{seed}", overrides, seed, CURVES, record=record,
                                   shared=args.shared)
            runs.setdefault(method, []).append(r)
            print(f"{method} seed {seed}: held-out success {r['initial_eval_success']:.3f} -> "
                  f"{r['final_eval_success']:.3f}, mean train success {r['mean_train_success']:.3f} "
                  f"({r['minutes']:.1f} min)", flush=True)
    if args.one:  # a child of --jobs: its record is written; the parent makes the tables
        return
    cfg = build_config(None, [*ENV, *budget, *args.extra])
    result = {
        "benchmark": "credit_learning",
        "settings": {"setting": args.setting, "env": ENV, "steps": steps, "B": cfg.rollout.tasks_per_step,
                     "G": cfg.rollout.group_size, "minibatches": cfg.rl.minibatches, "lr": cfg.rl.lr, "kl_coef": cfg.rl.kl_coef, "loss_agg": cfg.rl.loss_agg,
                     "eval_episodes": cfg.rl.eval_episodes, "seeds": sorted({r["seed"] for rs in runs.values() for r in rs}), "model": str(model),
                     "smoke": args.smoke, "overrides": [*ENV, *budget, *args.extra], "extra": args.extra},
        "summary": {m: learning.summarize(rs, CURVES) for m, rs in runs.items()},
        "runs": learning.run_index(runs, args.records),
        "minutes": (time.perf_counter() - t0) / 60,
        "note": args.note,
        "machine": learning.machine_of(args, machine_info()),
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(result, indent=2))
    out.with_suffix(".md").write_text(markdown(result))
    n = len(result["settings"]["seeds"])
    learning.plot(result["summary"], PANELS,
                  f"{args.setting} setting: mean ± std over {n} seed{'s' if n > 1 else ''}"
                  + (" (SMOKE: meaningless numbers)" if args.smoke else ""), out.with_suffix(".png"))
    print(markdown(result))
    print(f"-> {out.with_suffix('.json')}, .md, .png")


if __name__ == "__main__":
    main()
