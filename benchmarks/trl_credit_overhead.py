"""What creditflow's credit step adds to a TRL GRPOTrainer training step (tiny policy, CPU), in one run.

    python -m benchmarks.trl_credit_overhead [--cycles 6] [--rollouts 32] [--work runs/trl_credit_overhead]

One ``CreditGRPOTrainer`` (creditflow.integrations.trl) trains the default tiny policy (Qwen2 architecture,
hidden 128, 4 layers, tokenizer trained on Sokoban expert text; untrained) on the multi-turn walk of
benchmarks/trl_walk.py through TRL's ``rollout_func``: ``--rollouts`` rollouts per step in groups of 8, up to 3
turns of 8 new tokens each, env feedback tokens masked, TRL's default loss (``loss_type="dapo"``), one
optimizer step per generation batch. Each step runs in one of five modes, interleaved so that the load of other
jobs on the shared cores falls on all of them alike: ``off`` (TRL's own GRPO advantage, one per sequence:
``GRPOTrainer._generate_and_score_completions`` unchanged) and creditflow's ``rewardflow``, ``gigpo``, ``grpo``,
``rloo``. A cycle is one step of each mode; the order rotates from cycle to cycle. The first cycle warms up and
is left out.

Two measures of the overhead, both from the same run:

- **credit share**: the credit step's own wall time (``time/credit_ms``: gathering the rollouts, TRL's rewards,
  the estimator on the batch, placing the advantages on the tokens, the metrics) over the whole step's wall
  time (generation, reward, credit, forward, backward, optimizer), per step, median over steps;
- **step vs off**: the median step time of a mode over the median ``off`` step, minus 1 (this also carries the
  noise of the generated lengths and of the machine; the credit share is the precise measure).

Writes ``benchmarks/results/trl_credit_overhead.{json,md}`` with machine info (benchmarks/machine.py) and the
load average at start and end. Goal (issue 61): the credit step under 2% of the step.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path

from benchmarks.machine import cpu_label, machine_info

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

MODES = ("off", "rewardflow", "gigpo", "grpo", "rloo")
GROUP = 8


def tiny_policy(out: Path) -> Path:
    """The default tiny policy (creditflow's TINY_DEFAULTS), its tokenizer trained on Sokoban expert text."""
    if (out / "config.json").exists():
        return out
    from creditflow.config import RunConfig
    from creditflow.policy.tiny import build_tiny_policy
    from creditflow.envs.configured import env_factory
    from creditflow.policy.factory import prompt_builder
    from creditflow.rollout.expert import expert_corpus

    cfg = RunConfig()
    factory = env_factory(cfg.env, cfg.rollout.max_steps)
    env = factory()
    corpus = expert_corpus(factory, prompt_builder(cfg.policy, cfg.rollout, env), list(range(40)))
    build_tiny_policy(out, corpus, vocab_size=1024, seed=0, isolate_chars=env.tokenizer_isolate_chars)
    return out


def run(cycles: int, rollouts: int, work: Path) -> dict:
    import torch
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from benchmarks.trl_walk import PROMPT_WORDS, success_reward, walk_rollout_func
    from creditflow.integrations.trl import CreditGRPOTrainer, turn_spans

    class Interleaved(CreditGRPOTrainer):
        """A CreditGRPOTrainer that runs each step in the mode the schedule gives it."""

        mode = "off"
        credit_ms = 0.0
        turns = 0

        def _generate_and_score_completions(self, inputs):
            if self.mode == "off":
                out = GRPOTrainer._generate_and_score_completions(self, inputs)
                self.credit_ms = 0.0
            else:
                out = super()._generate_and_score_completions(inputs)
                self.credit_ms = self._metrics["train"]["time/credit_ms"][-1]
            _, completion_ids, masks, _ = self._cf_gen
            self.turns = sum(len(turn_spans(m, len(c))) for m, c in zip(masks, completion_ids))
            return out

    schedule = [MODES[(c + k) % len(MODES)] for c in range(cycles) for k in range(len(MODES))]
    records: list[dict] = []

    class Clock(TrainerCallback):
        def on_step_begin(self, args, state, control, **kwargs):
            self.index = state.global_step  # steps done before this one
            trainer.mode = schedule[self.index]
            if trainer.mode != "off":
                trainer.set_credit(trainer.mode)
            self.t0 = time.perf_counter()

        def on_step_end(self, args, state, control, **kwargs):
            records.append({"step": self.index, "mode": trainer.mode,
                            "step_s": time.perf_counter() - self.t0, "credit_ms": trainer.credit_ms,
                            "steps_in_batch": trainer.turns})

    model_dir = tiny_policy(work / "tiny_policy")
    torch.manual_seed(0)
    prompts = [[{"role": "user", "content": f"walk {w}"}] for w in PROMPT_WORDS]
    args = GRPOConfig(output_dir=str(work / "out"), per_device_train_batch_size=rollouts, num_generations=GROUP,
                      max_completion_length=128, max_steps=len(schedule), logging_steps=1, report_to="none",
                      use_cpu=True, save_strategy="no", learning_rate=1e-4, disable_tqdm=True,
                      activation_checkpointing=False, bf16=False, seed=0)
    trainer = Interleaved(model=AutoModelForCausalLM.from_pretrained(str(model_dir)),
                          processing_class=AutoTokenizer.from_pretrained(str(model_dir)),
                          reward_funcs=success_reward, args=args, train_dataset=Dataset.from_dict({"prompt": prompts}),
                          rollout_func=walk_rollout_func(max_turns=3, new_tokens=8), callbacks=[Clock()])
    trainer.train()
    return {"records": records, "loss_type": trainer.loss_type}


def summarise(records: list[dict], warmup: int) -> dict:
    kept = [r for r in records if r["step"] >= warmup]
    by_mode = {m: [r for r in kept if r["mode"] == m] for m in MODES}
    off = statistics.median(r["step_s"] for r in by_mode["off"])
    out = {}
    for mode, rows in by_mode.items():
        steps = [r["step_s"] for r in rows]
        out[mode] = {
            "steps": len(rows),
            "step_s_median": statistics.median(steps),
            "step_s_min": min(steps),
            "step_s_max": max(steps),
            "credit_ms_median": statistics.median(r["credit_ms"] for r in rows),
            "credit_ms_max": max(r["credit_ms"] for r in rows),
            "credit_share_median": statistics.median(r["credit_ms"] / 1000.0 / r["step_s"] for r in rows),
            "credit_share_max": max(r["credit_ms"] / 1000.0 / r["step_s"] for r in rows),
            "step_vs_off": statistics.median(steps) / off - 1.0,
            "batch_steps_median": statistics.median(r["steps_in_batch"] for r in rows),
        }
    return out


def write_markdown(result: dict, path: Path) -> None:
    m = result["machine"]
    s = result["summary"]
    lines = [
        "# What the credit step adds to a TRL GRPOTrainer step (`benchmarks/trl_credit_overhead.py`)",
        "",
        f"Machine: {cpu_label(m)}, {m.get('cores')} cores, torch {m.get('torch')}, TRL {result['trl']}, "
        f"transformers {result['transformers']}, matmul {m.get('matmul_gflops')} GFLOP/s; {m.get('date')}. "
        f"Load average at start {result['load_start']}, at end {result['load_end']}.",
        "",
        result["note"],
        "",
        f"Setting: {result['rollouts']} rollouts per step (groups of {GROUP}), the walk of benchmarks/trl_walk.py "
        f"through `rollout_func` (up to 3 turns x 8 new tokens), TRL's `loss_type={result['loss_type']!r}`, "
        f"{result['cycles']} cycles of the five modes, the first left out as warm-up.",
        "",
        "| mode | steps | median step s (min-max) | step vs off | credit ms, median (max) | credit share of the step, median (max) | steps (turns) per batch |",
        "|---|---:|---|---:|---|---|---:|",
    ]
    for mode in MODES:
        r = s[mode]
        credit = "-" if mode == "off" else f"{r['credit_ms_median']:.2f} ({r['credit_ms_max']:.2f})"
        share = "-" if mode == "off" else f"**{100 * r['credit_share_median']:.2f}%** ({100 * r['credit_share_max']:.2f}%)"
        vs = "-" if mode == "off" else f"{100 * r['step_vs_off']:+.1f}%"
        lines.append(f"| {mode} | {r['steps']} | {r['step_s_median']:.2f} ({r['step_s_min']:.2f}-{r['step_s_max']:.2f}) "
                     f"| {vs} | {credit} | {share} | {r['batch_steps_median']:.0f} |")
    worst = max(s[mode]["credit_share_median"] for mode in MODES if mode != "off")
    off = s["off"]
    spread = (off["step_s_max"] - off["step_s_min"]) / off["step_s_median"]
    lines += ["", f"Largest median credit share: **{100 * worst:.2f}%** of the step (goal: under 2%).", "",
              f"The `off` steps alone spread over {100 * spread:.0f}% of their median (min to max): the differences "
              "in the \"step vs off\" column are of that noise (generated lengths, other jobs), not of the credit "
              "step, whose own time is the column after it.", ""]
    path.write_text("\n".join(lines) + "\n")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cycles", type=int, default=6, help="cycles of the five modes (the first warms up)")
    ap.add_argument("--rollouts", type=int, default=32, help="rollouts per step (a multiple of 8)")
    ap.add_argument("--work", default="runs/trl_credit_overhead", help="tiny policy cache and trainer output")
    ap.add_argument("--out", default=str(Path(__file__).parent / "results" / "trl_credit_overhead"))
    ap.add_argument("--note", default="", help="conditions of the run, written into the result")
    ap.add_argument("--markdown", action="store_true", help="only rewrite OUT.md from OUT.json")
    a = ap.parse_args()
    out = Path(a.out)
    if a.markdown:
        write_markdown(json.loads(out.with_suffix(".json").read_text()), out.with_suffix(".md"))
        return
    import torch
    import transformers
    import trl

    torch.set_num_threads(1)
    load_start = [round(x, 2) for x in os.getloadavg()]
    machine = machine_info()
    ran = run(a.cycles, a.rollouts, Path(a.work))
    result = {
        "machine": machine, "trl": trl.__version__, "transformers": transformers.__version__,
        "load_start": load_start, "load_end": [round(x, 2) for x in os.getloadavg()],
        "cycles": a.cycles, "rollouts": a.rollouts, "group": GROUP, "loss_type": ran["loss_type"],
        "torch_threads": 1, "note": a.note, "summary": summarise(ran["records"], warmup=len(MODES)),
        "records": ran["records"],
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(result, indent=2) + "\n")
    write_markdown(result, out.with_suffix(".md"))
    print(out.with_suffix(".md").read_text())


if __name__ == "__main__":
    main()
