"""Where the report reads its records and writes its pages. Every module reads these as ``paths.X`` when it
runs, so a test points them at a temporary folder with ``monkeypatch.setattr(paths, "RESULTS", ...)``.
"""

from __future__ import annotations

import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "benchmarks" / "results"
NARRATIVE = ROOT / "benchmarks" / "narrative"
DOCS = ROOT / "docs" / "results"
README = ROOT / "README.md"
MARKERS = {"results": ("<!-- results:begin -->", "<!-- results:end -->"),
           "performance": ("<!-- performance:begin -->", "<!-- performance:end -->"),
           "audit": ("<!-- audit:begin -->", "<!-- audit:end -->")}


def slug(stem: str) -> str:
    return stem.replace("_", "-")


def read_json(path: Path):
    return json.loads(path.read_text(encoding="utf-8"))


def rel(path: Path) -> str:
    """``path`` as the repository names it (records under ``RESULTS`` as ``benchmarks/results/...``)."""
    try:
        return "benchmarks/results/" + path.relative_to(RESULTS).as_posix()
    except ValueError:
        return path.relative_to(ROOT).as_posix()
