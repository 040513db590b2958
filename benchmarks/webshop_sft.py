"""A π_SFT for webshop with the tiny from-scratch policy: what it takes to shop (the RRO check needs one).

    python -m benchmarks.webshop_sft --run NAME [key=value ...] [--eval-episodes 64] [--threads 2]

Each run fine-tunes the tiny default policy (built from scratch, the env's own 4,096-token case-folded
tokenizer) on the scripted shopper's demonstrations with the given overrides on top of the shared webshop
settings (compact template, ``sft.max_length=2048``, 48 new tokens), then plays the first
``--eval-episodes`` held-out test goals greedily and records what the policy gets right on the way to a
purchase: a valid first search, a click on a real product from the results, a purchase, the mean WebShop
score, invalid actions and wins.

Resumable: the π_SFT of a run is kept in ``runs/webshop_sft/<NAME>/sft_model`` and each finished run's
record goes into ``benchmarks/results/webshop_sft.json`` (keyed by name, with its overrides); a rerun of a
recorded name with the same overrides prints the record and trains nothing, unless its ``sft_model`` is gone
(a fresh clone): then it trains that π_SFT again and says whether the held-out metrics match the record. The table in
``webshop_sft.md`` is rebuilt from every record, earlier sessions' included.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import torch


from benchmarks.machine import machine_info
from creditflow.config import build_config
from creditflow.envs.configured import env_factory
from creditflow.recipes.eval import evaluate_saved_policy
from creditflow.recipes.sft import SFTRecipe
from creditflow.rollout.seeding import seed_everything

SHARED = ["env.name=webshop", "sft.max_length=2048", "policy.template=compact", "generation.max_new_tokens=48",
          "tensorboard=false"]
RESULTS = Path(__file__).parent / "results" / "webshop_sft"


def shopping_metrics(trajs) -> dict:
    """How far greedy episodes get: first action a valid search, second a click that opens a product page,
    a purchase, and the usual score / invalid / success rates."""
    n = len(trajs)

    def page_after(step) -> str:
        return (step.next_state or "").split("|", 1)[0]

    search = sum(1 for t in trajs if t.steps and t.steps[0].valid and t.steps[0].action.startswith("search["))
    product = sum(1 for t in trajs if len(t.steps) > 1 and t.steps[1].valid and page_after(t.steps[1]) == "item")
    bought = sum(1 for t in trajs if t.steps and page_after(t.steps[-1]) == "done")
    steps = sum(len(t.steps) for t in trajs)
    return {"episodes": n, "first_action_valid_search": search / n, "second_action_valid_product_click": product / n,
            "bought": bought / n, "mean_score": sum(t.score for t in trajs) / n,
            "invalid_frac": sum(1 for t in trajs for s in t.steps if not s.valid) / max(1, steps),
            "success_rate": sum(1 for t in trajs if t.success) / n}


def load() -> dict:
    path = RESULTS.with_suffix(".json")
    return json.loads(path.read_text()) if path.exists() else {"benchmark": "webshop_sft", "runs": []}


def save(results: dict) -> None:
    for suffix, text in ((".json", json.dumps(results, indent=1) + "\n"), (".md", markdown(results))):
        tmp = RESULTS.with_suffix(suffix + ".tmp")
        tmp.write_text(text)
        tmp.replace(RESULTS.with_suffix(suffix))


def markdown(results: dict) -> str:
    lines = ["# A π_SFT for webshop with the tiny default policy", "",
             "Written by `benchmarks/webshop_sft.py` from `webshop_sft.json` (every run's overrides, machine and "
             "load are there). Env: webshop, generated catalog (1,000 products, 800 train / 200 test goals). "
             "Eval: the first held-out test goals, greedy, 48 new tokens. Model: the tiny default (Qwen2, hidden "
             "128, 4 layers), built from scratch by `creditflow sft`.", "",
             "| run | settings | SFT steps | final loss | min | valid search | valid product click | bought | "
             "score | invalid | won |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for run in results["runs"]:
        ev = run.get("eval", {})
        settings = run.get("settings") or ", ".join(f"`{o}`" for o in run.get("overrides", [])) or \
            f"{run.get('tokenizer', '')}; {run.get('template', '')}; {run.get('demos', '')} demos x {run.get('epochs', '')}"

        def cell(key, fmt="{:.2f}"):
            return fmt.format(ev[key]) if key in ev else "–"
        lines.append(f"| {run['name']} | {settings} | {run.get('sft_steps', '–')} | {run.get('final_sft_loss', '–')} | "
                     f"{run.get('minutes', '–')} | {cell('first_action_valid_search')} | "
                     f"{cell('second_action_valid_product_click')} | {cell('bought')} | {cell('mean_score', '{:.3f}')} | "
                     f"{cell('invalid_frac')} | {cell('success_rate')} |")
    notes = [f"- **{r['name']}**: {r['note']}" for r in results["runs"] if r.get("note")]
    if notes:
        lines += ["", "Notes:", *notes]
    if results.get("findings"):
        lines += ["", results["findings"]]
    return "\n".join(lines) + "\n"


def sft_model(cfg, work: Path) -> Path:
    """The run's π_SFT: ``policy.model`` when given, else ``work/sft_model``, trained there first when absent."""
    if cfg.policy.model:
        return Path(cfg.policy.model)
    target = work / "sft_model"
    if not (target / "config.json").exists():
        seed_everything(cfg.seed)
        SFTRecipe(cfg, env_factory(cfg.env, cfg.rollout.max_steps, "train"), work, print).setup().run()
    return target


