"""The redesign's leftovers are gone (issue 88): no module swaps ``sys.modules``, nothing in the package or the
benchmarks imports a deprecated path or alias (each still works for one release, with a ``DeprecationWarning``),
``creditflow --help`` loads no torch (the CLI reads ``WORLD_SIZE`` through :mod:`creditflow.world`), every command
does its work through :mod:`creditflow.api`, the recipes share ``TrainRecipe``'s shape, and a function's name is
its own."""

import ast
import importlib
import inspect
import subprocess
import sys
import warnings
from pathlib import Path
from typing import TypeVar

import pytest

ROOT = Path(__file__).resolve().parents[1]
SOURCES = ("creditflow", "benchmarks", "examples")

DEPRECATED_MODULES = ("creditflow.policy.model", "creditflow.process")
"""Plain re-export modules that warn on import (docs/architecture.md, "Moved in 0.3")."""

DEPRECATED_ALIASES = {  # module -> its deprecated names (each warns and gives the new object)
    "creditflow.recipes.eval": {"evaluate_policy"},
    "creditflow.recipes.rro": {"evaluate_policy"},
    "creditflow.integrations.rows": {"row_advantages"},
    "creditflow.integrations.verl": {"row_advantages"},
    "creditflow.integrations.verl_v1": {"STATE_FIELDS", "SUCCESS_FIELDS"},
}
ALIAS_NAMES = set().union(*DEPRECATED_ALIASES.values())


def _python_files():
    for top in SOURCES:
        for path in sorted((ROOT / top).rglob("*.py")):
            if "__pycache__" not in path.parts:
                yield path


def _module_of(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_deprecated_module(name: str) -> bool:
    return any(name == old or name.startswith(old + ".") for old in DEPRECATED_MODULES)


def _deprecated_uses(path: Path) -> list[str]:
    """Where ``path`` imports a deprecated module, or imports or reads a deprecated alias (a module that keeps an
    alias reads it where it forwards it)."""
    here = _module_of(path)
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [f"import {a.name}" for a in node.names if _is_deprecated_module(a.name)]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if _is_deprecated_module(node.module):
                found.append(f"from {node.module} import ...")
            found += [f"from {node.module} import {a.name}" for a in node.names
                      if _is_deprecated_module(f"{node.module}.{a.name}")
                      or a.name in DEPRECATED_ALIASES.get(node.module, ())]
        elif isinstance(node, ast.Attribute) and node.attr in ALIAS_NAMES and here not in DEPRECATED_ALIASES:
            found.append(f".{node.attr}")
    return [f"{path.relative_to(ROOT)}: {use}" for use in found if not _is_deprecated_module(here)]


def test_nothing_imports_a_deprecated_path_or_alias():
    uses = [use for path in _python_files() for use in _deprecated_uses(path)]
    assert not uses, "import from the new homes (docs/architecture.md, 'Moved in 0.3'):\n" + "\n".join(uses)


def _swaps_sys_modules(tree: ast.AST) -> bool:
    for node in ast.walk(tree):
        targets = (node.targets if isinstance(node, ast.Assign) else [node.target]
                   if isinstance(node, (ast.AugAssign, ast.AnnAssign)) else [])
        for target in targets:
            if isinstance(target, ast.Subscript) and ast.unparse(target.value) == "sys.modules":
                return True
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and ast.unparse(node.func.value) == "sys.modules" and node.func.attr in ("update", "setdefault")):
            return True
    return False


def test_no_module_swaps_sys_modules():
    swaps = [str(p.relative_to(ROOT)) for p in _python_files() if _swaps_sys_modules(ast.parse(p.read_text()))]
    assert not swaps, f"a module replaces another in sys.modules: {swaps}"


def test_the_check_sees_a_swap():
    assert _swaps_sys_modules(ast.parse("import sys\nsys.modules[__name__] = object()"))
    assert not _swaps_sys_modules(ast.parse("import sys\nm = sys.modules.get('torch')"))


def _fresh(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("name", ["rro", "mc", "collect", "preferences"])
def test_the_process_alias_is_a_plain_module_that_warns(name):
    code = ("import sys, warnings\nwarnings.simplefilter('error', DeprecationWarning)\n"
            f"try:\n    import creditflow.process.{name}\nexcept DeprecationWarning as e:\n    print('warned:', e)\n"
            "warnings.simplefilter('ignore', DeprecationWarning)\n"
            f"import creditflow.process.{name} as old, creditflow.pairs.{name} as new\n"
            "print(old is not new and all(getattr(old, n) is getattr(new, n) for n in old.__all__))")
    proc = _fresh(code)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.splitlines() == ["warned: creditflow.process is renamed creditflow.pairs; the old name goes "
                                        "in the next release", "True"], proc.stdout


def _defined(module) -> set[str]:
    """The public names ``module``'s own source defines at top level (no TypeVar)."""
    names = set()
    for node in ast.parse(Path(module.__file__).read_text()).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names |= {t.id for t in targets if isinstance(t, ast.Name)}
    return {n for n in names if not n.startswith("_") and not isinstance(getattr(module, n), TypeVar)}


def test_every_public_name_of_a_pairs_module_is_kept_by_its_process_alias():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        for name in ("rro", "mc", "collect", "preferences"):
            old = importlib.import_module(f"creditflow.process.{name}")
            public = _defined(importlib.import_module(f"creditflow.pairs.{name}"))
            assert public <= set(old.__all__), f"creditflow.process.{name} lacks {sorted(public - set(old.__all__))}"


def test_row_advantages_warns_and_is_advantages_with_the_configs_knobs():
    from creditflow.integrations import rows

    from creditflow.credit import Rows

    cols = Rows.filled(group_ids=["g", "g"], traj_ids=["a", "b"], step_index=[0, 0], state_keys=["s", "s"],
                       rewards=[1.0, 0.0], success=[True, False])
    with pytest.warns(DeprecationWarning, match="use advantages"):
        old, _ = rows.row_advantages("grpo", cols)
    new, _ = rows.advantages("grpo", cols, rows.estimator_knobs("grpo", None))
    assert old.tolist() == new.tolist()


def test_verl_keeps_row_advantages_without_importing_it():
    pytest.importorskip("verl")
    from creditflow.integrations import rows, verl

    assert verl.row_advantages is rows.row_advantages and "row_advantages" in verl.__all__


# every command module is imported for any of them; these run the root's and the groups' callbacks too
COMMANDS = [[], ["train"], ["config"], ["credit"], ["envs", "check"], ["rro", "train"]]


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: " ".join(c) or "creditflow")
def test_help_imports_no_torch(command):
    code = ("import sys\nfrom creditflow.cli import main\n"
            f"try:\n    main({[*command, '--help']!r})\nexcept SystemExit as e:\n    assert e.code == 0, e.code\n"
            "print('loaded:', sorted(m for m in ('torch', 'accelerate', 'transformers') if m in sys.modules))")
    proc = _fresh(code)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.splitlines()[-1] == "loaded: []", proc.stdout.splitlines()[-1]


