"""A read-only SQLite sandbox for the agent's SQL.

Layers, each enough on its own for the common attacks, together closing the rest:

* the database is opened through a ``file:...?mode=ro`` URI (SQLite refuses every write to the file) and
  ``PRAGMA query_only`` is switched on;
* an **allow-list authorizer**: only reading (``SELECT``, column reads, ``WITH RECURSIVE``), ordinary
  functions and a few introspection pragmas (``table_info``, ``index_list``, ...) are authorized. Writes,
  DDL, ``ATTACH``/``DETACH`` (which also stops ``VACUUM INTO``, a file write that a read-only connection
  would otherwise allow), transactions, savepoints, state-changing pragmas and the functions
  ``load_extension``, ``fts3_tokenizer``, ``random``/``randomblob`` (kept out so replay is exact) are
  denied;
* extension loading is disabled on the connection, ``SQLITE_LIMIT_ATTACHED`` is 0 and string/blob length
  is capped (``max_value_bytes``);
* a **progress handler** aborts any statement running longer than ``time_limit`` seconds, and at most
  ``row_cap`` rows are fetched (the result says it was cut);
* a statement must start with ``SELECT``, ``WITH``, ``VALUES``, ``PRAGMA`` or ``EXPLAIN`` (this also
  refuses statements that the authorizer never sees, such as ``REINDEX`` on a database without indexes);
* one statement per call (``cursor.execute``); every failure becomes an error *result*, never an
  exception.
"""

from __future__ import annotations

import os
import re
import sqlite3
import time
from dataclasses import dataclass, field
from pathlib import Path

from creditflow.envs.base import EnvError

__all__ = ["SqlSandbox", "QueryResult", "READ_ONLY_PRAGMAS", "DENIED_FUNCTIONS"]

READ_ONLY_PRAGMAS = frozenset({
    "table_info", "table_xinfo", "table_list", "index_list", "index_info", "index_xinfo",
    "foreign_key_list", "collation_list", "function_list",
})
DENIED_FUNCTIONS = frozenset({
    "load_extension", "fts3_tokenizer", "random", "randomblob", "readfile", "writefile", "edit",
    "sqlite_dbpage",
})
READ_KEYWORDS = ("select", "with", "values", "pragma", "explain")
_LEADING_NOISE = re.compile(r"^(?:\s+|--[^\n]*(?:\n|$)|/\*.*?\*/)+", re.DOTALL)
_ALLOWED_CODES = frozenset({sqlite3.SQLITE_SELECT, sqlite3.SQLITE_READ, sqlite3.SQLITE_RECURSIVE})


@dataclass
class QueryResult:
    """Outcome of one statement: ``rows`` (a result set), ``None`` rows with ``error=None`` (a statement
    without a result set), or ``error`` (the message)."""

    rows: list[tuple] | None = None
    columns: list[str] = field(default_factory=list)
    error: str | None = None
    truncated: bool = False  # more than row_cap rows: only the first row_cap are kept

    @property
    def kind(self) -> str:
        if self.error is not None:
            return "error"
        return "none" if self.rows is None else "rows"

    def graded(self):
        """What the reward sees: the row list, ``None`` for no result set, the error text for an error."""
        if self.error is not None:
            return f"Error executing query: {self.error}"
        return self.rows


def _authorizer(code: int, arg1, arg2, db_name, trigger):
    if code in _ALLOWED_CODES:
        return sqlite3.SQLITE_OK
    if code == sqlite3.SQLITE_FUNCTION:
        return sqlite3.SQLITE_DENY if (arg2 or "").lower() in DENIED_FUNCTIONS else sqlite3.SQLITE_OK
    if code == sqlite3.SQLITE_PRAGMA:
        return sqlite3.SQLITE_OK if (arg1 or "").lower() in READ_ONLY_PRAGMAS else sqlite3.SQLITE_DENY
    return sqlite3.SQLITE_DENY


