"""Which actions a webshop policy takes, and which of them are invalid: a diagnosis of what DPO changed.

For each model (``LABEL=DIR``), one greedy episode on each of the first ``--episodes`` held-out goals, with
the settings of the ``rro_samples.py --env webshop`` suite (compact template, H = 0, 48 new tokens). Every
step is classified by the page it was taken on (the state key's first field) and the action's kind
(``search``, ``click-product`` for a product ID, ``click-option`` for any other click on an item page,
``buy``, ``tab``, ``nav``, ``malformed``); the table gives each (page, kind)'s share of all steps and how many
of them were invalid, and how episodes end (bought, or out of steps).

Usage::

    python -m benchmarks.webshop_actions SFT=benchmarks/results/webshop_sft_E4b/sft_model \\
        DPO=runs/bench_rro_webshop_invalid-1/rising_s0/dpo_model --out benchmarks/results/webshop_actions_X
"""

from __future__ import annotations

import argparse
import collections
import json
import re
import sys
import time
from pathlib import Path


from benchmarks.machine import machine_info
from benchmarks.sft_models import require_weights

SETTINGS = ["env.name=webshop", "policy.template=compact", "rollout.history_length=0",
            "generation.max_new_tokens=48", "tensorboard=false"]  # the rro_samples webshop suite's
PRODUCT_ID = re.compile(r"b0[0-9a-z]{8}")


def action_kind(action: str, page: str = "") -> str:
    """The kind of a webshop action text; ``page`` tells an option click (item page) from other clicks."""
    action = action.strip().lower()
    if action.startswith("search[") and action.endswith("]"):
        return "search"
    match = re.fullmatch(r"click\[(.*)\]", action)
    if not match:
        return "malformed"
    target = match.group(1).strip()
    if PRODUCT_ID.fullmatch(target):
        return "click-product"
    if target == "buy now":
        return "buy"
    if target in ("description", "features", "reviews", "attributes"):
        return "tab"
    if target in ("back to search", "< prev", "next >"):
        return "nav"
    return "click-option" if page == "item" else "click-other"


def breakdown(trajs) -> dict:
    """Per (page, kind): steps and invalid steps; and the episodes' purchases, score and invalid share."""
    from benchmarks.webshop_sft import shopping_metrics  # imports torch; action_kind's users need not

    steps: collections.Counter = collections.Counter()
    invalid: collections.Counter = collections.Counter()
    for traj in trajs:
        for step in traj.steps:
            page = step.state.split("|", 1)[0]
            key = f"{page}/{action_kind(step.action, page)}"
            steps[key] += 1
            invalid[key] += not step.valid
    total = sum(steps.values())
    shop = shopping_metrics(trajs)
    return {"episodes": len(trajs), "steps": total, "steps_per_episode": total / max(1, len(trajs)),
            "bought": shop["bought"], "invalid_frac": shop["invalid_frac"], "score": shop["mean_score"],
            "kinds": {k: {"steps": n, "share": n / total, "invalid": invalid[k]} for k, n in steps.most_common()}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("models", nargs="+", help="LABEL=DIR: a policy directory to evaluate")
    ap.add_argument("--episodes", type=int, default=200, help="held-out goals, greedy")
    ap.add_argument("--out", required=True, help="results path without suffix")
    ap.add_argument("--note", default="", help="a line for the report: what shared the cores")
    args = ap.parse_args()
    models = dict(m.split("=", 1) if "=" in m else (Path(m).name, m) for m in args.models)
    missing = [d for d in models.values() if not Path(d).is_dir()]
    if missing:
        sys.exit(f"webshop_actions: not a model directory: {', '.join(missing)}")
    for path in models.values():  # the committed π_SFT's weights are not in git: say how to rebuild them
        require_weights(path)
    from creditflow.config import build_config
    from creditflow.recipes.eval import evaluate_saved_policy

    rows, t0 = {}, time.perf_counter()
    for label, path in models.items():
        cfg = build_config(None, SETTINGS + [f"policy.model={path}", "out_dir=runs/webshop_actions"])
        rows[label] = breakdown(evaluate_saved_policy(cfg, path, args.episodes)[1]) | {"model": path}
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(
        {"benchmark": "webshop_actions", "settings": SETTINGS, "episodes": args.episodes, "models": rows,
         "note": args.note, "wall_seconds": round(time.perf_counter() - t0, 1), "machine": machine_info()},
        indent=2))
    kinds = sorted({k for r in rows.values() for k in r["kinds"]},
                   key=lambda k: -max(r["kinds"].get(k, {}).get("steps", 0) for r in rows.values()))
    lines = ["# What a webshop policy does, step by step (`benchmarks/webshop_actions.py`)", "",
             f"{args.episodes} held-out goals, greedy; settings: {', '.join(SETTINGS)}. " + args.note, "",
             "| policy | score | bought | steps / episode | invalid |", "|---|---|---|---|---|"]
    lines += [f"| {label} (`{r['model']}`) | {r['score']:.3f} | {r['bought']:.2f} | {r['steps_per_episode']:.1f} | "
              f"{r['invalid_frac']:.2f} |" for label, r in rows.items()]
    lines += ["", "Share of all steps per page/kind, and invalid steps among them:", "",
              "| page/kind | " + " | ".join(rows) + " |", "|---" * (len(rows) + 1) + "|"]
    for k in kinds:
        cells = []
        for r in rows.values():
            c = r["kinds"].get(k)
            cells.append(f"{c['share']:.2f} ({c['invalid']} invalid)" if c else "–")
        lines.append(f"| {k} | " + " | ".join(cells) + " |")
    out.with_suffix(".md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
