"""creditflow.integrations.plugins: a verl.plugins registration waits for a half-imported bridge and runs when the
bridge has finished importing; one that fails is a warning (issue 89). No verl needed: the bridges are stand-ins
(tests/integrations/test_verl_import_order.py runs the real orders in .venv-verl)."""

import importlib.machinery
import logging
import sys
import types

import pytest

from creditflow.integrations import plugins

BRIDGE = "tests.integrations.zz_fake_bridge"


@pytest.fixture
def bridge():
    """A stand-in bridge module, half-imported (in sys.modules, its last line not run yet)."""
    module = types.ModuleType(BRIDGE)
    module.__spec__ = importlib.machinery.ModuleSpec(BRIDGE, None)
    module.__spec__._initializing = True  # as the import system marks a module whose body runs
    sys.modules[BRIDGE] = module
    yield module
    sys.modules.pop(BRIDGE, None)
    plugins._ready.discard(BRIDGE)
    plugins._pending[:] = [job for job in plugins._pending if BRIDGE not in job.needs]


def test_a_registration_waits_for_a_half_imported_bridge_and_runs_at_its_end(bridge):
    calls = []
    plugins.register_when_ready("registering the fakes", [BRIDGE], lambda b: calls.append(b.register()), "nothing")
    assert calls == [] and "registering the fakes" in plugins.pending()
    bridge.register = lambda: "registered"  # the rest of the bridge's body
    plugins.imported(BRIDGE)  # its last line
    assert calls == ["registered"] and "registering the fakes" not in plugins.pending()


def test_a_registration_runs_at_once_where_its_modules_import(bridge):
    plugins.imported(BRIDGE)
    calls = []
    plugins.register_when_ready("registering the fakes", [BRIDGE, "json"], lambda b, j: calls.append(j.dumps(1)), "")
    assert calls == ["1"] and not plugins.pending()


def test_a_registration_that_fails_is_a_warning_saying_what_fails_then(bridge, caplog):
    plugins.imported(BRIDGE)

    def broken(_):
        raise RuntimeError("the registry is read-only\nsecond line")

    with caplog.at_level(logging.INFO, logger="creditflow.integrations"):
        plugins.register_when_ready("registering the broken fakes", [BRIDGE], broken, "the trainer will not find them")
    (record,) = caplog.records
    assert record.levelno == logging.WARNING
    assert record.getMessage() == ("creditflow: registering the broken fakes failed (second line); the trainer will "
                                   "not find them (docs/verl.md)")


def test_a_missing_optional_dependency_is_noted_at_info_level(caplog):
    with caplog.at_level(logging.INFO, logger="creditflow.integrations"):
        plugins.register_when_ready("installing the fakes", ["zz_not_installed_anywhere"], lambda m: None,
                                    "the v1 trainer lacks them", optional=["zz_not_installed_anywhere"])
        plugins.register_when_ready("installing the other fakes", ["zz_not_installed_anywhere"], lambda m: None,
                                    "it is needed")
    assert [r.levelno for r in caplog.records] == [logging.INFO, logging.WARNING]
    assert "zz_not_installed_anywhere is not installed" in caplog.records[0].getMessage()
    assert "No module named 'zz_not_installed_anywhere'" in caplog.records[1].getMessage()
