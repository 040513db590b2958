"""The sandbox keeps the task database byte-identical whatever the agent sends."""

import hashlib
import os

import pytest

from creditflow.envs.sql import SqlEnv, SqlSandbox
from creditflow.envs.sql.tasks import build_database


def _hostile(tmp):
    return [
        "DROP TABLE employees",
        "DROP TABLE IF EXISTS employees",
        "DELETE FROM employees",
        "UPDATE employees SET salary = 0",
        "INSERT INTO employees VALUES (99, 'x', 1, 'y', 1, 2000)",
        "REPLACE INTO employees VALUES (1, 'x', 1, 'y', 1, 2000)",
        "CREATE TABLE t (x)",
        "CREATE TEMP TABLE t (x)",
        "CREATE VIEW v AS SELECT 1",
        "CREATE INDEX i ON employees (name)",
        "CREATE TRIGGER tr AFTER INSERT ON employees BEGIN DELETE FROM employees; END",
        "CREATE VIRTUAL TABLE vt USING fts5(a)",
        "ALTER TABLE employees ADD COLUMN z INTEGER",
        "ALTER TABLE employees RENAME TO staff",
        f"ATTACH DATABASE '{tmp / 'other.db'}' AS other",
        "ATTACH DATABASE ':memory:' AS mem",
        "DETACH DATABASE main",
        "VACUUM",
        f"VACUUM INTO '{tmp / 'copy.db'}'",
        "PRAGMA journal_mode = WAL",
        "PRAGMA writable_schema = 1",
        "PRAGMA user_version = 7",
        "PRAGMA query_only = 0",
        "PRAGMA foreign_keys = OFF",
        "PRAGMA database_list",
        "UPDATE sqlite_master SET sql = ''",
        "INSERT INTO sqlite_master VALUES ('table', 'x', 'x', 0, '')",
        "SELECT load_extension('/tmp/evil.so')",
        "SELECT fts3_tokenizer('simple')",
        f"SELECT writefile('{tmp / 'w.txt'}', 'x')",
        "SELECT readfile('/etc/passwd')",
        "SELECT randomblob(2000000000)",
        "SELECT zeroblob(2000000000)",
        "SELECT random()",
        "BEGIN",
        "BEGIN IMMEDIATE",
        "COMMIT",
        "ROLLBACK",
        "SAVEPOINT s",
        "ANALYZE",
        "REINDEX",
        "SELECT 1; DROP TABLE employees",
        "WITH RECURSIVE r(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM r) SELECT count(*) FROM r",
        "SELECT count(*) FROM employees a, employees b, employees c, employees d, employees e, employees f, employees g",
        "SELECT 'x' || (SELECT group_concat(hex(zeroblob(100000))) FROM employees a, employees b)",
    ]


def _digest(path):
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_hostile_queries_change_nothing(tmp_path):
    db = build_database("company", 0, tmp_path / "company.sqlite")
    before = _digest(db)
    files_before = sorted(os.listdir(tmp_path))
    box = SqlSandbox(db, time_limit=0.3)
    for sql in _hostile(tmp_path):
        res = box.execute(sql)
        assert res.error is not None, f"not refused: {sql!r} -> {res.rows!r}"
    # legitimate reads still work afterwards
    assert box.execute("SELECT count(*) FROM employees").rows == [(20,)]
    assert box.execute("PRAGMA table_info(employees)").rows
    box.close()
    assert _digest(db) == before
    assert sorted(os.listdir(tmp_path)) == files_before  # no journal, WAL, copy or attached file


def test_hostile_queries_through_the_env(tmp_path):
    db = build_database("company", 0, tmp_path / "company.sqlite")
    before = _digest(db)
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text('{"db_path": "company.sqlite", "question": "How many employees?", '
                     '"gold_sql": "SELECT count(*) FROM employees"}\n')
    env = SqlEnv(tasks_file=str(tasks), time_limit=0.3, max_steps=100)
    env.reset(seed=0)
    for sql in _hostile(tmp_path):
        obs, reward, terminated, truncated, info = env.step(f"execute[{sql}]")
        assert obs.startswith("Error executing query:"), (sql, obs)
        assert not terminated and info["result_kind"] == "error"
    obs, reward, terminated, _, info = env.step("submit")
    assert reward == 0.0 and terminated  # the last result was an error
    env.close()
    assert _digest(db) == before


def test_time_limit_and_row_cap(tmp_path):
    db = build_database("company", 0, tmp_path / "company.sqlite")
    box = SqlSandbox(db, time_limit=0.2, row_cap=7)
    res = box.execute("WITH RECURSIVE r(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM r) SELECT i FROM r ORDER BY i DESC")
    assert res.error is not None and "time limit" in res.error
    res = box.execute("SELECT emp_id FROM employees")
    assert res.truncated and len(res.rows) == 7


def test_missing_or_bad_database(tmp_path):
    from creditflow.envs import EnvError

    with pytest.raises(EnvError, match="not found"):
        SqlSandbox(tmp_path / "nope.sqlite")
    bad = tmp_path / "bad.sqlite"
    bad.write_text("this is not a database " * 100)
    with pytest.raises(EnvError, match="cannot open"):
        SqlSandbox(bad)


def test_keyword_guard_sees_through_comments(tmp_path):
    db = build_database("company", 0, tmp_path / "company.sqlite")
    box = SqlSandbox(db)
    assert box.execute("/* hi */ -- note\n  SELECT 1").rows == [(1,)]
    assert box.execute("/* hi */ DELETE FROM employees").error
    assert box.execute("WITH x AS (SELECT 1) DELETE FROM employees").error  # authorizer layer
    assert box.execute("EXPLAIN DELETE FROM employees").error
    assert box.execute("").error and box.execute("   ").error
