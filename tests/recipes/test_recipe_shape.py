"""The recipes' shape (issue 73): no recipe function takes more than 8 parameters, and the two functions once
both named ``evaluate_policy`` have distinct names, the old one kept one release with a DeprecationWarning."""

import ast
import importlib
from pathlib import Path

import pytest

RECIPES = Path(__file__).resolve().parents[2] / "creditflow" / "recipes"


def test_no_recipe_function_takes_more_than_8_parameters():
    for path in sorted(RECIPES.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                a = node.args
                count = len(a.posonlyargs) + len(a.args) + len(a.kwonlyargs) + bool(a.vararg) + bool(a.kwarg)
                assert count <= 8, f"{path.name}:{node.lineno} {node.name} takes {count} parameters"


def test_recipes_common_is_gone():
    assert not (RECIPES / "common.py").exists()


@pytest.mark.parametrize("module, new", [("creditflow.recipes.eval", "evaluate_saved_policy"),
                                         ("creditflow.recipes.rro", "held_out_metrics")])
def test_the_old_evaluate_policy_names_warn_and_lead_to_the_new(module, new):
    mod = importlib.import_module(module)
    with pytest.warns(DeprecationWarning, match=new):
        old = mod.evaluate_policy
    assert old is getattr(mod, new)
