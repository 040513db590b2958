"""InterCode-SQL episodes on SQLite (``creditflow.envs.make("sql", ...)``).

An episode (as in InterCode-SQL): ``reset`` shows the question, optionally with the database schema
(InterCode's "handicap", ``show_schema=True``); each action is one SQL query, written as
``execute[<query>]``, in a ```` ```sql ```` fenced block, or as bare SQL, or the word ``submit``. A query's
observation is its result rows (at most ``max_obs_rows`` shown, the rest counted), ``None (no result
set)`` for a statement without one, or ``Error executing query: ...``. ``submit`` ends the episode and
grades the *last executed query's* result with :func:`intercode_reward`; the reward is also given when
the step budget (``max_steps``, 10 by default) runs out without a submit (``grade_on_truncation``).

``won`` ⇔ reward == 1; ``score`` = max(reward, 0). ``state_key`` = task id + what the grader would see
(``start``, ``none``, ``error`` or a digest of the rows; ``|submitted`` once graded), so two histories that leave the same last
result are the same state. Output text that holds no query is an invalid action (state unchanged).
"""

from __future__ import annotations

import hashlib
import re

from creditflow.envs.base import INVALID_ACTION_PREFIX, BaseTextEnv, EnvError
from creditflow.envs.sql.reward import intercode_reward
from creditflow.envs.sql.sandbox import QueryResult, SqlSandbox
from creditflow.envs.sql.spider import load_intercode_tasks, load_jsonl_tasks, load_spider_tasks
from creditflow.envs.sql.tasks import SqlTask, generate_tasks

_FENCE = re.compile(r"```[ \t]*(?:sql|sqlite)?[ \t]*\n?(.*?)```", re.DOTALL | re.IGNORECASE)
_EXECUTE = re.compile(r"execute\s*\[(.*)\]", re.DOTALL | re.IGNORECASE)
_SUBMIT = re.compile(r"^\s*submit\s*(\[\s*\])?\s*\.?\s*$", re.IGNORECASE)
_SQL_START = re.compile(
    r"^\s*(select|with|values|pragma|explain|insert|update|delete|replace|create|drop|alter|attach|detach|"
    r"vacuum|begin|commit|end|rollback|savepoint|release|analyze|reindex)\b", re.IGNORECASE)

MAX_TIME_LIMIT = 60.0  # seconds per query
MAX_ROW_CAP = 100_000  # rows fetched per query

INVALID_OBSERVATION = "Invalid action: write a SQL query as execute[<query>] (or in a ```sql block), or submit."


def parse_action(text: object) -> tuple[str, str | None]:
    """``("submit", None)``, ``("sql", query)`` or ``("invalid", None)`` (also for an action that is not text)."""
    # not text, or a response the engine could not parse (INVALID_ACTION_PREFIX): never run it
    if not isinstance(text, str) or text.startswith(INVALID_ACTION_PREFIX):
        return "invalid", None
    if _SUBMIT.match(text):
        return "submit", None
    m = _FENCE.search(text)
    if m and m.group(1).strip():
        return "sql", m.group(1).strip()
    m = _EXECUTE.search(text)
    if m and m.group(1).strip():
        return "sql", m.group(1).strip()
    if _SQL_START.match(text):
        return "sql", text.strip()
    return "invalid", None


def render_result(result: QueryResult, max_rows: int = 10, max_chars: int = 800, max_value_chars: int = 60) -> str:
    """Compact text of a query result; says how many rows were hidden."""
    if result.error is not None:
        text = f"Error executing query: {result.error}"
        return text if len(text) <= max_chars else text[: max_chars - 3] + "..."
    if result.rows is None:
        return "None (no result set)"
    rows = result.rows
    n = len(rows)
    head = f"{n}{'+' if result.truncated else ''} row{'s' if n != 1 else ''}"
    if result.columns:
        head += " (" + ", ".join(result.columns) + ")"
    lines = [head + (":" if n else ".")]
    used = len(lines[0])
    shown = 0
    for row in rows[:max_rows]:
        cells = []
        for v in row:
            s = repr(v)
            cells.append(s if len(s) <= max_value_chars else s[: max_value_chars - 4] + "...'")
        line = "(" + ", ".join(cells) + ("," if len(cells) == 1 else "") + ")"
        if used + len(line) + 1 > max_chars and shown:
            break
        lines.append(line)
        used += len(line) + 1
        shown += 1
    if shown < n:
        lines.append(f"... {n - shown} more row{'s' if n - shown != 1 else ''} not shown")
    if result.truncated:
        lines.append("(result cut at the row cap)")
    return "\n".join(lines)


