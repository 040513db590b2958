"""The config flows down once (issue 88): the API resolves the user's inputs into one ``RunConfig``
(``creditflow.api.resolve``), the recipe hands each part below it only its own sections, and no module below the
recipes imports ``RunConfig``."""

import ast
import sys
from pathlib import Path

import creditflow
from creditflow.config import RunConfig

PACKAGE = Path(creditflow.__file__).resolve().parent
ABOVE = ("recipes/", "cli/", "api.py")  # the layers that see the whole config
HOME = ("config.py", "configdoc.py")  # where it is defined, and written out as commented YAML
SMALL = ["rollout.tasks_per_step=2", "rollout.group_size=2", "rl.eval_episodes=2", "rl.eval_every=0",
         "generation.max_new_tokens=6", "rollout.max_steps=3", "rl.lr=1e-3", "tensorboard=false", "rl.steps=1"]


def imports_run_config(tree: ast.AST) -> bool:
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == "creditflow.config" and any(
                a.name == "RunConfig" for a in node.names):
            return True
        if isinstance(node, ast.ImportFrom) and node.module == "creditflow" and any(
                a.name == "config" for a in node.names):
            return True  # creditflow.config as a module: its RunConfig within reach
        if isinstance(node, ast.Attribute) and node.attr == "RunConfig":
            return True
    return False


def test_no_module_below_the_recipes_imports_run_config():
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).as_posix()
        if rel.startswith(ABOVE) or rel in HOME:
            continue
        if imports_run_config(ast.parse(path.read_text(encoding="utf-8"))):
            found.append(rel)
    assert found == []


def zone(filename: str) -> str | None:
    """The package (``recipes``, ``policy``, ``api``, ...) of a creditflow source file; None outside creditflow."""
    path = Path(filename)
    if PACKAGE not in path.parents:
        return None
    return path.relative_to(PACKAGE).parts[0].removesuffix(".py")


def config_walk(call) -> list[str]:
    """The walk of the run config through creditflow while ``call()`` runs: the package of every creditflow
    function called with a ``RunConfig`` among its arguments, in call order, repeats of one package collapsed.
    ``config`` (the type's own module: building, dumping, comparing configs) is left out of the walk."""
    walk: list[str] = []

    def profile(frame, event, _arg):
        if event != "call":
            return
        where = zone(frame.f_code.co_filename)
        if where is None or where == "config":
            return
        code = frame.f_code
        n = code.co_argcount + code.co_kwonlyargcount + bool(code.co_flags & 0x04) + bool(code.co_flags & 0x08)
        values = frame.f_locals
        if any(isinstance(values.get(name), RunConfig) for name in code.co_varnames[:n]) and (
                not walk or walk[-1] != where):
            walk.append(where)

    sys.setprofile(profile)
    try:
        call()
    finally:
        sys.setprofile(None)
    return walk


def test_the_walk_from_train_enters_the_recipes_at_most_3_times_and_goes_no_lower(tmp_path, tiny_model_dir):
    """A one-step ``creditflow.train`` from a given model: the run config goes from the API into the recipes and
    stays there; every part below them gets sections (before issue 88 the walk went on into ``envs``, ``policy``,
    ``rollout``, ``curriculum`` and ``trainer`` and came back: 11 entries into ``recipes``)."""
    walk = config_walk(lambda: creditflow.train(SMALL, model=tiny_model_dir, out=tmp_path / "run"))
    assert set(walk) <= {"api", "recipes"}, walk
    assert 1 <= walk.count("recipes") <= 3, walk


def assigns_into_a_config(tree: ast.AST) -> list[int]:
    """Lines that assign to a setting of a run config (``cfg.out_dir = ...``, ``cfg.policy.model = ...``)."""
    lines = []
    for node in ast.walk(tree):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(
            node, (ast.AugAssign, ast.AnnAssign)) else []
        for target in targets:
            root = target
            while isinstance(root, ast.Attribute):
                root = root.value
            if isinstance(target, ast.Attribute) and isinstance(root, ast.Name) and root.id == "cfg":
                lines.append(node.lineno)
    return lines


def test_only_the_resolution_changes_a_config():
    """Once resolved, the run config is read, never changed: only ``api.with_env`` and ``recipes/resolve.py`` (a
    resumed run's paths and record) set a setting of the config they build."""
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).as_posix()
        lines = assigns_into_a_config(ast.parse(path.read_text(encoding="utf-8")))
        if lines and rel not in ("api.py", "recipes/resolve.py"):
            found[rel] = lines
    assert found == {}
