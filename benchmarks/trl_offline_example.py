"""docs/trl.md "Offline, end to end" as written, at its full budget: does its GRPO run learn? (issue 90)

    python -m benchmarks.trl_offline_example [--work runs/trl_offline_example] [--threads 1]

Takes the section's ``walk_env.py``, its ``creditflow sft --tools`` command and its ``train_walk.py`` from the page
(as tests/integrations/test_trl_docs.py does, there with the budgets cut to one step), runs them in ``--work`` and
records TRL's per-step log: the mean reward of each step's batch, the share of groups whose rewards are all
equal (``frac_reward_zero_std``: no signal for GRPO's normalisation), and the means over blocks of 25 steps, with
the wall times, the machine and the load average. Writes ``benchmarks/results/trl_offline_example.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import statistics
import subprocess
import sys
import time
from pathlib import Path

from benchmarks.cache import write_json
from benchmarks.machine import machine_info

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "benchmarks" / "results" / "trl_offline_example.json"
SECTION = "## Offline, end to end"
BLOCK = 25


def section_blocks() -> list[tuple[str, str]]:
    text = (ROOT / "docs" / "trl.md").read_text(encoding="utf-8")
    start = text.index(SECTION)
    end = text.find("\n## ", start + len(SECTION))
    return re.findall(r"^```(\w+)\n(.*?)^```$", text[start:end if end > 0 else None], re.S | re.M)


def run(args: list[str], cwd: Path, threads: int) -> tuple[str, float]:
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{cwd}", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
           "OMP_NUM_THREADS": str(threads), "TOKENIZERS_PARALLELISM": "false", "TRL_EXPERIMENTAL_SILENCE": "1"}
    t0 = time.perf_counter()
    proc = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"{shlex.join(args[:4])} failed:\n{proc.stderr[-3000:]}")
    return proc.stdout, round(time.perf_counter() - t0, 1)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--work", default="runs/trl_offline_example")
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    work = Path(args.work).resolve()
    if work.exists():
        raise SystemExit(f"{work} exists: give another --work or remove it")
    work.mkdir(parents=True)
    (_, env_code), (_, command), (_, train_code) = section_blocks()
    (work / "walk_env.py").write_text(env_code)
    (work / "train_walk.py").write_text(train_code + "\nimport json\nprint('LOG', json.dumps(trainer.state.log_history))\n")
    load = [round(x, 2) for x in os.getloadavg()]
    _, sft_seconds = run([sys.executable, "-m", "creditflow", *shlex.split(command.strip())[1:]], work, args.threads)
    out, grpo_seconds = run([sys.executable, "train_walk.py"], work, args.threads)
    log = json.loads(out.split("LOG ", 1)[1].splitlines()[0])
    rows = [r for r in log if "reward" in r]
    rewards = [r["reward"] for r in rows]
    blocks = [{"steps": [i + 1, min(i + BLOCK, len(rows))], "reward": round(statistics.mean(rewards[i:i + BLOCK]), 4),
               "zero_std_groups": round(statistics.mean(r["frac_reward_zero_std"] for r in rows[i:i + BLOCK]), 4)}
              for i in range(0, len(rows), BLOCK)]
    write_json(OUT, {"sft_command": command.strip(), "train_code": train_code, "threads": args.threads,
                     "machine": machine_info(), "loadavg_before": load,
                     "loadavg_after": [round(x, 2) for x in os.getloadavg()], "sft_seconds": sft_seconds,
                     "grpo_seconds": grpo_seconds, "blocks": blocks,
                     "reward": [round(x, 4) for x in rewards],
                     "zero_std_groups": [r["frac_reward_zero_std"] for r in rows]}, newline=True)
    print(f"wrote {OUT}")
    for b in blocks:
        print(f"steps {b['steps'][0]}-{b['steps'][1]}: reward {b['reward']:.3f}, groups without variance "
              f"{b['zero_std_groups']:.2f}")


if __name__ == "__main__":
    main()
