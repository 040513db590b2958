"""Task loaders for data the user provides: a custom JSONL, a Spider directory, InterCode's ic_spider JSON.

* **custom JSONL**: one object per line, ``{"db_path", "question", "gold_sql"}`` plus optional ``"id"``,
  ``"hardness"``, ``"split"`` ("train"/"test"). A relative ``db_path`` is relative to the JSONL's folder.
  Tasks without ``"split"`` are served in both splits.
* **Spider directory**: ``tables.json`` (optional here: the schema is read from the databases),
  ``train_spider.json`` (or ``train.json``) for ``split="train"``, ``dev.json`` for ``split="test"``, and
  ``database/<db_id>/<db_id>.sqlite``. Entries are ``{"db_id", "question", "query", ...}``.
* **InterCode**: ``ic_spider_*.json``, a list of ``{"db", "query" (the question), "gold", "hardness"}``
  plus a ``database/`` folder laid out as Spider's (given with ``database_dir``, default: a ``database``
  folder next to the JSON file). All of a file's tasks are served in both splits (InterCode's files are
  already one split each).

Malformed input raises :class:`~creditflow.envs.EnvError` naming the file and line/entry.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from creditflow.envs.base import EnvError
from creditflow.envs.sql.tasks import SqlTask
from creditflow.jsonl import iter_json_lines

__all__ = ["load_jsonl_tasks", "load_spider_tasks", "load_intercode_tasks"]


def _task_id(prefix: str, *parts: str) -> str:
    return f"{prefix}/" + hashlib.sha1("|".join(parts).encode()).hexdigest()[:10]


def _check_db(path: Path, where: str) -> str:
    if not path.is_file():
        raise EnvError(f"sql: database not found: {path} ({where})")
    return str(path.resolve())


def load_jsonl_tasks(tasks_file: str | Path) -> list[SqlTask]:
    """Tasks from a JSONL of ``{db_path, question, gold_sql}`` (see the module docstring)."""
    path = Path(tasks_file).expanduser()
    if not path.is_file():
        raise EnvError(f"sql: tasks_file not found: {path}")
    tasks = []
    for where, obj in iter_json_lines(path, EnvError, prefix="sql: "):
        if not isinstance(obj, dict):
            raise EnvError(f"sql: {where}: expected a JSON object")
        missing = [k for k in ("db_path", "question", "gold_sql") if not isinstance(obj.get(k), str) or not obj[k]]
        if missing:
            raise EnvError(f"sql: {where}: missing or empty field(s) {', '.join(missing)}")
        split = obj.get("split")
        if split not in (None, "train", "test"):
            raise EnvError(f"sql: {where}: split must be 'train' or 'test', got {split!r}")
        db = Path(obj["db_path"]).expanduser()
        if not db.is_absolute():
            db = path.parent / db
        db_path = _check_db(db, where)
        tasks.append(SqlTask(
            task_id=str(obj.get("id") or _task_id("custom", obj["db_path"], obj["question"], where.rsplit(":", 1)[1])),
            db_path=db_path, question=obj["question"], gold_sql=obj["gold_sql"],
            hardness=obj.get("hardness"), db_id=Path(db_path).stem, split=split,
        ))
    if not tasks:
        raise EnvError(f"sql: tasks_file {path} holds no tasks")
    return tasks


def _read_json_list(path: Path) -> list:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise EnvError(f"sql: {path}: not valid JSON (line {exc.lineno}: {exc.msg})") from None
    if not isinstance(data, list):
        raise EnvError(f"sql: {path}: expected a JSON list of tasks")
    return data


def _spider_db(database_dir: Path, db_id: str, where: str) -> str:
    for name in (f"{db_id}.sqlite", f"{db_id}.db"):
        candidate = database_dir / db_id / name
        if candidate.is_file():
            return str(candidate.resolve())
    raise EnvError(f"sql: database for {db_id!r} not found under {database_dir / db_id} ({where})")


def load_spider_tasks(spider_dir: str | Path, split: str) -> list[SqlTask]:
    """Spider tasks of ``split`` ("train": train_spider.json or train.json; "test": dev.json)."""
    root = Path(spider_dir).expanduser()
    if not root.is_dir():
        raise EnvError(f"sql: spider_dir is not a directory: {root}")
    names = ["train_spider.json", "train.json"] if split == "train" else ["dev.json"]
    source = next((root / n for n in names if (root / n).is_file()), None)
    if source is None:
        raise EnvError(f"sql: spider_dir {root} has none of {', '.join(names)} (needed for split {split!r})")
    database_dir = root / "database"
    if not database_dir.is_dir():
        raise EnvError(f"sql: spider_dir {root} has no database/ folder")
    return _entries_to_tasks(source, database_dir, ("db_id", "question", "query"), "spider", split)


def load_intercode_tasks(intercode_file: str | Path, database_dir: str | Path | None = None) -> list[SqlTask]:
    """Tasks of an InterCode ``ic_spider_*.json`` file, databases from ``database_dir``."""
    source = Path(intercode_file).expanduser()
    if not source.is_file():
        raise EnvError(f"sql: intercode_file not found: {source}")
    db_dir = Path(database_dir).expanduser() if database_dir else source.parent / "database"
    if not db_dir.is_dir():
        raise EnvError(f"sql: database_dir not found: {db_dir} (give database_dir=... with <db>/<db>.sqlite inside)")
    return _entries_to_tasks(source, db_dir, ("db", "query", "gold"), "intercode", None)


def _entries_to_tasks(source: Path, database_dir: Path, keys: tuple[str, str, str], prefix: str,
                      split: str | None) -> list[SqlTask]:
    """One task per JSON entry; ``keys`` name the entry's (database id, question, gold SQL) fields."""
    db_key, question_key, gold_key = keys
    tasks = []
    for i, entry in enumerate(_read_json_list(source)):
        where = f"{source} entry {i}"
        if not isinstance(entry, dict) or not all(isinstance(entry.get(k), str) for k in keys):
            raise EnvError(f"sql: {where}: expected {db_key}, {question_key} and {gold_key} strings")
        tasks.append(SqlTask(
            task_id=f"{prefix}/{source.stem}/{i}", db_path=_spider_db(database_dir, entry[db_key], where),
            question=entry[question_key], gold_sql=entry[gold_key], hardness=entry.get("hardness"),
            db_id=entry[db_key], split=split,
        ))
    if not tasks:
        raise EnvError(f"sql: {source} holds no tasks")
    return tasks
