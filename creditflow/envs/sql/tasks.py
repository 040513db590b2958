"""Built-in SQL task suite: seeded relational databases and templated questions with gold SQL.

Three databases (``company``, ``school``, ``store``), each a handful of small tables filled from a
``random.Random(seed)``: values in ordered columns are unique so that ``ORDER BY ... LIMIT`` questions
have one right answer, and some parent rows have no children so that ``NOT IN`` questions are not empty.

Questions come from templates grouped by InterCode/Spider hardness, following the issue's mapping:

* ``easy``   select / filter / one aggregate
* ``medium`` join, order by / limit
* ``hard``   group by / having (also joined)
* ``extra``  nested queries and set operations (``UNION``, ``EXCEPT``)

Every emitted task is checked against its database: the gold query runs and returns between 1 and
``MAX_GOLD_ROWS`` rows. The split is per instantiation: tasks are ordered deterministically and every
fifth task of each hardness is held out (``split="test"``).
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import sqlite3
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

GENERATOR_VERSION = "1"
MAX_GOLD_ROWS = 30
HARDNESS = ("easy", "medium", "hard", "extra")


@dataclass(frozen=True)
class SqlTask:
    """One question over one SQLite database."""

    task_id: str
    db_path: str
    question: str
    gold_sql: str
    hardness: str | None = None
    db_id: str = ""
    split: str | None = None

    def to_json(self) -> dict:
        return asdict(self)


# ------------------------------------------------------------------------------------------------
# databases
# ------------------------------------------------------------------------------------------------

_FIRST = ["Alice", "Bruno", "Chen", "Dana", "Elif", "Farah", "Goran", "Hana", "Ivan", "Jonas", "Kemi",
          "Lena", "Mateo", "Nadia", "Omar", "Priya", "Quinn", "Rosa", "Sven", "Tara", "Uma", "Viktor",
          "Wen", "Ximena", "Yusuf", "Zoe", "Amir", "Bea", "Carlos", "Dmitri", "Eva", "Felix"]
_LAST = ["Ng", "Silva", "Khan", "Meyer", "Rossi", "Sato", "Novak", "Haddad", "Okafor", "Larsen",
         "Moreau", "Kowalski", "Fischer", "Alvarez", "Dubois", "Ito"]
_CITIES = ["Lyon", "Porto", "Oslo", "Turin", "Krakow", "Ghent", "Leeds", "Graz"]
_DEPTS = ["Engineering", "Sales", "Marketing", "Finance", "Support", "Research", "Legal", "Operations"]
_TITLES = ["Engineer", "Manager", "Analyst", "Clerk", "Director"]
_PROJECTS = ["Apollo", "Beacon", "Cobalt", "Delta", "Ember", "Falcon", "Granite", "Harbor", "Iris",
             "Juniper", "Kestrel", "Lumen"]
_SUBJECTS = ["Math", "Physics", "History", "Biology", "Art", "Chemistry"]
_COURSE_WORDS = ["Intro to", "Advanced", "Topics in", "Applied", "Foundations of"]
_CATEGORIES = ["Books", "Games", "Garden", "Kitchen", "Sports", "Toys"]
_PRODUCTS = ["Atlas", "Breeze", "Canvas", "Dynamo", "Echo", "Flint", "Glide", "Halo", "Ionic",
             "Jolt", "Karma", "Lotus", "Mosaic", "Nimbus"]


def _people(rng: random.Random, n: int) -> list[str]:
    names = [f"{f} {l}" for f in _FIRST for l in _LAST]
    return rng.sample(names, n)


def _unique_ints(rng: random.Random, n: int, low: int, high: int, step: int = 1) -> list[int]:
    return rng.sample(range(low, high + 1, step), n)


def _build_company(conn: sqlite3.Connection, rng: random.Random) -> None:
    conn.executescript("""
        CREATE TABLE departments (dept_id INTEGER PRIMARY KEY, name TEXT NOT NULL, city TEXT, budget INTEGER);
        CREATE TABLE employees (emp_id INTEGER PRIMARY KEY, name TEXT NOT NULL, dept_id INTEGER
            REFERENCES departments(dept_id), title TEXT, salary INTEGER, hire_year INTEGER);
        CREATE TABLE projects (proj_id INTEGER PRIMARY KEY, name TEXT NOT NULL, dept_id INTEGER
            REFERENCES departments(dept_id), budget INTEGER);
    """)
    depts = rng.sample(_DEPTS, 6)
    budgets = _unique_ints(rng, 6, 100, 900, 10)
    cities = rng.sample(_CITIES, 4)
    for i, name in enumerate(depts, 1):
        conn.execute("INSERT INTO departments VALUES (?,?,?,?)", (i, name, rng.choice(cities), budgets[i - 1] * 1000))
    staffed = rng.sample(range(1, 7), 5)  # one department has no employees
    salaries = _unique_ints(rng, 20, 400, 1500, 5)
    for i, name in enumerate(_people(rng, 20), 1):
        conn.execute("INSERT INTO employees VALUES (?,?,?,?,?,?)", (
            i, name, rng.choice(staffed), rng.choice(_TITLES), salaries[i - 1] * 100, rng.randint(2008, 2023)))
    with_projects = rng.sample(range(1, 7), 4)
    pbudgets = _unique_ints(rng, 8, 20, 500, 5)
    for i, name in enumerate(rng.sample(_PROJECTS, 8), 1):
        conn.execute("INSERT INTO projects VALUES (?,?,?,?)", (i, name, rng.choice(with_projects), pbudgets[i - 1] * 1000))


def _build_school(conn: sqlite3.Connection, rng: random.Random) -> None:
    conn.executescript("""
        CREATE TABLE teachers (teacher_id INTEGER PRIMARY KEY, name TEXT NOT NULL, subject TEXT, hire_year INTEGER);
        CREATE TABLE students (student_id INTEGER PRIMARY KEY, name TEXT NOT NULL, year INTEGER, city TEXT,
            gpa REAL, advisor_id INTEGER REFERENCES teachers(teacher_id));
        CREATE TABLE courses (course_id INTEGER PRIMARY KEY, title TEXT NOT NULL, credits INTEGER,
            teacher_id INTEGER REFERENCES teachers(teacher_id));
    """)
    people = _people(rng, 26)
    hire = _unique_ints(rng, 6, 1995, 2023)
    subjects = rng.sample(_SUBJECTS, 6)
    for i in range(1, 7):
        conn.execute("INSERT INTO teachers VALUES (?,?,?,?)", (i, people[i - 1], subjects[i - 1], hire[i - 1]))
    advisors = rng.sample(range(1, 7), 4)
    gpas = _unique_ints(rng, 20, 200, 400)
    cities = rng.sample(_CITIES, 4)
    for i in range(1, 21):
        conn.execute("INSERT INTO students VALUES (?,?,?,?,?,?)", (
            i, people[5 + i], rng.randint(1, 4), rng.choice(cities), gpas[i - 1] / 100, rng.choice(advisors)))
    teaching = rng.sample(range(1, 7), 5)
    titles = set()
    while len(titles) < 8:
        subject = rng.choice(subjects)
        titles.add(f"{rng.choice(_COURSE_WORDS)} {subject}")
    for i, title in enumerate(sorted(titles), 1):
        conn.execute("INSERT INTO courses VALUES (?,?,?,?)", (i, title, rng.choice([2, 3, 4, 5]), rng.choice(teaching)))


def _build_store(conn: sqlite3.Connection, rng: random.Random) -> None:
    conn.executescript("""
        CREATE TABLE customers (customer_id INTEGER PRIMARY KEY, name TEXT NOT NULL, city TEXT, joined_year INTEGER);
        CREATE TABLE products (product_id INTEGER PRIMARY KEY, name TEXT NOT NULL, category TEXT, price REAL);
        CREATE TABLE orders (order_id INTEGER PRIMARY KEY, customer_id INTEGER REFERENCES customers(customer_id),
            product_id INTEGER REFERENCES products(product_id), quantity INTEGER, order_year INTEGER);
    """)
    cities = rng.sample(_CITIES, 4)
    for i, name in enumerate(_people(rng, 12), 1):
        conn.execute("INSERT INTO customers VALUES (?,?,?,?)", (i, name, rng.choice(cities), rng.randint(2015, 2023)))
    prices = _unique_ints(rng, 10, 199, 9999)
    categories = rng.sample(_CATEGORIES, 4)
    for i, name in enumerate(rng.sample(_PRODUCTS, 10), 1):
        conn.execute("INSERT INTO products VALUES (?,?,?,?)", (i, name, rng.choice(categories), prices[i - 1] / 100))
    buyers = rng.sample(range(1, 13), 9)
    sold = rng.sample(range(1, 11), 8)
    for i in range(1, 25):
        conn.execute("INSERT INTO orders VALUES (?,?,?,?,?)", (
            i, rng.choice(buyers), rng.choice(sold), rng.randint(1, 9), rng.randint(2019, 2024)))


_BUILDERS = {"company": _build_company, "school": _build_school, "store": _build_store}
DATABASES = tuple(_BUILDERS)


def default_cache_dir() -> Path:
    root = os.environ.get("CREDITFLOW_CACHE")
    return Path(root).expanduser() if root else Path.home() / ".cache" / "creditflow"


def build_database(name: str, seed: int, path: str | os.PathLike) -> Path:
    """Write database ``name`` built from ``seed`` to ``path`` (atomically: temp file + rename)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{name}-", suffix=".sqlite", dir=path.parent)
    os.close(fd)
    try:
        conn = sqlite3.connect(tmp)
        try:
            conn.execute("PRAGMA journal_mode = DELETE")
            _BUILDERS[name](conn, random.Random(f"{name}:{seed}"))
            conn.commit()
        finally:
            conn.close()
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
    return path