class SqlSandbox:
    """A read-only, time- and size-limited connection to one SQLite database file."""

    def __init__(self, db_path: str | os.PathLike, *, time_limit: float = 2.0, row_cap: int = 1000,
                 max_value_bytes: int = 1_000_000):
        path = Path(db_path).expanduser()
        if not path.is_file():
            raise EnvError(f"sql: database file not found: {path}")
        self.path = path.resolve()
        self.time_limit = float(time_limit)
        self.row_cap = int(row_cap)
        if self.time_limit <= 0 or self.row_cap < 1:
            raise EnvError(f"sql: time_limit must be > 0 and row_cap >= 1 (got {time_limit}, {row_cap})")
        try:
            conn = sqlite3.connect(self.path.as_uri() + "?mode=ro", uri=True, check_same_thread=False,
                                   isolation_level=None)
            conn.execute("PRAGMA query_only = 1")
            conn.execute("PRAGMA temp_store = MEMORY")
            conn.execute("SELECT count(*) FROM sqlite_master").fetchall()  # fails early on a non-database
        except sqlite3.DatabaseError as exc:
            raise EnvError(f"sql: cannot open {self.path} as a SQLite database: {exc}") from None
        if hasattr(conn, "enable_load_extension"):  # absent when Python was built without it
            conn.enable_load_extension(False)
        conn.setlimit(sqlite3.SQLITE_LIMIT_ATTACHED, 0)
        conn.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, int(max_value_bytes))
        conn.setlimit(sqlite3.SQLITE_LIMIT_SQL_LENGTH, 100_000)
        conn.set_authorizer(_authorizer)
        self._deadline = 0.0
        conn.set_progress_handler(self._over_time, 1000)
        self.conn = conn

    def _over_time(self) -> int:
        return 1 if time.monotonic() > self._deadline else 0

    def execute(self, sql: str) -> QueryResult:
        """Run one statement; errors (syntax, denied, time limit, ...) come back as ``error``."""
        head = _LEADING_NOISE.sub("", sql or "", count=1)
        first = head.split(None, 1)[0].lower().rstrip(";(") if head.strip() else ""
        if first not in READ_KEYWORDS:
            return QueryResult(error="not authorized: only read-only queries (SELECT, WITH, VALUES, PRAGMA, "
                                     "EXPLAIN) are allowed")
        self._deadline = time.monotonic() + self.time_limit
        cur = self.conn.cursor()
        try:
            cur.execute(sql)
            if cur.description is None:
                return QueryResult(rows=None)
            columns = [d[0] for d in cur.description]
            rows = cur.fetchmany(self.row_cap + 1)
            truncated = len(rows) > self.row_cap
            return QueryResult(rows=[tuple(r) for r in rows[: self.row_cap]], columns=columns,
                               truncated=truncated)
        except sqlite3.OperationalError as exc:
            msg = str(exc)
            if msg == "interrupted":
                msg = f"query interrupted: time limit of {self.time_limit:g} s exceeded"
            return QueryResult(error=msg)
        except (sqlite3.Error, sqlite3.Warning, ValueError, OverflowError, MemoryError) as exc:
            return QueryResult(error=str(exc) or type(exc).__name__)
        finally:
            try:
                cur.close()
            except sqlite3.Error:
                pass
            if self.conn.in_transaction:  # never expected (BEGIN is denied); be safe
                self.conn.rollback()

    def schema(self) -> dict[str, list[str]]:
        """``{table: [columns]}`` of the user tables, in creation order."""
        self._deadline = time.monotonic() + self.time_limit
        tables = [r[0] for r in self.conn.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' ORDER BY rowid")]
        out = {}
        for t in tables:
            quoted = '"' + t.replace('"', '""') + '"'
            out[t] = [r[1] for r in self.conn.execute(f"PRAGMA table_info({quoted})")]
        return out

    def close(self) -> None:
        try:
            self.conn.close()
        except sqlite3.Error:
            pass

    def __del__(self):  # pragma: no cover - best effort
        conn = getattr(self, "conn", None)
        if conn is not None:
            try:
                conn.close()
            except Exception:
                pass
