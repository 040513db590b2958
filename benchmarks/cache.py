"""The run-record cache the benchmarks share: a finished run's record is a JSON file keyed by what made it, written
atomically (a stopped benchmark never leaves half a record), and reused when the same run is asked for again.

``learning.py`` keys its records by the run's config (matched by ``learning.same_config``), ``rro_samples.py`` by
an explicit key (``stored`` / ``cached``), ``credit_audit.py`` by setting and seed; all write with ``write_json``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable


def write_json(path: Path, data: Any, *, sort_keys: bool = False, newline: bool = False) -> None:
    """``data`` as JSON (indent 1) at ``path``: written next to it, then moved over it in one step."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=1, sort_keys=sort_keys) + ("\n" if newline else ""), encoding="utf-8")
    tmp.replace(path)


def stored(path: Path, key: dict):
    """The value stored at ``path`` by a finished run with the same ``key``, else None."""
    if path.exists():
        record = json.loads(path.read_text())
        if record.get("key") == key:
            return record["value"]
    return None


def cached(path: Path, key: dict, compute: Callable[[], Any], extra: Callable[[], dict] = dict):
    """``compute()``'s result, stored at ``path`` with ``key`` (and ``extra()``'s fields, e.g. the machine it ran on);
    reused when a finished run has the same key."""
    value = stored(path, key)
    if value is not None:
        return value
    value = compute()
    write_json(path, {"key": key, "value": value, **extra()})
    return value
