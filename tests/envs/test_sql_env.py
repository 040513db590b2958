"""SQL env: episodes, built-in suite, custom JSONL, Spider/InterCode loaders, determinism, snapshots."""

import json
import sqlite3

import pytest

from creditflow.envs import EnvError, check_determinism, make, replay
from creditflow.envs.sql import SqlEnv, generate_tasks, parse_action


@pytest.fixture(scope="module")
def env_factory(creditflow_cache):
    def factory(**kw):
        kw.setdefault("cache_dir", str(creditflow_cache))
        return SqlEnv(**kw)

    return factory


def test_parse_action():
    assert parse_action("submit") == ("submit", None)
    assert parse_action(" Submit[] ") == ("submit", None)
    assert parse_action("execute[SELECT a[1] FROM t]") == ("sql", "SELECT a[1] FROM t")
    assert parse_action("```sql\nSELECT 1\n```") == ("sql", "SELECT 1")
    assert parse_action("I will run ```SELECT 2```") == ("sql", "SELECT 2")
    assert parse_action("select name from t") == ("sql", "select name from t")
    assert parse_action("hello there") == ("invalid", None)
    assert parse_action("") == ("invalid", None)
    assert parse_action("execute[]") == ("invalid", None)
    assert parse_action(5) == parse_action(None) == parse_action(["submit"]) == ("invalid", None)


@pytest.mark.parametrize("options, needle", [({"time_limit": 0}, "time_limit must be in (0, 60]"),
                                             ({"time_limit": float("nan")}, "time_limit"),
                                             ({"row_cap": 10**7}, "row_cap must be in 1..100000"),
                                             ({"max_obs_rows": 0}, "max_obs_rows must be in 1..")])
def test_work_bounds_are_checked_when_made(options, needle):
    with pytest.raises(EnvError) as exc:
        make("sql", **options)
    assert needle in str(exc.value)


def test_generator_is_deterministic(creditflow_cache, tmp_path):
    a = generate_tasks(0, creditflow_cache)
    b = generate_tasks(0, tmp_path)  # rebuilt from scratch elsewhere
    assert [(t.task_id, t.question, t.gold_sql, t.split) for t in a] == \
        [(t.task_id, t.question, t.gold_sql, t.split) for t in b]
    dump = lambda t: list(sqlite3.connect(t.db_path).iterdump())  # noqa: E731
    assert dump(a[0]) == dump(b[0])
    hardness = {t.hardness for t in a}
    assert hardness == {"easy", "medium", "hard", "extra"}
    assert {t.db_id for t in a} == {"company", "school", "store"}
    train = [t for t in a if t.split == "train"]
    test = [t for t in a if t.split == "test"]
    assert train and test and not {t.task_id for t in train} & {t.task_id for t in test}
    assert {t.hardness for t in test} == hardness
    assert len({t.task_id for t in a}) == len(a)


@pytest.mark.parametrize("split", ["train", "test"])
def test_gold_then_submit_wins_every_task(env_factory, split):
    env = env_factory(split=split)
    for z in range(len(env)):
        obs, info = env.reset(seed=z)
        assert info["task"] in obs and "Tables:" in obs
        plan = env.expert_actions()
        assert plan[-1] == "submit"
        for action in plan:
            obs, reward, terminated, truncated, info = env.step(action)
        assert terminated and reward == 1.0 and info["won"] and info["score"] == 1.0, (info["task_id"], obs)


def test_episode_flow_and_state_keys(env_factory):
    env = env_factory()
    obs, info = env.reset(seed=5)
    start = info["state_key"]
    assert start.endswith("|start") and info["admissible_actions"] is None
    obs, r, term, trunc, info = env.step("nonsense words")
    assert not info["action_valid"] and info["state_key"] == start and r == 0.0
    obs, r, term, trunc, info = env.step("execute[SELECT nope FROM nowhere]")
    assert obs.startswith("Error executing query:") and info["state_key"].endswith("|error")
    gold = env.task.gold_sql
    obs, r, term, trunc, info = env.step(f"```sql\n{gold}\n```")
    key = info["state_key"]
    obs2, *_ , info2 = env.step(f"execute[{gold}]")
    assert info2["state_key"] == key and obs2 == obs  # same last result, same state
    assert env.expert_actions() == ["submit"]
    obs, r, term, trunc, info = env.step("submit")
    assert term and r == 1.0 and info["state_key"] == key + "|submitted"


