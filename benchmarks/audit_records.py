"""The credit audit's per-seed records, read from a setting's ``credit_audit_<setting>_runs/`` folder.

``benchmarks/credit_audit.py`` writes one file per part and policy or arm there (``accuracy_<policy>.json``,
``bias_<policy>.json``, ``rro_<policy>.json``, ``race_<arm>.json``, ``race_fresh_<arm>.json``) and a summary,
``credit_audit_<setting>.json``, with what the runs share (settings, machine, note, the race's tuned rates). The
per-seed values live in the runs files only: a summary that copied them grew past the repo's 1 MB limit per file.
The benchmark (its tuned rates, the speed record) and the report read them through :func:`per_seed`.
"""

from __future__ import annotations

import json
from pathlib import Path

PARTS = ("accuracy", "bias", "rro", "race", "race_fresh", "race_tuning")  # what per_seed returns, besides lm_runs
LM_KEYS = ("m", "subsample", "model", "sha256", "options", "overrides", "threads")


def _load(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))


def _fresh_order(key: str) -> tuple[float, int]:  # "seed@lr": by rate, then seed
    seed, lr = key.split("@")
    return float(lr), int(seed)


def per_seed(runs: Path) -> dict:
    """Every part's per-seed records in ``runs``: ``{part: {policy or arm: [record per seed, in seed order]}}`` for
    each part of :data:`PARTS`, and ``lm_runs`` (the LM policies' sampling settings) where an LM policy ran."""
    out: dict = {part: {} for part in PARTS}
    for kind in ("accuracy", "bias", "rro"):
        for f in sorted(runs.glob(f"{kind}_*.json")):
            d = _load(f)
            out[kind][d["policy"]] = [d["seeds"][k] for k in sorted(d["seeds"], key=int)]
            if kind == "accuracy" and "model" in d:  # an LM policy (others may audit a subsample too)
                out.setdefault("lm_runs", {})[d["policy"]] = {k: d[k] for k in LM_KEYS if k in d}
    for f in sorted(runs.glob("race_*.json")):
        d = _load(f)
        if d.get("pools") == "fresh":
            out["race_fresh"][d["arm"]] = [d["runs"][k] for k in sorted(d.get("runs", {}), key=_fresh_order)]
            out["race_tuning"][d["arm"]] = [d["tuning"][k] for k in sorted(d.get("tuning", {}), key=_fresh_order)]
        else:  # the race before issue 85: one pool shared by every seed, lr 1
            out["race"][d["arm"]] = [d["seeds"][k] for k in sorted(d["seeds"], key=int)]
    return out
