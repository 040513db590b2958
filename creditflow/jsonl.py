"""Line-numbered JSONL reading shared by every reader of user files."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Iterator


def iter_json_lines(path: str | os.PathLike, error: type[Exception],
                    prefix: str = "") -> Iterator[tuple[str, object]]:
    """Yield ``("file:line", value)`` per non-blank line; invalid JSON raises ``error(prefix + "file:line: ...")``."""
    path = Path(path)
    with path.open(encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            where = f"{path}:{lineno}"
            try:
                yield where, json.loads(line)
            except json.JSONDecodeError as exc:
                raise error(f"{prefix}{where}: invalid JSON ({exc.msg}, column {exc.colno})") from None
