"""The estimator registry: typed knob models, validation in one place, one-line errors, no import cycle."""

import ast
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from tests.credit.credit_testlib import traj

from creditflow import credit
from creditflow.credit import registry
from creditflow.credit.registry import Knobs, parse_key_values, validate_model
from creditflow.credit.rewardflow import GraphKnobs, RewardFlowKnobs

CREDIT_DIR = Path(credit.__file__).parent


def test_every_estimator_has_a_knob_model_with_documented_fields():
    assert credit.estimator_names() == ["g2po", "gagpo", "gigpo", "graphgpo", "grpo", "rewardflow", "rloo"]
    for name in credit.estimator_names():
        model = credit.knob_model(name)
        assert issubclass(model, Knobs) and model.model_config["extra"] == "forbid"
        for field, info in model.model_fields.items():
            assert info.description, f"{name}.{field} has no docstring"


def test_estimators_declare_what_they_need():
    needs = {name: credit.estimator_needs(name) for name in credit.estimator_names()}
    assert needs == {"g2po": {"state"}, "gagpo": {"state"}, "gigpo": {"state"}, "graphgpo": {"state", "success"}, "grpo": set(),
                     "rewardflow": {"state", "success"}, "rloo": set()}
    assert credit.estimator_needs("unknown") == frozenset()
    with pytest.raises(ValueError, match="needs must be a subset"):
        credit.register_estimator("x", knobs=Knobs, needs={"tokens"})


def test_graph_estimators_declare_their_drawing():
    """The estimators that draw a state graph say so at registration (``draws=``), in the order ``creditflow
    graph`` lists them; the others draw none."""
    assert registry.graph_estimators() == ["rewardflow", "graphgpo"]
    assert registry.estimator_drawing("rewardflow").knobs is GraphKnobs
    assert registry.estimator_drawing("graphgpo").knobs is credit.knob_model("graphgpo")
    assert registry.estimator_drawing("grpo") is None and registry.estimator_drawing("unknown") is None


def test_a_new_graph_estimator_is_drawn_with_no_edit_elsewhere():
    """draw.py asks the registry whose graph it draws: an estimator registered with a drawing is drawn by it."""
    from creditflow.credit.draw import GraphError, group_graph
    from creditflow.credit.grpo import GRPOKnobs, grpo
    from creditflow.credit.rewardflow import graph_nodes

    drawing = registry.Drawing("ZZ", "R(s), kept transitions", GraphKnobs, graph_nodes)
    credit.register_estimator("zz_drawn", knobs=GRPOKnobs, draws=drawing)(grpo)
    try:
        trajs = [traj(["A", "B", "C"], success=True), traj(["A", "D"])]
        got = group_graph(trajs, estimator="zz_drawn")
        want = group_graph(trajs)
        assert got.estimator == "ZZ" and want.estimator == "RewardFlow" and got.labels == want.labels
        assert registry.graph_estimators()[-1] == "zz_drawn"
    finally:
        registry._ESTIMATORS.pop("zz_drawn")
    with pytest.raises(GraphError, match="'grpo' draws no graph; graphs are drawn for rewardflow, graphgpo"):
        group_graph(trajs, estimator="grpo")


def test_the_cli_and_the_drawing_name_no_estimator():
    """``cli/`` and ``credit/draw.py`` neither name an estimator in code (a constant equal to a registered name: a
    list, a default, a comparison) nor import an estimator's module: what the graph command draws, and whose
    knobs it takes, come from the registrations (``draws=``). Help prose may mention a method."""
    names = set(credit.estimator_names())
    method_modules = {credit.get_kernel(name).__module__ for name in names}
    package = CREDIT_DIR.parent
    for path in [*sorted((package / "cli").glob("*.py")), CREDIT_DIR / "draw.py"]:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                assert node.value not in names, f"{path.name}:{node.lineno} names {node.value!r}"
            if isinstance(node, ast.ImportFrom):
                assert node.module not in method_modules, f"{path.name}:{node.lineno} imports {node.module}"
                assert not (node.module == "creditflow.credit" and {a.name for a in node.names} & {
                    m.rsplit(".", 1)[1] for m in method_modules}), f"{path.name}:{node.lineno} imports a method"


