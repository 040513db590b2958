"""A check's runs from its records: one :class:`Run` per (arm, seed), from ``<check>_runs/`` or, for checks made
before records existed, from the summary. The DPO learning-rate check's runs are ``rro_dpo_settings``' rows (every
stored ``rro_samples`` run), paired by collection.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from benchmarks.report import paths
from benchmarks.report.paths import read_json, rel


@dataclass
class Run:
    """One (arm, seed) run: its metric, its π_SFT's metric and identity, where it is recorded."""

    arm: str
    seed: int
    value: float
    sft_value: float | None
    sft_sha: str | None
    source: str
    extra: dict = field(default_factory=dict)


def arm_seed(stem: str) -> tuple[str, int]:
    arm, _, seed = stem.rpartition("_s")
    return arm, int(seed)


def learning_runs(stem: str, summary: dict, borrow: dict) -> list[Run]:
    """A learning check's runs: its ``_runs/`` records (every ``<arm>_s<seed>.json``), else the runs kept in its
    summary; plus borrowed arms from another check's records."""

    def run_of(arm, r, source, machine=None):
        return Run(arm, r["seed"], r["final_eval_success"], r.get("initial_eval_success"), r.get("sft_sha256"), source,
                   {**{k: r.get(k) for k in ("mean_train_success", "mean_all_zero_frac", "mean_entropy", "rl_minutes",
                                             "env_steps", "resumed_at_step", "diagnostics", "curves")},
                    "machine": machine})

    runs = []
    records = paths.RESULTS / f"{stem}_runs"
    steps = summary["settings"]["steps"]
    if records.is_dir():
        for path in sorted(records.glob("*_s*.json")):
            arm, _ = arm_seed(path.stem)
            stored = read_json(path)
            ran = ((stored.get("config") or {}).get("rl") or {}).get("steps", steps)
            if ran != steps:  # a run of another budget (a smoke run, another suite) must not join this check
                raise SystemExit(f"error: {rel(path)} ran {ran} RL steps, its check {stem} {steps}")
            runs.append(run_of(arm, stored["record"], rel(path), stored.get("machine")))
    else:  # an older summary that still holds its runs (today's keep an index of their records: learning.run_index)
        for arm, rs in summary["runs"].items():
            if rs and "record" in rs[0]:
                raise SystemExit(f"error: {rel(paths.RESULTS / stem)}.json indexes its runs in {rel(records)}, "
                                 "which is missing")
            runs += [run_of(arm, r, f"{rel(paths.RESULTS / stem)}.json") for r in rs]
    for arm, folder in borrow.items():
        for path in sorted((paths.RESULTS / folder).glob(f"{arm}_s*.json")):
            stored = read_json(path)
            runs.append(run_of(arm, stored["record"], rel(path), stored.get("machine")))
    return runs


def rro_runs(stem: str, summary: dict) -> list[Run]:
    """An RRO check's runs: ``<stem>_runs/{rising,fixed}_s<seed>.json`` (key + value), else the summary's runs.
    Metric: the held-out score (WebShop's graded reward; on Sokoban it equals success)."""
    sft = summary["sft"]["score"]
    records = paths.RESULTS / f"{stem}_runs"
    runs = []
    if records.is_dir():
        for path in sorted([*records.glob("rising_s*.json"), *records.glob("fixed_s*.json")]):
            stored = read_json(path)
            r = stored["value"]
            shop = paths.RESULTS / f"{stem}_runs" / f"shopping_{path.stem}.json"
            runs.append(Run(r["method"], r["seed"], r["score"], sft, stored["key"].get("sft_sha256"), rel(path),
                            {**r, "machine": stored.get("machine"),
                             "shopping": read_json(shop)["value"] if shop.exists() else None}))
    else:
        sha = summary["settings"].get("sft_sha256")
        for r in summary["runs"]:
            runs.append(Run(r["method"], r["seed"], r["score"], sft, sha, f"{rel(paths.RESULTS / stem)}.json", dict(r)))
    return runs


def demo_runs(summary: dict) -> list[Run]:
    """The demo's runs: one record per seed in each source folder; arm ``rl`` (after RL) beside its own π_SFT.
    A summary with a test split (``test_levels``) is read on the test split; its validation values go in extra."""
    test = bool(summary.get("test_levels"))
    runs = []
    for folder in summary["sources"]:
        for path in sorted((paths.RESULTS / folder).glob("s*.json")):
            stored = read_json(path)
            r = stored["run"]
            value, sft = ((r["final_test_success"], r["sft_test_success"]) if test
                          else (r["final_success"], r["sft_success"]))
            runs.append(Run("rl", r["seed"], value, sft, None, rel(path),
                            {"minutes": r["minutes"], "curve": r["curve"], "machine": stored.get("machine"),
                             "load": r.get("load_average_before_after"), "validation": (r["sft_success"],
                                                                                       r["final_success"])}))
    return runs


# arm -> (DPO lr, NLL weight, pair filter): the paper's-rule rising collections under each DPO setting
DPO_ARMS = {"lr 1e-4": (1e-4, 0.0, "all"), "lr 5e-5": (5e-5, 0.0, "all"),
            "lr 5e-5, valid chosen": (5e-5, 0.0, "valid chosen"), "lr 2e-5": (2e-5, 0.0, "all"),
            "lr 3e-6": (3e-6, 0.0, "all"), "RPO lr 5e-5": (5e-5, 1.0, "all")}


def dpo_runs(summary: dict) -> list[Run]:
    """One run per (DPO setting, rising collection under the paper's rule): the CPU run where there is one,
    else the GPU's (their lr 1e-4 runs agree to three decimals); seed = the collection's seed."""
    runs = {}
    for row in summary["rows"]:
        coll, rule = row["collection"], row["invalid_action_reward"]
        if not coll.startswith("rising") or rule != "MC estimate":
            continue
        for arm, (lr, w, pairs) in DPO_ARMS.items():
            if (row["dpo_lr"], row["sft_weight"], row["dpo_pairs"]) == (lr, w, pairs):
                seed = int(coll.split("s")[-1])
                if (arm, seed) not in runs or runs[(arm, seed)].extra["device"] != "cpu":
                    runs[(arm, seed)] = Run(arm, seed, row["score"], row["sft_score"], row["sft_sha256"],
                                            f"benchmarks/results/{row['records']}/", dict(row))
    return sorted(runs.values(), key=lambda r: (list(DPO_ARMS).index(r.arm), r.seed))


def override(overrides: list[str], key: str):
    vals = [o.split("=", 1)[1] for o in overrides if o.startswith(f"{key}=")]
    return vals[-1] if vals else None
