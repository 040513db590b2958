"""The documentation's results, generated from the committed records: nothing in them is typed by hand.

    python -m benchmarks.report           # write docs/results/*.md (+ img/) and the README's two tables
    python -m benchmarks.report --check   # exit 1, naming the files, when a committed file is not what it generates

Reads every learning check's summary (``benchmarks/results/<check>.json``) and its per-run records
(``<check>_runs/``; checks made before records existed keep their runs inside the summary) and writes:

- ``docs/results/<check>.md``, one page per check: settings, machine, per-arm results, paired differences,
  per-run values, figure, and the narrative (``benchmarks/narrative/<check>.md``, hand-written, rendered with
  Jinja so that every number in it is an expression over the records, e.g. ``{{ c.arm('gigpo').mean | f3 }}``);
- ``docs/results/credit-audit-<setting>.md`` from the credit audit's summaries, ``docs/results/lm-race-<setting>.md``
  from the LM race's records (``benchmarks/lm_race.py``; a page saying "not run yet" where there are none) and
  ``docs/results/audit-predicts-lm.md``, the prediction table (does the audit's order predict the LM's?);
- ``docs/results/index.md`` (the detailed results table, the claims table, how to read them) and
  ``docs/results/performance.md``;
- the README's results table (one row per claim, one column per level of evidence: the claims table) and its
  performance table, between ``<!-- results:begin -->`` / ``<!-- results:end -->`` and ``<!-- performance:begin -->``
  / ``<!-- performance:end -->``.

Learning checks are read twice: their held-out metric, and the area under each run's on-policy training success
curve (:func:`train_auc`), each with its paired differences and the claim's verdicts.

Arms are read from the records, so an arm being added (``<arm>_s<seed>.json`` landing one seed at a time) shows
up with the seeds it has ("3 of 5 seeds"), and its paired differences use the seeds both arms have. Statistics,
and the rule for "separated" and for the paper's ordering: ``benchmarks/stats.py``. Runs are paired only on the
same π_SFT: by the sha256 of its weights where the records carry it (``sft_sha256``), else by seed, and the
pages say "not recorded".

The package, in the order the data flows: ``paths`` (where records are read and pages written), ``claims`` (arm
names, the papers' claims, every check's spec) and ``text`` (formatting) under it all; records: ``records`` (a
check's runs), ``checks``, ``audits``, ``races``; tables: ``sections``, ``tables``, ``evidence`` (the claims table);
pages: ``check_pages``, ``demo``, ``audit_pages`` and ``audit_sections``, ``race_pages``, ``prediction``, ``index``
(index, performance, the README's blocks). This module writes them all: :func:`generate`, :func:`stale`, :func:`main`.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

from benchmarks import stats
from benchmarks.report import paths
from benchmarks.report.audit_pages import audit_page
from benchmarks.report.audits import Audit, load_audits
from benchmarks.report.check_pages import page, training_curve_section
from benchmarks.report.checks import Check, curve_comparable, load_check, train_auc
from benchmarks.report.claims import CLAIMS, CREDIT_CLAIM, GOALS, NAMES, PAPER, SPECS, Spec
from benchmarks.report.demo import split_gains
from benchmarks.report.evidence import CLAIM_ROWS, EVIDENCE, claim_cell, claim_entries, claims_table
from benchmarks.report.index import audit_readme_lines, index_page, performance_page, readme_blocks, replace_block
from benchmarks.report.paths import read_json, rel
from benchmarks.report.prediction import PREDICTION_PAGE, PREDICTIONS, prediction_page, prediction_sources
from benchmarks.report.race_pages import lm_race_page
from benchmarks.report.races import LM_RACE_ARMS, LM_RACES, LMRace, load_lm_races
from benchmarks.report.records import Run
from benchmarks.report.sections import run_machines_lines
from benchmarks.report.tables import results_table

# what tests and other benchmarks use by name (the paths stay in ``paths``: patch them there)
__all__ = ["CLAIMS", "CLAIM_ROWS", "CREDIT_CLAIM", "EVIDENCE", "GOALS", "LM_RACES", "LM_RACE_ARMS", "NAMES", "PAPER",
           "PREDICTIONS", "SPECS", "Audit", "Check", "LMRace", "Run", "Spec", "audit_page", "audit_readme_lines",
           "claim_cell", "claim_entries", "claims_table", "curve_comparable", "generate", "lm_race_page", "load_audits",
           "load_check", "load_lm_races", "main", "page", "paths", "prediction_page", "prediction_sources",
           "replace_block", "results_table", "run_machines_lines", "stale", "train_auc", "training_curve_section"]


def generate() -> dict[Path, bytes]:
    """Every generated file's path and content (README.md with its blocks replaced)."""
    checks = [load_check(spec) for spec in SPECS]
    by_stem = {c.spec.stem: c for c in checks}
    context = {"checks": by_stem, "load": lambda f: read_json(paths.RESULTS / f), "stats": stats, "paper": PAPER,
               "goals": GOALS, "math": math, "split_gains": split_gains}
    out: dict[Path, bytes] = {}
    for c in checks:
        text, files = page(c, context)
        out[paths.DOCS / c.page] = text.encode()
        out.update({paths.DOCS / k: v for k, v in files.items()})
    audits = load_audits()
    for a in audits:
        out[paths.DOCS / a.page] = audit_page(a).encode()
    races = load_lm_races()
    for r in races:
        out[paths.DOCS / r.page] = lm_race_page(r, audits, checks).encode()
    out[paths.DOCS / PREDICTION_PAGE] = prediction_page(races, audits, checks).encode()
    out[paths.DOCS / "index.md"] = index_page(checks, audits, races).encode()
    out[paths.DOCS / "performance.md"] = performance_page().encode()
    readme = paths.README.read_text(encoding="utf-8")
    for key, body in readme_blocks(checks, audits, races).items():
        readme = replace_block(readme, key, body)
    out[paths.README] = readme.encode()
    return out


def stale(files: dict[Path, bytes]) -> list[str]:
    """The generated files whose committed content differs (or is missing), and stray files in docs/results/."""
    bad = [rel(p) for p, data in files.items() if not p.exists() or p.read_bytes() != data]
    extra = [rel(p) for p in paths.DOCS.rglob("*") if p.is_file() and p not in files]
    return bad + [f"{x} (not generated any more)" for x in extra]


def main() -> int:
    # prog: the usage line reads as it did when the report was one file, report.py
    ap = argparse.ArgumentParser(prog="report.py", description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="write nothing; exit 1 if a generated file differs")
    args = ap.parse_args()
    files = generate()
    if args.check:
        bad = stale(files)
        for b in bad:
            print(f"out of date: {b}", file=sys.stderr)
        if bad:
            print("run: python -m benchmarks.report", file=sys.stderr)
        return 1 if bad else 0
    for p in paths.DOCS.rglob("*"):
        if p.is_file() and p not in files:
            p.unlink()
    for p, data in files.items():
        p.parent.mkdir(parents=True, exist_ok=True)
        if not p.exists() or p.read_bytes() != data:
            p.write_bytes(data)
    print(f"wrote {len(files)} files under {rel(paths.DOCS)}/ and README.md's tables")
    return 0
