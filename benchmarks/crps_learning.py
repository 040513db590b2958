"""Does CRPS help where GRPO's groups are all-fail or all-success? GRPO vs +ExpReplay vs +CRPS vs RewardFlow+CRPS.

    python -m benchmarks.crps_learning [--setting hard|demo|webshop] [--model SFT_DIR] [--seeds 0 1 2] [--steps 60]
                                       [--threads 1] [--smoke] [key=value ...]

Settings (``SETTINGS``): ``hard`` (Sokoban, 2 boxes in 7x7), ``demo`` (the demo's 6x6 1-box levels with
``describe_positions``) and ``webshop`` (the shopping env, the paper's main benchmark; no random-policy
mixture check there). The ``rewardflow+crps`` arm puts CRPS's replay groups under RewardFlow's state-graph
advantage instead of GRPO's (``rl.algo=rewardflow``), a combination neither paper measured; its mixture
check is the same as ``grpo+crps``'s (no policy, no advantage), so it is not repeated. All methods start
from the same pi_SFT (``--model``; without it the script builds one the way ``creditflow sft`` does, on the
same setting) and get the same budget: the same number of training steps of B tasks x G rollouts, the same
held-out evaluation seeds. Per method and seed it records the
held-out success curve and the per-step reward-extremity diagnostics (paper 002, Eq. 14: all-zero group
fraction, group reward entropy) plus buffer/controller metrics, and writes
``benchmarks/results/crps_learning.{json,md,png}`` with machine info. Before training, a no-model
check rolls out a uniformly random policy through the same engine and hooks to show what the start-state
mixture alone does to the group outcomes. ``--smoke`` runs a seconds-long
budget (tiny model, 2 steps) to check the pipeline end to end; its results go to ``*_smoke.*`` and say
nothing about the methods.

Note on budgets: a replay group's prefix is restored (snapshot or replay), not generated, so CRPS
spends fewer *policy* env-steps per group than fresh groups; the tables report ``env_steps`` per method.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np


from benchmarks import learning
from benchmarks.machine import machine_info
from creditflow.config import build_config

METHODS = {"grpo": "none", "grpo+expreplay": "expreplay", "grpo+crps": "crps", "rewardflow+crps": "crps"}
# the advantage estimator of each arm (rl.algo); the combined RewardFlow + CRPS arm is one no paper measured
ALGOS = {"rewardflow+crps": "rewardflow"}

# hard: 2 boxes in 7x7, solutions of 4..20 moves (plain GRPO's groups are mostly all-fail), with each box's
#   offset in words as the demo shows it (the tiny pi_SFT learns next to nothing from the bare 7x7 grid): the
#   same levels and observations as credit_learning.py's hard setting, so one pi_SFT serves both checks;
# demo: the demo's 6x6 1-box levels with describe_positions (the tiny pi_SFT solves ~40%; groups are still
# mostly all-fail or all-success, Eq. 14)
SETTINGS = {
    "hard": ["env.name=sokoban", "env.kwargs.size=7", "env.kwargs.num_boxes=2", "env.kwargs.max_steps=20",
             "env.kwargs.min_plan=4", "env.kwargs.describe_positions=true"],
    "demo": ["env.name=sokoban", "env.kwargs.describe_positions=true"],
    # webshop: CRPS's main benchmark (0.53 -> 0.61); R = 1 when the purchase scores 1 (the env's won)
    "webshop": ["env.name=webshop", "generation.max_new_tokens=48", "sft.max_length=2048"],
}
FULL = {
    "sft": ["sft.demos=256", "sft.epochs=2"],
    "rl": ["rollout.tasks_per_step=8", "rollout.group_size=8", "generation.max_new_tokens=16", "rl.lr=2e-4",
           "rl.kl_coef=0.01", "rl.eval_every=10", "rl.eval_episodes=64", "rl.save_every=10", "tensorboard=false"],
}
SMOKE = {
    "sft": ["sft.demos=8", "sft.epochs=1", "policy.tiny_hidden_size=32", "policy.tiny_layers=1",
            "policy.tiny_vocab_size=400"],
    "rl": ["rollout.tasks_per_step=2", "rollout.group_size=2", "generation.max_new_tokens=6", "rl.lr=1e-3",
           "rl.eval_every=1", "rl.eval_episodes=2", "rl.save_every=0", "rollout.max_steps=4", "tensorboard=false"],
}
CURVES = ("eval/success_rate", "groups/all_zero_frac", "groups/all_one_frac", "groups/entropy",
          "crps/buffer_size", "crps/mean_k", "crps/replay_share", "crps/replay_success_ema", "train/success_rate")


def mixture_check(env: list[str], curriculum: str, iters: int, B: int = 8, G: int = 8, seed: int = 0,
                  p_replay: float = 0.2) -> dict:
    """No training: a uniformly random policy on the chosen setting, B x G groups per step for ``iters``
    steps, through the real engine and hooks. Isolates what the start-state mixture alone does to the
    group outcomes (Eq. 14); reports means over the second half of the steps."""
    import random

    from creditflow.config import CurriculumConfig
    from creditflow.curriculum.hooks import CurriculumHooks
    from creditflow.policy.backends.base import Generation, SamplingParams
    from creditflow.policy.prompts import PromptBuilder
    from creditflow.rollout.engine import RolloutEngine, TaskSpec
    from creditflow.envs.configured import env_factory

    class RandomPolicy:
        def __init__(self):
            self.rng = random.Random(seed)

        def generate(self, prompts, params):
            return [Generation(f"<action>{self.rng.choice(['up', 'down', 'left', 'right'])}</action>", [1], [0.0])
                    for _ in prompts]

    cfg = build_config(None, env)
    factory = env_factory(cfg.env, cfg.rollout.max_steps)
    engine = RolloutEngine(RandomPolicy(), lambda messages: [0], factory, PromptBuilder("sokoban"), SamplingParams())
    hooks = CurriculumHooks(CurriculumConfig(name=curriculum, p_replay=p_replay), factory, "sokoban", seed)
    task_rng = np.random.default_rng(seed)
    rows = []
    for step in range(1, iters + 1):
        fresh = [TaskSpec(f"sokoban/{s}", int(s), group_id=f"step{step}/sokoban/{s}")
                 for s in task_rng.integers(0, 1_000_000, B)]
        specs = hooks.make_specs(step, fresh)
        rows.append(hooks.after_rollout(step, specs, engine.rollout_groups(specs, G)).metrics)
    late = rows[iters // 2:]
    keys = ("groups/all_zero_frac", "groups/all_one_frac", "groups/entropy", "crps/buffer_size", "crps/mean_k",
            "crps/replay_share", "crps/replay_acc")
    return {k: float(np.mean([r[k] for r in late if k in r])) if any(k in r for r in late) else None for k in keys}


def build_sft(env: list[str], out: Path, budget: dict, quiet: bool) -> Path:
    """pi_SFT on the chosen setting, exactly what ``creditflow sft ...`` does (``creditflow.api.sft``)."""
    from creditflow import api

    overrides = [f"out_dir={out}", *env, *budget["sft"]]
    if quiet:
        import contextlib
        import io

        with contextlib.redirect_stderr(io.StringIO()):
            return api.sft(overrides=overrides).model
    return api.sft(overrides=overrides).model


def run_overrides(env: list[str], model: Path, method: str, steps: int, budget: dict, extra: list[str],
                  reward_source: str | None = None) -> list[str]:
    """One arm's run. ``reward_source`` goes to the GRPO arms only: RewardFlow's reward is the success signal
    propagated over its state graph by construction."""
    algo = ALGOS.get(method, "grpo")
    source = [f"rl.credit.reward_source={reward_source}"] if reward_source and algo == "grpo" else []
    # GRPO's population std (ddof=0, its default until issue 74): the records were run with it
    source += ["rl.credit.ddof=0"] if algo == "grpo" else []
    return [f"policy.model={model}", f"rl.steps={steps}", f"curriculum.name={METHODS[method]}",
            f"rl.algo={algo}", *source, *env, *budget["rl"], *extra]


PANELS = [("eval/success_rate", "held-out success"), ("groups/all_zero_frac", "all-zero group fraction"),
          ("groups/entropy", "group reward entropy H_batch (bits)")]


def plot(result: dict, path: Path) -> None:
    n = len(result["settings"]["seeds"])
    title = (f"Sokoban {result['settings']['env']}: mean ± std over {n} seeds"
             + (" (SMOKE: meaningless numbers)" if result["settings"]["smoke"] else ""))
    learning.plot(result["summary"], PANELS, title, path)


def markdown(result: dict) -> str:
    s, m = result["settings"], result["machine"]
    lines = [
        "# CRPS learning check: GRPO vs GRPO+ExpReplay vs GRPO+CRPS vs RewardFlow+CRPS", "",
        ("**SMOKE RUN: tiny budget, the numbers say nothing about the methods.**\n" if s["smoke"] else ""),
        f"Env: sokoban, {s.get('setting', 'hard')} setting ({s['env']}); {s['steps']} steps of B={s['B']} x G={s['G']}; seeds {s['seeds']}; "
        f"start policy: {s['model']}; GRPO arms' reward: {s.get('reward_source') or 'the shaped return (default)'}; "
        "CRPS/ExpReplay at paper defaults (p_replay 0.2, band [0.2, 0.8], "
        "lambda 0.9, Delta 2)" + (f"; extra overrides: {' '.join(s['extra'])}." if s["extra"] else "."),
        f"Machine: {m['cpu']} ({m['cores']} cores), torch {m.get('torch')}, {m['date']}; "
        f"wall time of this invocation {result['minutes']:.1f} min (finished runs in the work directory are "
        "reused); RL steps took " + ", ".join(f"{m} {r['rl_minutes']['mean']:.1f}" for m, r in result["summary"].items())
        + " min per run (mean).", "",
        "| method | held-out success (final) | start | mean all-zero frac | mean entropy (bits) | env steps |",
        "|---|---|---|---|---|---|",
    ]
    for method, r in result["summary"].items():
        f, i = r["final_eval_success"], r["initial_eval_success"]
        lines.append(f"| {method} | {learning.fmt(f)} | {i['mean']:.3f} | {r['mean_all_zero_frac']['mean']:.3f} | {r['mean_entropy']['mean']:.3f}"
                     f" | {r['env_steps']['mean']:.0f} |")
    mc = result["mixture_check"]
    lines += ["", f"## Start-state mixture alone (no training, uniform random policy, {mc['iters']} steps of "
              f"B={mc['B']} x G={mc['G']}, p_replay {mc['p_replay']}; means over the second half)", "",
              "| method | all-zero frac | all-one frac | entropy (bits) | buffer | mean k | replay success |",
              "|---|---|---|---|---|---|---|"]
    for method, r in mc["means_over_second_half"].items():
        acc = "-" if r["crps/replay_acc"] is None else f"{r['crps/replay_acc']:.3f}"
        lines.append(f"| {method} | {r['groups/all_zero_frac']:.3f} | {r['groups/all_one_frac']:.3f} | "
                     f"{r['groups/entropy']:.3f} | {r['crps/buffer_size']:.1f} | {r['crps/mean_k']:.2f} | {acc} |")
    lines += ["", "Curves (mean over seeds) are in the JSON and the PNG next to this file.", ""]
    if result.get("note"):
        lines += [result["note"], ""]
    return "\n".join(lines)


def main() -> None:
    args, out, work = learning.parse_args(
        __doc__, "crps_learning", METHODS, default_steps=60,
        add=lambda ap: (ap.add_argument("--setting", default="hard", choices=list(SETTINGS),
                                        help="Sokoban levels (see SETTINGS)"),
                        ap.add_argument("--reward-source", default=None, choices=["success", "return", "score"],
                                        help="the GRPO arms' rl.credit.reward_source (default: GRPO's, the shaped "
                                             "return; the CRPS paper's reward is success)")))
    env = SETTINGS[args.setting]
    budget = SMOKE if args.smoke else FULL
    steps = 2 if args.smoke else args.steps
    t0 = time.perf_counter()
    iters = 6 if args.smoke else 40
    mixture = {}
    previous = out.with_suffix(".json")
    if args.only_recorded and previous.exists():  # tables only: keep the mixture check measured before
        mixture = json.loads(previous.read_text()).get("mixture_check", {}).get("means_over_second_half", {})
    for method, curriculum in METHODS.items():
        # the random policy types Sokoban moves only, and the mixture does not depend on the estimator
        if args.setting == "webshop" or method in ALGOS or args.only_recorded or args.one:
            continue
        mixture[method] = mixture_check(env, curriculum, iters)
        print(f"random policy, {method}: " + ", ".join(f"{k} {v:.3f}" for k, v in mixture[method].items()
                                                       if v is not None), flush=True)
    model = (Path(args.model) if args.model or args.only_recorded
             else build_sft(env, work / "sft", budget, quiet=args.smoke))
    print(f"pi_SFT: {model}", flush=True)
    runs: dict[str, list[dict]] = {}

    def overrides_of(method, seed=None):  # the same for every seed
        return run_overrides(env, model, method, steps, budget, args.extra, args.reward_source)

    if args.jobs > 1 and not args.only_recorded:
        learning.train_in_parallel(args, overrides_of, model, work)
    for seed in args.seeds:  # seed-major: an interrupted run still has every method on the first seeds
        for method in args.methods:
            record = args.records / f"{method}_s{seed}.json"
            overrides = overrides_of(method)
            if ((args.only_recorded or args.jobs > 1)
                    and not learning.recorded(overrides, work / f"{method}_s{seed}", seed, record)):
                print(f"{method} seed {seed}: no record, skipped", flush=True)
                continue
            r = learning.train_one(work / f"{method}_s{seed}", overrides, seed, CURVES, record=record,
                                   shared=args.shared)
            runs.setdefault(method, []).append(r)
            print(f"{method} seed {seed}: eval success {r['initial_eval_success']:.3f} -> "
                  f"{r['final_eval_success']:.3f}, all-zero {r['mean_all_zero_frac']:.3f}, "
                  f"entropy {r['mean_entropy']:.3f} ({r['minutes']:.1f} min)", flush=True)
    if args.one:  # a child of --jobs: its record is written; the parent makes the tables
        return
    rl_cfg = build_config(None, [*env, *budget["rl"], *args.extra])
    result = {
        "benchmark": "crps_learning",
        "settings": {"setting": args.setting, "env": " ".join(a.split("=", 1)[0].split(".")[-1] + "=" + a.split("=", 1)[1] for a in env[1:]),
                     "steps": steps, "B": rl_cfg.rollout.tasks_per_step, "G": rl_cfg.rollout.group_size,
                     "seeds": args.seeds, "model": str(model), "smoke": args.smoke,
                     "reward_source": args.reward_source,
                     "overrides": [*env, *budget["rl"], *args.extra], "extra": args.extra},
        "mixture_check": {"iters": iters, "B": 8, "G": 8, "p_replay": 0.2, "policy": "uniform random, no training",
                          "means_over_second_half": mixture},
        "summary": {m: learning.summarize(rs, CURVES) for m, rs in runs.items()},
        "runs": learning.run_index(runs, args.records),
        "minutes": (time.perf_counter() - t0) / 60,
        "machine": learning.machine_of(args, machine_info()),
        "note": args.note,
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(result, indent=2))
    out.with_suffix(".md").write_text(markdown(result))
    plot(result, out.with_suffix(".png"))
    print(markdown(result))
    print(f"-> {out.with_suffix('.json')}, .md, .png")


if __name__ == "__main__":
    main()