def test_out_of_steps_grades_the_last_result(env_factory):
    env = env_factory(max_steps=2)
    env.reset(seed=0)
    env.step("execute[SELECT 1]")
    obs, r, term, trunc, info = env.step(f"execute[{env.task.gold_sql}]")
    assert term and r == 1.0 and info.get("auto_submitted")


def test_observation_is_compact(env_factory):
    env = env_factory(max_obs_rows=3)
    env.reset(seed=0)
    obs, *_ = env.step("execute[SELECT * FROM employees]")
    lines = obs.splitlines()
    assert lines[0].startswith("20 rows") and len(lines) == 5 and lines[-1] == "... 17 more rows not shown"
    obs, *_ = env.step("execute[SELECT name FROM employees WHERE 0]")
    assert obs == "0 rows (name)."
    obs, *_ = env.step("execute[PRAGMA table_info(missing_table)]")
    assert obs.startswith("0 rows")


def test_determinism_and_replay(env_factory):
    actions = ["execute[SELECT count(*) FROM employees]", "bad", "execute[SELECT name FROM departments]", "submit"]
    trace = check_determinism(lambda: env_factory(), seed=11, actions=actions)
    env = env_factory()
    obs = [t[1] for t in trace]
    res = replay(env, 11, actions[:3], obs)
    assert res.observation == obs[3]


def test_snapshot_restore_matches_replay(env_factory):
    env = env_factory()
    env.reset(seed=7)
    env.step("execute[SELECT name FROM employees]")
    snap = env.snapshot()
    after_obs, after_info = env.last_observation, env._info()
    env.step("execute[SELECT 1]")
    obs, info = env.restore(snap)
    assert obs == after_obs and info["state_key"] == after_info["state_key"]
    fresh = env_factory()
    res = replay(fresh, 7, ["execute[SELECT name FROM employees]"])
    assert res.observation == obs and res.info["state_key"] == info["state_key"]
    # both continue identically
    a = env.step(f"execute[{env.task.gold_sql}]")
    b = fresh.step(f"execute[{fresh.task.gold_sql}]")
    assert a[:4] == b[:4]


def test_custom_jsonl(tmp_path):
    db = tmp_path / "pets.sqlite"
    conn = sqlite3.connect(db)
    conn.executescript("CREATE TABLE pets(name TEXT, kind TEXT, age INTEGER);"
                       "INSERT INTO pets VALUES ('Rex','dog',3),('Tom','cat',5),('Kiwi','bird',1);")
    conn.commit()
    conn.close()
    tasks = tmp_path / "tasks.jsonl"
    lines = [
        {"db_path": "pets.sqlite", "question": "Names of all pets?", "gold_sql": "SELECT name FROM pets"},
        {"db_path": str(db), "question": "Oldest pet?", "gold_sql": "SELECT name FROM pets ORDER BY age DESC LIMIT 1",
         "split": "test", "id": "oldest"},
    ]
    tasks.write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    env = make("sql", tasks_file=str(tasks))
    assert len(env) == 1
    env.reset(seed=3)
    _, r, term, _, info = env.step("execute[SELECT name FROM pets ORDER BY name]")
    _, r, term, _, info = env.step("submit")
    assert term and r == -0.33  # right rows, other order: IoU 1, tau (1 - 2)/3
    test_env = make("sql", tasks_file=str(tasks), split="test")
    assert len(test_env) == 2
    test_env.reset(seed=1)
    assert test_env.task.task_id == "oldest"
    for a in test_env.expert_actions():
        *_, info = test_env.step(a)
    assert info["won"]
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"db_path": "pets.sqlite", "question": "q"}\n')
    with pytest.raises(EnvError, match=r"bad.jsonl:1: missing .*gold_sql"):
        make("sql", tasks_file=str(bad))
    bad.write_text("not json\n")
    with pytest.raises(EnvError, match=r"sql: .*bad.jsonl:1: invalid JSON"):
        make("sql", tasks_file=str(bad))