class SqlEnv(BaseTextEnv):
    """InterCode-SQL on SQLite: built-in suite, custom JSONL, Spider or InterCode tasks."""

    name = "sql"

    def __init__(self, split: str = "train", tasks_file: str | None = None, spider_dir: str | None = None,
                 intercode_file: str | None = None, database_dir: str | None = None, show_schema: bool = True,
                 max_steps: int = 10, time_limit: float = 2.0, row_cap: int = 1000, max_obs_rows: int = 10,
                 max_obs_chars: int = 800, grade_on_truncation: bool = True, suite_seed: int = 0,
                 cache_dir: str | None = None):
        super().__init__(max_steps=max_steps)
        if split not in ("train", "test"):
            raise EnvError(f"sql: split must be 'train' or 'test', got {split!r}")
        if not 0 < time_limit <= MAX_TIME_LIMIT:  # also false for NaN
            raise EnvError(f"sql: time_limit must be in (0, {MAX_TIME_LIMIT:g}] seconds, got {time_limit!r}")
        for name, value, hi in (("row_cap", row_cap, MAX_ROW_CAP), ("max_obs_rows", max_obs_rows, MAX_ROW_CAP),
                                ("max_obs_chars", max_obs_chars, 100_000)):
            if not 1 <= value <= hi:
                raise EnvError(f"sql: {name} must be in 1..{hi}, got {value}")
        sources = [s for s in (tasks_file, spider_dir, intercode_file) if s]
        if len(sources) > 1:
            raise EnvError("sql: give at most one of tasks_file, spider_dir, intercode_file")
        if database_dir and not intercode_file:
            raise EnvError("sql: database_dir goes with intercode_file")
        self.split = split
        if tasks_file:
            tasks = [t for t in load_jsonl_tasks(tasks_file) if t.split in (None, split)]
        elif spider_dir:
            tasks = load_spider_tasks(spider_dir, split)
        elif intercode_file:
            tasks = load_intercode_tasks(intercode_file, database_dir)
        else:
            tasks = [t for t in generate_tasks(suite_seed, cache_dir) if t.split == split]
        if not tasks:
            raise EnvError(f"sql: no tasks in split {split!r}")
        self.tasks: list[SqlTask] = tasks
        self.show_schema = bool(show_schema)
        self.time_limit, self.row_cap = float(time_limit), int(row_cap)
        self.max_obs_rows, self.max_obs_chars = int(max_obs_rows), int(max_obs_chars)
        self.grade_on_truncation = bool(grade_on_truncation)
        self._sandboxes: dict[str, SqlSandbox] = {}
        self._gold: dict[str, object] = {}
        self.task: SqlTask | None = None
        self.task_index = 0
        self.last: QueryResult | None = None  # None: nothing executed yet (graded like "no result")
        self.last_observation = ""
        self._submitted = False

    # -- helpers --------------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self.tasks)

    @property
    def num_tasks(self) -> int:
        """The split's task pool: ``reset(seed=z)`` plays task ``z % num_tasks`` (evaluation splits use it)."""
        return len(self.tasks)

    def sandbox(self, db_path: str) -> SqlSandbox:
        box = self._sandboxes.get(db_path)
        if box is None:
            box = self._sandboxes[db_path] = SqlSandbox(db_path, time_limit=self.time_limit, row_cap=self.row_cap)
        return box

    def gold_result(self, task: SqlTask | None = None):
        """The gold query's graded result (rows); a failing gold query grades as [] (InterCode)."""
        task = task or self.task
        if task.task_id not in self._gold:
            res = self.sandbox(task.db_path).execute(task.gold_sql)
            self._gold[task.task_id] = res.rows if res.error is None and res.rows is not None else []
        return self._gold[task.task_id]

    def current_reward(self) -> float:
        graded = None if self.last is None else self.last.graded()
        return intercode_reward(graded, self.gold_result())

    def schema_text(self) -> str:
        schema = self.sandbox(self.task.db_path).schema()
        return "; ".join(f"{t}({', '.join(cols)})" for t, cols in schema.items())

    def _state_key(self) -> str:
        end = "|submitted" if self._submitted else ""
        if self.last is None:
            return f"{self.task.task_id}|start{end}"
        if self.last.kind != "rows":
            return f"{self.task.task_id}|{self.last.kind}{end}"
        digest = hashlib.sha1(repr(self.last.rows).encode()).hexdigest()[:12]
        return f"{self.task.task_id}|rows:{digest}{end}"

    def _info(self, valid: bool = True, reward: float | None = None) -> dict:
        won = reward is not None and reward == 1.0
        return {
            "task": self.task.question,
            "admissible_actions": None,
            "action_valid": valid,
            "won": won,
            "score": max(0.0, float(reward)) if reward is not None else 0.0,
            "state_key": self._state_key(),
            "task_id": self.task.task_id,
            "db_id": self.task.db_id,
            "hardness": self.task.hardness,
            "result_kind": "start" if self.last is None else self.last.kind,
        }

    def expert_actions(self) -> list[str]:
        """Gold query then submit (just submit when the last result already scores 1)."""
        assert self.task is not None, "call reset() first"
        if self.last is not None and self.current_reward() == 1.0:
            return ["submit"]
        return [f"execute[{self.task.gold_sql}]", "submit"]

    # -- protocol -------------------------------------------------------------------------------
    def _reset(self, seed, options):
        seed = 0 if seed is None else int(seed)
        self.task_index = seed % len(self.tasks)
        self.task = self.tasks[self.task_index]
        self.last = None
        self._submitted = False
        obs = f"Question: {self.task.question}"
        if self.show_schema:
            obs += f"\nTables: {self.schema_text()}"
        self.last_observation = obs
        return obs, self._info()

    def _step(self, action):
        assert self.task is not None, "call reset() first"
        kind, query = parse_action(action)
        if kind == "submit":
            reward = self.current_reward()
            self._submitted = True
            obs = f"Submitted. Reward: {reward:g}"
            self.last_observation = obs
            return obs, reward, True, self._info(reward=reward)
        if kind == "invalid":
            return INVALID_OBSERVATION, 0.0, False, self._info(valid=False)
        self.last = self.sandbox(self.task.db_path).execute(query)
        obs = render_result(self.last, self.max_obs_rows, self.max_obs_chars)
        self.last_observation = obs
        if self.grade_on_truncation and self.steps_taken + 1 >= self.max_steps:
            reward = self.current_reward()
            self._submitted = True
            info = self._info(reward=reward)
            info["auto_submitted"] = True
            return obs + f"\nOut of steps: last result graded. Reward: {reward:g}", reward, True, info
        return obs, 0.0, False, self._info()

    def snapshot(self) -> dict:
        last = None if self.last is None else (
            None if self.last.rows is None else list(self.last.rows), list(self.last.columns), self.last.error,
            self.last.truncated)
        return {"seed": self.seed, "task_index": self.task_index, "last": last, "steps_taken": self.steps_taken,
                "done": self._done, "observation": self.last_observation, "submitted": self._submitted}

    def restore(self, snap: dict) -> tuple[str, dict]:
        if self.task is None or self.seed != snap["seed"] or self.task_index != snap["task_index"]:
            self.reset(seed=snap["seed"])
        if snap["last"] is None:
            self.last = None
        else:
            rows, columns, error, truncated = snap["last"]
            self.last = QueryResult(rows=None if rows is None else list(rows), columns=list(columns),
                                    error=error, truncated=truncated)
        self.steps_taken, self._done = snap["steps_taken"], snap["done"]
        self._submitted = snap["submitted"]
        self.last_observation = snap["observation"]
        return self.last_observation, self._fill(self._info())

    def __getstate__(self) -> dict:
        """Picklable (for process pools): connections are dropped and reopened on demand."""
        state = dict(self.__dict__)
        state["_sandboxes"] = {}
        return state

    def close(self) -> None:
        for box in self._sandboxes.values():
            box.close()
        self._sandboxes.clear()