def test_the_world_is_read_without_torch():
    code = ("import os, sys\nos.environ['WORLD_SIZE'] = '3'\nfrom creditflow import world\n"
            "try:\n    world.refuse_copies('eval')\nexcept Exception as e:\n    print(type(e).__name__)\n"
            "print(world.current(), world.launched_size(), 'torch' in sys.modules)")
    proc = _fresh(code)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.splitlines() == ["UserError", "World(rank=0, size=1) 3 False"], proc.stdout


def test_the_trainer_joins_the_worlds_processes():
    from creditflow import world
    from creditflow.trainer import distributed

    assert distributed.World is world.World  # one World: the CLI's and the trainer's


SHARED_NAMES = {  # a name more than one module defines on purpose: where, and why
    "main": {"cli/__init__.py", "cli/runtime.py", "integrations/skyrl_main.py"},  # each program's entry point
    "register": {"envs/__init__.py", "integrations/skyrl.py", "integrations/verl.py"},  # each registry's hook
    "check_installed": {"policy/backends/openai.py", "policy/backends/vllm.py"},  # each optional backend's
    "parse_action": {"envs/sql/env.py", "envs/webshop/env.py"},  # each text env's own action grammar
    "default_cache_dir": {"envs/household.py", "envs/sql/tasks.py"},  # each env's own data
    # public twice: creditflow.audit wraps the audit package's own entry point; envs.check_options (the env
    # reference page) and integrations.trl.check_options (TRL's options) are each their package's public name
    "audit": {"api.py", "auditing/run.py"},
    "check_options": {"envs/__init__.py", "integrations/trl.py"},
    # each graph estimator's own drawing hook (its registration's ``Drawing(nodes=...)``)
    "graph_nodes": {"credit/graphgpo.py", "credit/rewardflow.py"},
}


def _functions_by_name() -> dict[str, set[str]]:
    """Every public module-level function of the package: name -> the modules (paths under creditflow/)."""
    found: dict[str, set[str]] = {}
    package = ROOT / "creditflow"
    for path in sorted(package.rglob("*.py")):
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and not node.name.startswith("_"):
                found.setdefault(node.name, set()).add(path.relative_to(package).as_posix())
    return found


def test_one_name_per_function():
    shared = {name: where for name, where in _functions_by_name().items()
              if len(where) > 1 and where != SHARED_NAMES.get(name)}
    assert not shared, f"one name per function (rename the internal one): {shared}"


def test_the_stages_have_names_of_their_own():
    found = _functions_by_name()
    for name in ("run_sft", "evaluate", "sft", "train_sft", "train_dpo", "run_dpo", "evaluate_seeds"):
        assert len(found[name]) == 1, (name, found[name])


def test_the_recipes_share_train_recipes_shape():
    from creditflow.recipes.rro import RRORecipe
    from creditflow.recipes.sft import SFTRecipe
    from creditflow.recipes.train import TrainRecipe

    for name in ("setup", "run"):
        shape = inspect.signature(getattr(TrainRecipe, name)).parameters.keys()
        for recipe in (SFTRecipe, RRORecipe):
            assert inspect.signature(getattr(recipe, name)).parameters.keys() == shape, (recipe.__name__, name)


def test_rro_is_a_recipe_and_the_three_calls_the_api_makes():
    from creditflow.recipes import rro

    free = sorted(name for name, value in vars(rro).items()
                  if inspect.isfunction(value) and value.__module__ == rro.__name__ and not name.startswith("_"))
    # the three stages' calls, the data's place and settings, and the held-out metrics of the pipeline's end
    assert free == ["collection_settings", "data_dir", "held_out_metrics", "run_collect", "run_dpo", "run_rro"], free


def test_the_commands_do_their_work_through_the_api():
    work = {"commented_yaml", "validate_knobs", "score_lines", "read_jsonl_lines", "group_graph", "write_graph",
            "check_env", "factory"}  # config, credit, graph and envs check: the API's config_yaml, ... env_checks
    for path in sorted((ROOT / "creditflow" / "cli").glob("*.py")):
        names = {n.id for n in ast.walk(ast.parse(path.read_text())) if isinstance(n, ast.Name)}
        names |= {n.attr for n in ast.walk(ast.parse(path.read_text())) if isinstance(n, ast.Attribute)}
        assert not names & work, f"{path.name} does {sorted(names & work)} itself; call creditflow.api"