def _spider_fixture(root):
    (root / "database" / "zoo").mkdir(parents=True)
    conn = sqlite3.connect(root / "database" / "zoo" / "zoo.sqlite")
    conn.executescript("""
        CREATE TABLE keeper (keeper_id INTEGER PRIMARY KEY, name TEXT);
        CREATE TABLE animal (animal_id INTEGER PRIMARY KEY, name TEXT, species TEXT, keeper_id INTEGER);
        INSERT INTO keeper VALUES (1, 'Ann'), (2, 'Bo');
        INSERT INTO animal VALUES (1, 'Leo', 'lion', 1), (2, 'Ella', 'elephant', 2), (3, 'Lia', 'lion', 2);
    """)
    conn.commit()
    conn.close()
    (root / "tables.json").write_text(json.dumps([{
        "db_id": "zoo", "table_names_original": ["keeper", "animal"],
        "column_names_original": [[-1, "*"], [0, "keeper_id"], [0, "name"], [1, "animal_id"], [1, "name"],
                                  [1, "species"], [1, "keeper_id"]],
    }]))
    train = [
        {"db_id": "zoo", "question": "How many lions are there?", "query": "SELECT count(*) FROM animal WHERE species = 'lion'"},
        {"db_id": "zoo", "question": "Names of animals kept by Bo?",
         "query": "SELECT T1.name FROM animal AS T1 JOIN keeper AS T2 ON T1.keeper_id = T2.keeper_id WHERE T2.name = 'Bo'"},
    ]
    dev = [{"db_id": "zoo", "question": "List keeper names.", "query": "SELECT name FROM keeper"}]
    (root / "train_spider.json").write_text(json.dumps(train))
    (root / "dev.json").write_text(json.dumps(dev))
    ic = [{"db": "zoo", "gold": "SELECT species, count(*) FROM animal GROUP BY species",
           "query": "How many animals of each species?", "hardness": "medium", "db_tables": {}}]
    (root / "ic_spider_dev.json").write_text(json.dumps(ic))


def test_spider_and_intercode_loaders(tmp_path):
    _spider_fixture(tmp_path)
    train = make("sql", spider_dir=str(tmp_path))
    test = make("sql", spider_dir=str(tmp_path), split="test")
    assert len(train) == 2 and len(test) == 1
    for env in (train, test):
        for z in range(len(env)):
            obs, info = env.reset(seed=z)
            assert "animal(animal_id, name, species, keeper_id)" in obs or "keeper(" in obs
            for a in env.expert_actions():
                *_, info = env.step(a)
            assert info["won"]
    ic = make("sql", intercode_file=str(tmp_path / "ic_spider_dev.json"), database_dir=str(tmp_path / "database"))
    obs, info = ic.reset(seed=0)
    assert info["hardness"] == "medium"
    ic.step("execute[SELECT species, count(*) FROM animal GROUP BY species ORDER BY species DESC]")
    _, r, *_ = ic.step("submit")
    assert r == -1.0  # same rows, reversed order: tau = -1
    ic2 = make("sql", intercode_file=str(tmp_path / "ic_spider_dev.json"))  # database/ next to the file
    ic2.reset(seed=0)
    with pytest.raises(EnvError, match="database for 'zoo' not found"):
        (tmp_path / "database" / "zoo" / "zoo.sqlite").rename(tmp_path / "moved.sqlite")
        make("sql", spider_dir=str(tmp_path))


def test_option_errors(tmp_path):
    with pytest.raises(EnvError, match="split"):
        make("sql", split="dev")
    with pytest.raises(EnvError, match="at most one"):
        make("sql", tasks_file="a.jsonl", spider_dir="b")
    with pytest.raises(EnvError, match="not found"):
        make("sql", tasks_file=str(tmp_path / "missing.jsonl"))
    with pytest.raises(EnvError, match="not a directory"):
        make("sql", spider_dir=str(tmp_path / "nope"))


def test_pickle_roundtrip(env_factory):
    import pickle

    env = env_factory()
    env.reset(seed=2)
    env.step("execute[SELECT 1]")
    clone = pickle.loads(pickle.dumps(env))
    assert clone.step(f"execute[{clone.task.gold_sql}]")[:4] == env.step(f"execute[{env.task.gold_sql}]")[:4]


def test_engine_invalid_marker_is_never_executed():
    from creditflow.envs import INVALID_ACTION_PREFIX, make

    env = make("sql")
    env.reset(seed=0)
    obs, reward, term, trunc, info = env.step(INVALID_ACTION_PREFIX + "execute[SELECT 1]")
    assert info["action_valid"] is False and "Invalid action" in obs
