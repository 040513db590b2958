"""RRO's DPO settings side by side: every stored ``rro_samples`` run on one collection, whatever its variant.

    python -m benchmarks.rro_dpo_settings [--env webshop] [--out benchmarks/results/rro_dpo_settings_webshop]

``rro_samples.py`` stores each run (collection + DPO + held-out evaluation) under
``results/<name>_runs/``, one directory per variant: the collection rule (``--invalid-action-reward``) and
the DPO setting (``--dpo-lr``, ``--dpo-sft-weight``, ``--device``). Its own tables wait for every seed of
both arms; this one reads every finished run now and lines them up by collection, so a learning-rate
sweep on one collection reads as one table: π_SFT, then each π_DPO's held-out score and success, its
purchases and invalid share (the ``shopping_*`` records, webshop), and DPO's implicit rewards on the chosen
and rejected actions. Only runs whose key carries the π_SFT's weights hash are read (older ones name a
π_SFT whose weights are lost); each table holds one π_SFT. Writes ``<out>.{json,md}``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


RESULTS = Path(__file__).parent / "results"


def setting(overrides: list[str], name: str, default: str) -> str:
    """The value of override ``name=...`` in a run's settings, else ``default``."""
    values = [o.split("=", 1)[1] for o in overrides if o.startswith(f"{name}=")]
    return values[-1] if values else default


def stored_value(path: Path) -> dict:
    """The ``value`` of a record that ``rro_samples`` stored at ``path``, else {}."""
    return json.loads(path.read_text())["value"] if path.exists() else {}


def read_runs(results: Path, env: str) -> list[dict]:
    """One row per stored run of ``rro_samples`` on ``env``: its collection, DPO setting, where it ran, and
    its held-out numbers next to its π_SFT's."""
    prefix = "rro_samples" + ("" if env == "sokoban" else f"_{env}")
    rows = []
    for runs in sorted(results.glob(f"{prefix}_*runs")):
        rest = runs.name.removesuffix("_runs").removeprefix(prefix)
        if rest.startswith(("_smoke", "_webshop")) or rest.endswith("_smoke") or not runs.is_dir():
            continue  # smoke runs; for sokoban (no env in the name), the other envs' runs
        sft, sft_shop = stored_value(runs / "sft_eval.json"), stored_value(runs / "shopping_SFT.json")
        if not sft:
            continue
        for path in sorted([*runs.glob("rising_s*.json"), *runs.glob("fixed_s*.json")]):
            stored = json.loads(path.read_text())
            key, run = stored["key"], stored["value"]
            if "sft_sha256" not in key:
                continue
            overrides, machine = key["settings"], stored.get("machine")
            shop = stored_value(runs / f"shopping_{path.stem}.json")
            rows.append({
                "collection": f"{run['method']} s{run['seed']}",
                "invalid_action_reward": setting(overrides, "rro.invalid_action_reward", "MC estimate"),
                "dpo_lr": float(setting(overrides, "rro.dpo.lr", "nan")),
                "sft_weight": float(setting(overrides, "rro.dpo.sft_weight", "0")),
                "dpo_pairs": setting(overrides, "rro.dpo.pairs", "all").replace("_", " "),
                "device": setting(overrides, "policy.device", "cpu").replace("auto", "cpu"),
                "machine": (machine.get("gpu") or f"{machine['cpu']} ({machine['cores']} cores)") if machine
                else "not recorded (a run from before records kept it)",
                "note": stored.get("note", ""),
                "sft_sha256": key["sft_sha256"][:12], "pairs": run["pairs"],
                "sft_score": sft.get("eval/score"), "sft_success": sft.get("eval/success_rate"),
                "sft_bought": sft_shop.get("bought"), "sft_invalid": sft_shop.get("invalid_frac"),
                "score": run["score"], "success": run["success_rate"],
                "bought": shop.get("bought"), "invalid": shop.get("invalid_frac"),
                "chosen": run.get("dpo_chosen_reward"), "rejected": run.get("dpo_rejected_reward"),
                "records": runs.name,
            })
    rows.sort(key=lambda r: (r["sft_sha256"], r["invalid_action_reward"], r["collection"], r["sft_weight"],
                             r["dpo_pairs"], r["dpo_lr"], r["device"] != "cpu"))
    return rows


def table(rows: list[dict]) -> list[str]:
    """Markdown: one table per (π_SFT, collection rule, collection), π_SFT first."""

    def num(value, fmt="{:.3f}") -> str:
        return "–" if value is None else fmt.format(value)

    lines, groups = [], {}
    for r in rows:
        groups.setdefault((r["sft_sha256"], r["invalid_action_reward"], r["collection"]), []).append(r)
    for (sha, invalid, collection), group in groups.items():
        lines += [f"## {collection}, invalid candidates' process reward: {invalid} ({group[0]['pairs']} pairs; "
                  f"π_SFT weights {sha})", "",
                  "| policy | DPO lr | NLL weight | DPO pairs | device | score | success | bought | invalid | "
                  "DPO chosen | DPO rejected |", "|---|---|---|---|---|---|---|---|---|---|---|"]
        # π_SFT as each device evaluated it (the records of every variant hold their own evaluation)
        sft_rows = {(r["device"], r["sft_score"], r["sft_success"], r["sft_bought"], r["sft_invalid"]) for r in group}
        for device, score, success, bought, invalid_frac in sorted(sft_rows, key=lambda t: (t[0], t[1] or 0)):
            lines.append(f"| π_SFT | – | – | – | {device} | {num(score)} | {num(success)} | "
                         f"{num(bought, '{:.2f}')} | {num(invalid_frac, '{:.2f}')} | – | – |")
        for r in group:
            lines.append(f"| π_DPO | {r['dpo_lr']:g} | {r['sft_weight']:g} | {r['dpo_pairs']} | {r['device']} | "
                         f"{num(r['score'])} | {num(r['success'])} | {num(r['bought'], '{:.2f}')} | "
                         f"{num(r['invalid'], '{:.2f}')} | {num(r['chosen'], '{:+.3f}')} | "
                         f"{num(r['rejected'], '{:+.3f}')} |")
        lines.append("")
    machines = sorted({f"{r['device']}: {r['machine']}; {r['note']}" for r in rows})
    return lines + ["Where the runs ran (device: machine; what shared it):", ""] + [f"- {m}" for m in machines]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--env", default="webshop", choices=["sokoban", "webshop"])
    ap.add_argument("--results", default=str(RESULTS), help="where the rro_samples records are")
    ap.add_argument("--out", default=None, help="results path without suffix (default results/rro_dpo_settings_<env>)")
    args = ap.parse_args()
    rows = read_runs(Path(args.results), args.env)
    if not rows:
        sys.exit(f"error: no rro_samples runs for {args.env} under {args.results}")
    out = Path(args.out or RESULTS / f"rro_dpo_settings_{args.env}")
    lines = [f"# RRO on {args.env}: π_DPO by DPO setting, per collection", "",
             "Every stored `rro_samples` run (`benchmarks/rro_dpo_settings.py`). Held-out: the env's test goals, "
             "greedy. NLL weight: `rro.dpo.sft_weight` (RPO when > 0). DPO chosen / rejected: β·log π_θ/π_ref "
             "over DPO's last epoch.", "", *table(rows)]
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps({"benchmark": "rro_dpo_settings", "env": args.env, "rows": rows},
                                                   indent=1))
    out.with_suffix(".md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
