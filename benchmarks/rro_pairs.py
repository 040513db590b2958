"""What RRO's preference pairs prefer: how often the chosen (and rejected) action is an invalid action.

An invalid action is a no-op in creditflow's envs (the page or grid stays), so under the paper's rule its
MC process reward estimates the current state's value again, and it often passes the rising test
r_t ≥ r_{t−1}. This counts, for each collection of an ``rro_samples.py`` work directory:

- pairs whose chosen action is invalid: the env's own ``valid`` flag of the explored trajectory's step (the
  trajectory continues with the chosen action), or the pair's ``chosen_valid`` where the collection has it;
- pairs whose rejected action is invalid (``rejected_valid``: collections made since that field exists);
- explored steps that were invalid no-ops;
- with ``--kinds`` (webshop): the pairs by page, chosen action's kind and rejected action's kind
  (``benchmarks/webshop_actions.py``'s classes), i.e. which decisions DPO is taught.

Usage: ``python -m benchmarks.rro_pairs runs/bench_rro_webshop --out benchmarks/results/rro_pairs_webshop``
"""

from __future__ import annotations

import argparse
import collections
import json
import sys
from pathlib import Path


from benchmarks.machine import machine_info
from benchmarks.webshop_actions import action_kind
from creditflow.pairs.preferences import chosen_valid


def count(collection: Path, kinds: bool = False) -> dict:
    """The counts of one collection's ``preferences`` directory."""
    valid: dict[tuple[str, int], bool] = {}
    page: dict[tuple[str, int], str] = {}
    for line in (collection / "trajectories.jsonl").read_text().splitlines():
        traj = json.loads(line)
        for i, step in enumerate(traj["steps"]):
            valid[(traj["task_id"], i + 1)] = bool(step["valid"])
            page[(traj["task_id"], i + 1)] = step["state"].split("|", 1)[0]
    pairs = [json.loads(line) for line in (collection / "preferences.jsonl").read_text().splitlines() if line]
    chosen_ok = chosen_valid(collection, pairs)
    chosen_invalid = sum(not ok for ok in chosen_ok)
    known = [p for p in pairs if "rejected_valid" in p]
    tasks = sum(1 for line in (collection / "tasks.jsonl").read_text().splitlines() if line.strip())
    no_ops = sum(not v for v in valid.values())
    out = {"tasks": tasks, "pairs": len(pairs), "chosen_invalid": chosen_invalid,
           "chosen_invalid_frac": chosen_invalid / len(pairs) if pairs else 0.0,
           "rejected_invalid": sum(not p["rejected_valid"] for p in known) if known else None,
           "explored_steps": len(valid), "explored_invalid": no_ops,
           "explored_invalid_frac": no_ops / len(valid) if valid else 0.0}
    if kinds:  # "item: click-option > click-option*": * marks an invalid action
        by_kind = collections.Counter()
        for p, chosen_is_valid in zip(pairs, chosen_ok):
            key = (p["task_id"], p["step"])
            rejected_valid = p.get("rejected_valid", True)
            by_kind[f"{page[key]}: {action_kind(p['chosen_action'], page[key])}{'' if chosen_is_valid else '*'} > "
                    f"{action_kind(p['rejected_action'], page[key])}{'' if rejected_valid else '*'}"] += 1
        out["kinds"] = dict(by_kind.most_common())
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("work", help="an rro_samples.py work directory (its <method>_s<seed> collections)")
    ap.add_argument("--out", required=True, help="results path without suffix")
    ap.add_argument("--note", default="", help="a line for the report")
    ap.add_argument("--kinds", action="store_true", help="webshop: the pairs by page and action kinds")
    args = ap.parse_args()
    work = Path(args.work)
    names = sorted(d.name for d in work.iterdir() if (d / "preferences" / "trajectories.jsonl").exists()) \
        if work.is_dir() else []
    if not names:
        sys.exit(f"rro_pairs: {work} has no collections (<method>_s<seed>/preferences/trajectories.jsonl)")
    rows = {name: count(work / name / "preferences", args.kinds) for name in names}
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps({"benchmark": "rro_pairs", "work": str(work), "note": args.note,
                                                    "collections": rows, "machine": machine_info()}, indent=2))
    lines = [f"# Invalid actions in RRO's preference pairs ({work.name})", "",
             "An invalid action is a no-op; under the paper's rule its MC process reward estimates the current "
             "state's value again (`benchmarks/rro_pairs.py`, docs/methods.md \"RRO\"). "
             + (args.note or ""), "",
             "| collection | tasks | pairs | chosen invalid | rejected invalid | explored steps | invalid no-ops |",
             "|---|---|---|---|---|---|---|"]
    for name, r in rows.items():
        rejected = "–" if r["rejected_invalid"] is None else str(r["rejected_invalid"])
        lines.append(f"| {name} | {r['tasks']} | {r['pairs']} | {r['chosen_invalid']} "
                     f"({r['chosen_invalid_frac']:.0%}) | {rejected} | {r['explored_steps']} | {r['explored_invalid']} "
                     f"({r['explored_invalid_frac']:.0%}) |")
    for name, r in rows.items() if args.kinds else []:
        lines += ["", f"{name}: pairs by page, chosen > rejected action kind (* invalid; rejected: where recorded)", "",
                  "| page: chosen > rejected | pairs |", "|---|---|"]
        lines += [f"| {k} | {n} |" for k, n in r["kinds"].items()]
    out.with_suffix(".md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
