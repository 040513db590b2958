"""Preference data for DPO: TRL's conversational preference format, written resumably, with accounting.

A collection directory holds

| file | what |
|---|---|
| ``preferences.jsonl`` | one pair per line: ``prompt`` (the agent's chat messages at that step), ``chosen`` / ``rejected`` (one assistant message each: the sampled response), plus metadata columns (task, step, rewards) |
| ``tasks.jsonl`` | one accounting record per finished task (steps, candidates sampled, pairs, rollouts, tokens, seconds) |
| ``trajectories.jsonl`` | the explored trajectory of each finished task (the chosen candidates), in the trajectory schema (``creditflow credit`` / ``graph`` read it) |
| ``summary.json`` | the collection settings and the totals over finished tasks (``samples_per_step``, ``steps``, ``pairs``, ``rollouts``, ...) |
| ``README.md`` | dataset card (Hugging Face style front matter + the accounting table) |

Resumability: a task's pairs and trajectory are appended and flushed (fsync) first, then its accounting
record; the summary and card are rewritten atomically after every task. Reopening a directory keeps the
tasks that have a record, drops any pair or trajectory lines of a task without one (the task in flight
at a crash) and any torn last line, and refuses settings that differ from the stored ones (other than the task count).
"""

from __future__ import annotations

import json
from pathlib import Path

from creditflow.atomic import write_atomic
from creditflow.errors import UserError
from creditflow.jsonl import AppendLog, iter_json_lines

PAIRS = "preferences.jsonl"
TASKS = "tasks.jsonl"
TRAJECTORIES = "trajectories.jsonl"
SUMMARY = "summary.json"
CARD = "README.md"
TRL_COLUMNS = ("prompt", "chosen", "rejected")
# settings that may change between a crash and the restart without changing the data
RESUMABLE_SETTINGS = ("tasks", "executor", "ray_address", "ray_workers", "out_dir")
HEADLINE = ("samples_per_step", "steps", "pairs", "rollouts", "generated_tokens", "wall_seconds", "tasks")


def preference_record(prompt: list[dict], chosen: str, rejected: str, **meta) -> dict:
    """One TRL conversational preference example (``prompt`` + ``chosen`` / ``rejected`` assistant turns)."""
    return {"prompt": prompt, "chosen": [{"role": "assistant", "content": chosen}],
            "rejected": [{"role": "assistant", "content": rejected}], **meta}


def _log(path: Path) -> AppendLog:
    """A collection's JSONL file as an append-log: non-ASCII kept as is, read leniently (a line that does not
    parse is left out, as a torn last line is)."""
    return AppendLog(path, ensure_ascii=False)


def _keep_finished(path: Path, finished: set[str]) -> list[dict]:
    """Drop the rows of unfinished tasks (the one in flight at a crash) and a torn last line."""
    return _log(path).keep(lambda row: row.get("task_id") in finished)


def _append(path: Path, rows: list[dict]) -> None:
    _log(path).append(rows)


def aggregate(records: list[dict]) -> dict:
    """Totals over per-task accounting records; ``samples_per_step`` = candidates sampled / steps (the
    paper's "# samples", Table 1)."""
    def total(key):
        return sum(r.get(key, 0) for r in records)

    steps, samples = total("steps"), total("samples")
    ok = [r for r in records if not r.get("failed")]
    return {
        "tasks": len(records),
        "failed_tasks": len(records) - len(ok),
        "steps": steps,
        "samples": samples,
        "samples_per_step": samples / steps if steps else 0.0,
        "pairs": total("pairs"),
        "omitted_no_rising": total("omitted_no_rising"),
        "omitted_no_contrast": total("omitted_no_contrast"),
        "invalid_candidates": total("invalid_candidates"),
        "rollouts": total("rollouts"),
        "mc_queries": total("mc_queries"),
        "mc_cache_hits": total("mc_cache_hits"),
        "terminal_prefixes": total("terminal_prefixes"),
        "generated_tokens": total("candidate_tokens") + total("rollout_tokens"),
        "candidate_tokens": total("candidate_tokens"),
        "rollout_tokens": total("rollout_tokens"),
        "env_steps": total("env_steps"),
        "wall_seconds": round(sum(r.get("seconds", 0.0) for r in records), 3),
        "trajectory_success_rate": (sum(bool(r.get("success")) for r in ok) / len(ok)) if ok else 0.0,
        "trajectory_score": (sum(r.get("score", 0.0) for r in ok) / len(ok)) if ok else 0.0,
    }