def rebuild(cfg, work: Path, record: dict) -> None:
    """A recorded run whose π_SFT is gone (a fresh clone, a cleaned work directory): train it again from the
    same settings and check it against the record. Training is deterministic on a given machine, so the
    held-out metrics should repeat; the record itself is left as it is."""
    print(f"run {record['name']!r} is recorded but {work / 'sft_model'} is missing: rebuilding it")
    t0 = time.perf_counter()
    model = sft_model(cfg, work)
    minutes = (time.perf_counter() - t0) / 60
    _, trajs = evaluate_saved_policy(cfg, model, record["eval"]["episodes"])
    now = shopping_metrics(trajs)
    same = all(abs(now[k] - v) < 1e-9 for k, v in record["eval"].items())
    print(json.dumps(now, indent=1))
    print(f"rebuilt in {minutes:.1f} min; held-out metrics "
          + ("match the record" if same else f"differ from the record: {json.dumps(record['eval'])}"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--run", required=True, help="the run's name (its record and work directory)")
    ap.add_argument("overrides", nargs="*", help="config overrides on top of the shared webshop settings")
    ap.add_argument("--eval-episodes", type=int, default=64)
    ap.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's own)")
    ap.add_argument("--note", default="", help="a line for the table's notes (e.g. what ran beside it)")
    ap.add_argument("--work", default="runs/webshop_sft")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    results = load()
    done = {r["name"]: r for r in results["runs"]}
    if args.run in done and done[args.run].get("overrides") != args.overrides:
        sys.exit(f"error: run {args.run!r} is recorded with other overrides ({done[args.run].get('overrides')}); "
                 "give it another name")
    work = Path(args.work) / args.run
    cfg = build_config(None, [*SHARED, *args.overrides, f"out_dir={work}"], where="webshop_sft overrides")
    if args.run in done:
        if (work / "sft_model").exists():
            print(json.dumps(done[args.run], indent=1))
            return
        rebuild(cfg, work, done[args.run])
        return
    load_start = os.getloadavg()
    t0 = time.perf_counter()
    model = sft_model(cfg, work)
    minutes = (time.perf_counter() - t0) / 60
    sft = json.loads((work / "sft_metrics.json").read_text()) if (work / "sft_metrics.json").exists() else {}
    metrics, trajs = evaluate_saved_policy(cfg, model, args.eval_episodes)
    record = {"name": args.run, "overrides": args.overrides, "sft_steps": sft.get("sft/steps"),
              "final_sft_loss": round(sft["sft/history"][-1]["sft/loss"], 3) if sft.get("sft/history") else None,
              "minutes": round(minutes, 1), "eval": shopping_metrics(trajs), "eval_metrics": metrics,
              "torch_threads": torch.get_num_threads(), "load_start": load_start, "load_end": os.getloadavg(),
              "machine": machine_info(), "note": args.note}
    results["runs"].append(record)
    save(results)
    print(json.dumps(record["eval"], indent=1))


if __name__ == "__main__":
    main()