def suite_dir(seed: int, cache_dir: str | os.PathLike | None = None) -> Path:
    """Directory holding the suite's databases, keyed by a hash of (generator version, seed)."""
    key = hashlib.sha256(json.dumps({"v": GENERATOR_VERSION, "seed": int(seed)}).encode()).hexdigest()[:16]
    base = Path(cache_dir).expanduser() if cache_dir else default_cache_dir()
    return base / "sql" / f"suite-{key}"


def ensure_databases(seed: int = 0, cache_dir: str | os.PathLike | None = None) -> dict[str, Path]:
    """Build the suite's databases once (reused from the cache afterwards); ``{name: path}``."""
    folder = suite_dir(seed, cache_dir)
    paths = {}
    for name in DATABASES:
        path = folder / f"{name}.sqlite"
        if not path.is_file():
            build_database(name, seed, path)
        paths[name] = path
    return paths


# ------------------------------------------------------------------------------------------------
# question templates
# ------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class _Entity:
    table: str
    singular: str
    plural: str
    key: str
    name_col: str
    name_word: str  # "name" / "title" / "id"
    numeric: tuple[tuple[str, str, bool], ...] = ()  # (column, phrase, values unique)
    categorical: tuple[tuple[str, str], ...] = ()  # (column, phrase)