def _card(summary: dict) -> str:
    s = summary["settings"]
    t = summary["totals"]
    rows = [("samples per step (# samples)", f"{t['samples_per_step']:.3f}"), ("steps", t["steps"]),
            ("candidates sampled", t["samples"]), ("preference pairs", t["pairs"]),
            ("steps omitted: no rising candidate", t["omitted_no_rising"]),
            ("steps without contrast (one candidate / equal rewards)", t["omitted_no_contrast"]),
            ("invalid candidates (invalid actions)", t.get("invalid_candidates", 0)),
            ("MC rollouts", t["rollouts"]), ("generated tokens", t["generated_tokens"]),
            ("env steps", t["env_steps"]), ("wall seconds", t["wall_seconds"]), ("tasks", t["tasks"]),
            ("failed tasks (prefix not restorable)", t["failed_tasks"])]
    lines = [
        "---",
        "configs:",
        "- config_name: default",
        f"  data_files: {PAIRS}",
        "tags: [dpo, preference, process-supervision, rro, creditflow]",
        "---",
        "",
        f"# Process-supervised preference data ({s.get('exploration')} exploration)",
        "",
        "Collected by `creditflow rro collect` (RRO, arXiv 2505.20737). TRL conversational preference "
        "format: `prompt` = the agent's messages at the step, `chosen` / `rejected` = the highest / lowest "
        "process-reward candidate response (r_PRM = mean final score of "
        f"{s.get('mc_rollouts')} Monte-Carlo rollouts).",
        "",
        "| accounting | value |",
        "|---|---|",
        *[f"| {k} | {v} |" for k, v in rows],
        "",
        "Settings:",
        "",
        "```json",
        json.dumps(s, indent=2, sort_keys=True),
        "```",
        "",
    ]
    return "\n".join(lines)


def check_collection(directory: str | Path, settings: dict) -> None:
    """A one-line UserError when ``directory`` cannot take a collection with ``settings``: it is a file, or
    it holds a collection made with other settings (resumable settings aside). Writes nothing."""
    d = Path(directory)
    if d.exists() and not d.is_dir():
        raise UserError(f"preference data dir {str(d)!r} is a file, not a directory")
    if not (d / TASKS).exists() and not (d / PAIRS).exists():
        return
    stored = {}
    if (d / SUMMARY).exists():
        try:
            stored = json.loads((d / SUMMARY).read_text(encoding="utf-8")).get("settings", {})
        except (ValueError, AttributeError):
            stored = {}
    diff = sorted(k for k in set(stored) | set(settings)
                  if stored and k not in RESUMABLE_SETTINGS and stored.get(k) != settings.get(k))
    if diff:
        k = diff[0]
        raise UserError(f"{d} holds a collection with other settings ({k}: {stored.get(k)!r} there, "
                        f"{settings.get(k)!r} now); use another output directory")


class PreferenceWriter:
    """Appends finished tasks to a collection directory and keeps its summary/card current."""

    def __init__(self, directory: str | Path, settings: dict):
        self.dir = Path(directory)
        check_collection(self.dir, settings)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.settings = dict(settings)
        self.records: list[dict] = []
        self.pairs = 0
        self.resumed = False
        self._open()
        if not self.resumed:  # settings on disk before the first task, for the check at a restart
            (self.dir / PAIRS).touch()  # an empty collection is still a (loadable) dataset
            self.write_summary()

    @property
    def pairs_path(self) -> Path:
        return self.dir / PAIRS

    def _open(self) -> None:
        tasks_path, pairs_path = self.dir / TASKS, self.dir / PAIRS
        if not tasks_path.exists() and not pairs_path.exists():
            return
        records, torn = _log(tasks_path).read()
        seen: set[str] = set()
        for r in records:
            if r.get("task_id") not in seen:
                seen.add(r.get("task_id"))
                self.records.append(r)
        if torn:
            _log(tasks_path).rewrite(self.records)
        self.pairs = len(_keep_finished(pairs_path, seen))
        _keep_finished(self.dir / TRAJECTORIES, seen)
        self.resumed = True

    def done(self, task_id: str) -> bool:
        return any(r.get("task_id") == task_id for r in self.records)

    @property
    def finished(self) -> set[str]:
        return {r["task_id"] for r in self.records}

    def add_task(self, pairs: list[dict], record: dict, trajectory: dict | None = None) -> None:
        """Append one finished task: its pairs and explored trajectory (a JSONL-schema dict), then its
        accounting record; then refresh summary/card."""
        task_id = record["task_id"]
        if any(p.get("task_id") != task_id for p in pairs):
            raise ValueError("every pair of a task must carry its task_id")
        if trajectory is not None and trajectory.get("task_id") != task_id:
            raise ValueError("a task's trajectory must carry its task_id")
        _append(self.dir / PAIRS, pairs)
        _append(self.dir / TRAJECTORIES, [trajectory] if trajectory is not None else [])
        _append(self.dir / TASKS, [record])
        self.records.append(record)
        self.pairs += len(pairs)
        self.write_summary()

    def summary(self) -> dict:
        """Headline numbers at the top level, all totals under ``totals``, the settings."""
        totals = aggregate(self.records)
        return {**{k: totals[k] for k in HEADLINE}, "totals": totals, "settings": self.settings}

    def write_summary(self) -> dict:
        summary = self.summary()
        write_atomic(self.dir / SUMMARY, json.dumps(summary, indent=2) + "\n")
        write_atomic(self.dir / CARD, _card(summary))
        return summary