@pytest.fixture
def new_estimators():
    """Two estimators registered by a test (GRPO's kernel): one declaring it reads states, one named as a
    trainer's own estimator."""
    from creditflow.credit.grpo import GRPOKnobs, grpo

    credit.register_estimator("zz_new", knobs=GRPOKnobs, needs={"state", "success"})(grpo)
    credit.register_estimator("gae", knobs=GRPOKnobs)(grpo)
    yield "zz_new", "gae"
    for name in ("zz_new", "gae"):
        registry._ESTIMATORS.pop(name)


def test_a_new_estimator_needs_no_edit_elsewhere(new_estimators):
    """What the integrations read comes from the registration: the trainer names (a name the trainers have for
    an estimator of their own takes the prefix creditflow_), what it needs, and its advantages on the shared
    row columns."""
    from creditflow.integrations import rows

    assert credit.estimator_needs("zz_new") == {"state", "success"}
    assert rows.ESTIMATORS["zz_new"] == "zz_new" and rows.ESTIMATORS["creditflow_gae"] == "gae"
    assert "gae" not in rows.ESTIMATORS and rows.ESTIMATORS["creditflow_grpo"] == "grpo"
    cols = credit.Rows.filled(["g", "g", "g"], traj_ids=["a", "a", "b"], rewards=[0.0, 1.0, 0.0],
                              success=[True, True, False], state_keys=["A", "B", "A"])
    got, metrics = rows.advantages("zz_new", cols)
    want, _ = rows.advantages("grpo", cols)
    np.testing.assert_array_equal(got, want)
    assert got[0] == got[1] > 0 > got[2] and isinstance(metrics, dict)
    np.testing.assert_array_equal(rows.advantages("creditflow_gae", cols)[0], want)  # by its trainer name too


def test_the_integrations_list_no_estimator():
    """No integration lists estimators or compares with one (what they need, which exist): they read the registry
    (ESTIMATORS, estimator_needs). A default argument may name one, and rows.TRAINERS_OWN lists the trainers'
    own estimator names."""
    names = set(credit.estimator_names())
    integrations = Path(credit.__file__).parents[1] / "integrations"
    for path in integrations.glob("*.py"):
        tree = ast.parse(path.read_text())
        trainers_own = {id(n) for node in ast.walk(tree) if isinstance(node, ast.Assign)
                        and any(getattr(t, "id", None) == "TRAINERS_OWN" for t in node.targets) for n in ast.walk(node)}
        for node in ast.walk(tree):
            if id(node) in trainers_own:
                continue
            if isinstance(node, (ast.List, ast.Tuple, ast.Set, ast.Dict, ast.Compare)):
                found = {n.value for n in ast.walk(node) if isinstance(n, ast.Constant) and n.value in names}
                assert not found, f"{path.name}:{node.lineno} names {sorted(found)}"


def test_validate_knobs_returns_the_model_with_defaults():
    knobs = credit.validate_knobs("rewardflow", {"gamma": 0.5, "prune": False})
    assert isinstance(knobs, RewardFlowKnobs)
    assert (knobs.gamma, knobs.prune, knobs.max_hops, knobs.success_threshold) == (0.5, False, 1000, None)
    assert credit.validate_knobs("gigpo", {"gamma": 1}).gamma == 1.0  # an integer is a number