@dataclass(frozen=True)
class _Relation:
    child: str
    fk: str
    parent: str
    phrase: str  # "who work in the {v} department"


_SPECS = {
    "company": (
        [
            _Entity("departments", "department", "departments", "dept_id", "name", "name",
                    (("budget", "budget", True),), (("city", "city"),)),
            _Entity("employees", "employee", "employees", "emp_id", "name", "name",
                    (("salary", "salary", True), ("hire_year", "hire year", False)), (("title", "job title"),)),
            _Entity("projects", "project", "projects", "proj_id", "name", "name", (("budget", "budget", True),), ()),
        ],
        [
            _Relation("employees", "dept_id", "departments", "who work in the {v} department"),
            _Relation("projects", "dept_id", "departments", "run by the {v} department"),
        ],
    ),
    "school": (
        [
            _Entity("teachers", "teacher", "teachers", "teacher_id", "name", "name",
                    (("hire_year", "hire year", True),), (("subject", "subject"),)),
            _Entity("students", "student", "students", "student_id", "name", "name",
                    (("gpa", "GPA", True),), (("city", "home city"), ("year", "year of study"))),
            _Entity("courses", "course", "courses", "course_id", "title", "title",
                    (("credits", "number of credits", False),), ()),
        ],
        [
            _Relation("students", "advisor_id", "teachers", "advised by {v}"),
            _Relation("courses", "teacher_id", "teachers", "taught by {v}"),
        ],
    ),
    "store": (
        [
            _Entity("customers", "customer", "customers", "customer_id", "name", "name",
                    (("joined_year", "joining year", False),), (("city", "city"),)),
            _Entity("products", "product", "products", "product_id", "name", "name",
                    (("price", "price", True),), (("category", "category"),)),
            _Entity("orders", "order", "orders", "order_id", "order_id", "id",
                    (("quantity", "quantity", False), ("order_year", "order year", False)), ()),
        ],
        [
            _Relation("orders", "customer_id", "customers", "placed by {v}"),
            _Relation("orders", "product_id", "products", "for the product {v}"),
        ],
    ),
}


