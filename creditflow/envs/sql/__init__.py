"""InterCode-style SQL on SQLite: env, reward, sandbox, built-in task suite and Spider/InterCode loaders."""

from creditflow.envs.sql.env import SqlEnv, parse_action, render_result
from creditflow.envs.sql.reward import intercode_reward, kendall_tau_b
from creditflow.envs.sql.sandbox import QueryResult, SqlSandbox
from creditflow.envs.sql.spider import load_intercode_tasks, load_jsonl_tasks, load_spider_tasks
from creditflow.envs.sql.tasks import SqlTask, generate_tasks

__all__ = [
    "SqlEnv",
    "SqlSandbox",
    "SqlTask",
    "QueryResult",
    "generate_tasks",
    "intercode_reward",
    "kendall_tau_b",
    "load_intercode_tasks",
    "load_jsonl_tasks",
    "load_spider_tasks",
    "parse_action",
    "render_result",
]