ROLES = ("system", "user", "assistant", "tool")


def read_preferences(path: str | Path) -> list[dict]:
    """The pairs of a collection (directory or ``preferences.jsonl``), checked as TRL's DPO reads them; any
    problem is one UserError naming ``file:line``: a line that is not a JSON object, a missing column, a
    ``prompt`` / ``chosen`` / ``rejected`` that is neither text (the standard format) nor a non-empty list of
    ``{"role", "content"}`` messages (the conversational one), a row whose format differs from the first
    row's, or metadata of the wrong type (``chosen_valid`` a bool, ``step`` an integer, ``task_id`` a
    string)."""
    p = Path(path)
    if p.is_dir():
        p = p / PAIRS
    if not p.exists():
        raise UserError(f"no preference data at {str(p)!r}")
    out: list[dict] = []
    first: tuple[str, str] | None = None  # (format, where) of the first row
    for where, row in iter_json_lines(p, UserError):
        if not isinstance(row, dict):
            raise UserError(f"{where}: expected a JSON object, got {type(row).__name__}")
        missing = [c for c in TRL_COLUMNS if c not in row]
        if missing:
            raise UserError(f"{where}: missing {', '.join(missing)}")
        kinds = {column: _pair_part(row[column], column, where) for column in TRL_COLUMNS}
        if len(set(kinds.values())) > 1:
            raise UserError(f"{where}: prompt is {_FORMATS[kinds['prompt']]} but "
                            + ", ".join(f"{c} is {_FORMATS[k]}" for c, k in kinds.items() if k != kinds["prompt"])
                            + "; a pair is all text or all messages")
        kind = kinds["prompt"]
        if first is None:
            first = (kind, where)
        elif kind != first[0]:
            raise UserError(f"{where}: a pair of {_FORMATS[kind]}, but {first[1]} holds {_FORMATS[first[0]]}; "
                            "every pair of a data set has one format")
        for key, typ, expects in (("chosen_valid", bool, "true or false"), ("step", int, "an integer"),
                                  ("task_id", str, "a string")):
            value = row.get(key)
            if value is not None and (not isinstance(value, typ) or (typ is int and isinstance(value, bool))):
                raise UserError(f"{where}: {key} must be {expects}, got {value!r}")
        out.append(row)
    return out


_FORMATS = {"text": "text", "messages": "a list of messages"}


def _pair_part(value, column: str, where: str) -> str:
    """``"text"`` or ``"messages"``: the format of one column of a pair, or a UserError saying what is wrong."""
    if isinstance(value, str):
        if not value.strip():
            raise UserError(f"{where}: {column} is empty")
        return "text"
    if not isinstance(value, list) or not value:
        shown = "an empty list" if value == [] else type(value).__name__
        raise UserError(f"{where}: {column} must be text or a non-empty list of messages, got {shown}")
    for i, message in enumerate(value):
        if not isinstance(message, dict):
            raise UserError(f"{where}: {column}[{i}] must be a message object, got {type(message).__name__}")
        role, content = message.get("role"), message.get("content")
        if role not in ROLES:
            raise UserError(f"{where}: {column}[{i}]: role must be one of {', '.join(ROLES)}, got {role!r}")
        if not isinstance(content, str):
            raise UserError(f"{where}: {column}[{i}]: content must be text, got {type(content).__name__}")
    if column != "prompt" and value[-1]["role"] != "assistant":
        raise UserError(f"{where}: {column} must end with an assistant message, got role {value[-1]['role']!r}")
    return "messages"


def chosen_valid(path: str | Path, pairs: list[dict]) -> list[bool]:
    """Whether each pair's chosen action was a valid action: the pair's ``chosen_valid`` column, or, for pairs
    written before that column existed, the ``valid`` flag of the explored trajectory's step in the
    collection's ``trajectories.jsonl`` (the trajectory continues with the chosen action)."""
    if all("chosen_valid" in p for p in pairs):
        return [bool(p["chosen_valid"]) for p in pairs]
    p = Path(path)
    traj_path = (p if p.is_dir() else p.parent) / TRAJECTORIES
    if not traj_path.exists():
        raise UserError(f"{traj_path}: not found; pairs without a chosen_valid column need the collection's "
                        "explored trajectories to tell whether the chosen action was valid")
    valid: dict[tuple[str, int], bool] = {}
    for traj in _log(traj_path).read()[0]:
        for i, step in enumerate(traj.get("steps", [])):
            valid[(traj.get("task_id"), i + 1)] = bool(step.get("valid", True))
    out = []
    for n, pair in enumerate(pairs, start=1):
        if "chosen_valid" in pair:
            out.append(bool(pair["chosen_valid"]))
            continue
        key = (pair.get("task_id"), pair.get("step"))
        if key not in valid:
            raise UserError(f"{traj_path}: no step {key[1]} of task {key[0]!r} for pair {n} (no chosen_valid column)")
        out.append(valid[key])
    return out