def _lit(value) -> str:
    return str(value) if isinstance(value, (int, float)) else "'" + str(value).replace("'", "''") + "'"


def _values(conn, table, col) -> list:
    return [r[0] for r in conn.execute(f"SELECT DISTINCT {col} FROM {table} ORDER BY {col}")]


def _candidates(conn: sqlite3.Connection, db: str, rng: random.Random) -> list[tuple[str, str, str]]:
    """(hardness, question, gold_sql) candidates for one database; checked later."""
    entities, relations = _SPECS[db]
    by_table = {e.table: e for e in entities}
    out: list[tuple[str, str, str]] = []

    def add(h, q, sql):
        out.append((h, q, sql))

    for e in entities:
        names = f"{e.name_word}s"
        # easy: select / filter / aggregate
        add("easy", f"List the {names} of all {e.plural}.", f"SELECT {e.name_col} FROM {e.table}")
        add("easy", f"How many {e.plural} are there?", f"SELECT count(*) FROM {e.table}")
        for col, phrase, unique in e.numeric:
            vals = _values(conn, e.table, col)
            for v in rng.sample(vals[1:-1], min(2, max(0, len(vals) - 2))):
                add("easy", f"List the {names} of {e.plural} whose {phrase} is greater than {v}.",
                    f"SELECT {e.name_col} FROM {e.table} WHERE {col} > {_lit(v)}")
            for agg, word in rng.sample([("max", "highest"), ("min", "lowest"), ("avg", "average"), ("sum", "total")], 2):
                add("easy", f"What is the {word} {phrase} of all {e.plural}?", f"SELECT {agg}({col}) FROM {e.table}")
            if unique:
                # medium: order by / limit
                k = rng.randint(2, 4)
                add("medium", f"List the {names} of the {k} {e.plural} with the highest {phrase}, from highest to lowest.",
                    f"SELECT {e.name_col} FROM {e.table} ORDER BY {col} DESC LIMIT {k}")
                add("medium", f"Which {e.singular} has the lowest {phrase}? Give the {e.singular}'s {e.name_word}.",
                    f"SELECT {e.name_col} FROM {e.table} ORDER BY {col} ASC LIMIT 1")
                add("medium", f"List the {names} and {phrase} of all {e.plural}, sorted by {phrase} in ascending order.",
                    f"SELECT {e.name_col}, {col} FROM {e.table} ORDER BY {col} ASC")
                # extra: nested
                add("extra", f"List the {names} of {e.plural} whose {phrase} is above the average {phrase} of all {e.plural}.",
                    f"SELECT {e.name_col} FROM {e.table} WHERE {col} > (SELECT avg({col}) FROM {e.table})")
        for col, phrase in e.categorical:
            vals = _values(conn, e.table, col)
            for v in rng.sample(vals, min(2, len(vals))):
                add("easy", f"List the {names} of {e.plural} whose {phrase} is {v}.",
                    f"SELECT {e.name_col} FROM {e.table} WHERE {col} = {_lit(v)}")
                add("easy", f"How many {e.plural} have {phrase} {v}?",
                    f"SELECT count(*) FROM {e.table} WHERE {col} = {_lit(v)}")
            # hard: group by / having
            add("hard", f"For each {phrase}, how many {e.plural} are there?",
                f"SELECT {col}, count(*) FROM {e.table} GROUP BY {col}")
            k = rng.randint(1, 3)
            add("hard", f"Which {phrase} values have more than {k} {e.plural}?",
                f"SELECT {col} FROM {e.table} GROUP BY {col} HAVING count(*) > {k}")
            for ncol, nphrase, _ in e.numeric:
                add("hard", f"What is the average {nphrase} of {e.plural} for each {phrase}?",
                    f"SELECT {col}, avg({ncol}) FROM {e.table} GROUP BY {col}")
                # extra: set operations
                nvals = _values(conn, e.table, ncol)
                cvals = _values(conn, e.table, col)
                if len(nvals) > 3 and cvals:
                    v = nvals[len(nvals) // 2]
                    c = rng.choice(cvals)
                    add("extra", f"List the {names} of {e.plural} whose {phrase} is {c} or whose {nphrase} is greater than {v}.",
                        f"SELECT {e.name_col} FROM {e.table} WHERE {col} = {_lit(c)} UNION "
                        f"SELECT {e.name_col} FROM {e.table} WHERE {ncol} > {_lit(v)}")
                    add("extra", f"Which {phrase} values occur among {e.plural} with {nphrase} greater than {v} "
                                 f"but not among those with {nphrase} at most {v}?",
                        f"SELECT {col} FROM {e.table} WHERE {ncol} > {_lit(v)} EXCEPT "
                        f"SELECT {col} FROM {e.table} WHERE {ncol} <= {_lit(v)}")
    for r in relations:
        c, p = by_table[r.child], by_table[r.parent]
        cnames = f"{c.name_word}s"
        join = f"FROM {c.table} AS T1 JOIN {p.table} AS T2 ON T1.{r.fk} = T2.{p.key}"
        parents = [row[0] for row in conn.execute(
            f"SELECT DISTINCT T2.{p.name_col} {join} ORDER BY T2.{p.name_col}")]
        for v in rng.sample(parents, min(2, len(parents))):
            add("medium", f"List the {cnames} of {c.plural} {r.phrase.format(v=v)}.",
                f"SELECT T1.{c.name_col} {join} WHERE T2.{p.name_col} = {_lit(v)}")
        add("medium", f"For every {c.singular}, give the {c.singular}'s {c.name_word} and the {p.name_word} of its {p.singular}.",
            f"SELECT T1.{c.name_col}, T2.{p.name_col} {join}")
        add("hard", f"For each {p.singular} that has {c.plural}, give the {p.singular}'s {p.name_word} and the number of {c.plural}.",
            f"SELECT T2.{p.name_col}, count(*) {join} GROUP BY T1.{r.fk}")
        k = rng.randint(2, 3)
        add("hard", f"Which {p.plural} have at least {k} {c.plural}? Give their {p.name_word}s.",
            f"SELECT T2.{p.name_col} {join} GROUP BY T1.{r.fk} HAVING count(*) >= {k}")
        add("extra", f"List the {p.name_word}s of {p.plural} that have no {c.plural}.",
            f"SELECT {p.name_col} FROM {p.table} WHERE {p.key} NOT IN (SELECT {r.fk} FROM {c.table})")
        top = [row[0] for row in conn.execute(
            f"SELECT count(*) AS n FROM {c.table} GROUP BY {r.fk} ORDER BY n DESC LIMIT 2")]
        if len(top) == 2 and top[0] != top[1]:  # a unique maximum, so the question has one answer
            add("extra", f"What is the {p.name_word} of the {p.singular} with the most {c.plural}?",
                f"SELECT T2.{p.name_col} {join} GROUP BY T1.{r.fk} ORDER BY count(*) DESC LIMIT 1")
    return out


def generate_tasks(seed: int = 0, cache_dir: str | os.PathLike | None = None) -> list[SqlTask]:
    """All built-in tasks (both splits) for suite ``seed``; deterministic."""
    paths = ensure_databases(seed, cache_dir)
    tasks: list[SqlTask] = []
    for db in DATABASES:
        rng = random.Random(f"questions:{db}:{seed}")
        conn = sqlite3.connect(paths[db].as_uri() + "?mode=ro", uri=True)
        try:
            seen = set()
            for hardness, question, gold in _candidates(conn, db, rng):
                if question in seen:
                    continue
                rows = conn.execute(gold).fetchall()
                if not 1 <= len(rows) <= MAX_GOLD_ROWS:
                    continue
                seen.add(question)
                tasks.append(SqlTask(task_id="", db_path=str(paths[db]), question=question, gold_sql=gold,
                                     hardness=hardness, db_id=db))
        finally:
            conn.close()
    # split: every fifth task of each hardness goes to test
    out, counters = [], {h: 0 for h in HARDNESS}
    for t in tasks:
        i = counters[t.hardness]
        counters[t.hardness] += 1
        split = "test" if i % 5 == 4 else "train"
        digest = hashlib.sha1(f"{t.db_id}|{t.question}".encode()).hexdigest()[:8]
        out.append(SqlTask(task_id=f"{t.db_id}/{t.hardness}/{digest}", db_path=t.db_path, question=t.question,
                           gold_sql=t.gold_sql, hardness=t.hardness, db_id=t.db_id, split=split))
    return out