@pytest.mark.parametrize("knobs, message", [
    ({"gamma": "abc"}, "knob gamma expects a number, got 'abc'"),
    ({"gamma": "0.5"}, "knob gamma expects a number, got '0.5'"),
    ({"max_hops": 6.5}, "knob max_hops expects an integer, got 6.5"),
    ({"prune": "maybe"}, "knob prune expects true or false, got 'maybe'"),
    ({"prune": 1}, "knob prune expects true or false, got 1"),
    ({"gamma": True}, "knob gamma expects a number, got True"),
    ({"gamma": float("nan")}, "knob gamma expects a finite number"),
    ({"gamma": 1.5}, "knob gamma must be in (0, 1], got 1.5"),
    ({"max_hops": -1}, "knob max_hops must be in [0, inf), got -1"),
    ({"distance": "max"}, "knob distance must be one of min, mean, got 'max'"),
    ({"success_threshold": "high"}, "knob success_threshold expects a number or none, got 'high'"),
    ({"gama": 0.9, "lr": 1}, "estimator 'rewardflow' has no knobs 'gama', 'lr'; knobs: gamma, distance"),
])
def test_bad_knobs_are_one_line_errors(knobs, message):
    with pytest.raises(credit.CreditError) as exc:
        credit.validate_knobs("rewardflow", knobs)
    assert message in str(exc.value) and "\n" not in str(exc.value)


def test_compute_validates_before_running():
    with pytest.raises(credit.CreditError, match="knob eps must be in"):
        credit.compute("grpo", [traj(["A", "B"])], eps=-1.0)


def test_strings_from_the_command_line():
    parsed = credit.validate_knobs("rewardflow", parse_key_values(
        ["gamma=0.5", "prune=false", "success_threshold=none", "max_hops=3", "noop_feedback=", "distance=mean"]),
        strings=True)
    assert (parsed.gamma, parsed.prune, parsed.success_threshold, parsed.max_hops, parsed.noop_feedback,
            parsed.distance) == (0.5, False, None, 3, "", "mean")
    assert credit.validate_knobs("rewardflow", {"noop_feedback": "none"}, strings=True).noop_feedback == "none"
    for item, message in [("max_hops=6.5", "knob max_hops expects an integer, got '6.5'"),
                          ("gamma=nan", "knob gamma expects a finite number"),
                          ("success_threshold=x", "knob success_threshold expects a number or none")]:
        with pytest.raises(credit.CreditError, match="^" + message.replace("(", r"\(")):
            credit.validate_knobs("rewardflow", parse_key_values([item]), strings=True)


def test_graph_knobs_are_a_subset_of_rewardflow_knobs():
    assert set(GraphKnobs.model_fields) < set(RewardFlowKnobs.model_fields)
    with pytest.raises(credit.CreditError, match="graph has no knob 'alpha_traj'"):
        validate_model(GraphKnobs, {"alpha_traj": 2.0}, "graph")
    knobs = credit.validate_knobs("rewardflow", {"gamma": 0.5, "alpha_traj": 2.0})
    graph = list(GraphKnobs.model_fields)
    assert [getattr(knobs, k) for k in graph] == [getattr(GraphKnobs(gamma=0.5), k) for k in graph]


def _credit_imports(path: Path) -> set[str]:
    """Modules of the creditflow.credit package that ``path`` imports (``from creditflow import credit`` too)."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module == "creditflow":
            names |= {f"creditflow.{a.name}" for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
        elif isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
    return {n for n in names if n == "creditflow.credit" or n.startswith("creditflow.credit.")}


def test_method_modules_import_the_registry_not_the_package():
    for path in sorted(CREDIT_DIR.glob("*.py")):
        if path.name != "__init__.py":
            assert "creditflow.credit" not in _credit_imports(path), path.name
    assert "creditflow.credit.registry" in _credit_imports(CREDIT_DIR / "rewardflow.py")


@pytest.mark.parametrize("module", ["creditflow.credit.rewardflow", "creditflow.credit.gigpo",
                                    "creditflow.credit.graphgpo", "creditflow.credit.g2po",
                                    "creditflow.credit.gagpo",
                                    "creditflow.credit.registry", "creditflow.credit"])
def test_each_module_imports_first_without_a_cycle(module):
    code = f"import {module}; import creditflow.credit as c; print(','.join(c.estimator_names()))"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "g2po,gagpo,gigpo,graphgpo,grpo,rewardflow,rloo"
