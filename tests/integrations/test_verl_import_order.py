"""creditflow's estimators join verl's registry whichever of ``creditflow.integrations.verl`` (or ``verl_v1``) and
``verl`` is imported first, and a registration that fails says so on stderr (issue 89; runs in .venv-verl).

Each case is a fresh process (an import order is a process's history): it imports in the order given, then runs
verl's own ``compute_advantage`` with ``algorithm.adv_estimator=rewardflow`` on a legacy-trainer batch
(``attach_rows``) and compares it with ``creditflow.credit.score``."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("verl")  # only in .venv-verl (make verl); the main environment skips this module

ROOT = Path(__file__).resolve().parents[2]

CHILD = """
import importlib, json, sys
for name in sys.argv[1].split(","):
    importlib.import_module(name)  # the order under test, before anything else of creditflow or verl
import numpy as np
from omegaconf import OmegaConf
from verl.trainer.ppo import core_algos
from verl.trainer.ppo.ray_trainer import compute_advantage
from verl.trainer.ppo.v1.trainer_base import TRAINER_REGISTRY
from benchmarks.credit_speed import sokoban_batch
from creditflow.integrations import verl as cf_verl
from tests.integrations.testlib import expected, row_advantages
trajs = sokoban_batch(tasks=3, rollouts=4, steps=10, seed=5)
out = {"registered": sorted(set(cf_verl.ESTIMATORS) & set(core_algos.ADV_ESTIMATOR_REGISTRY)),
       "v1": TRAINER_REGISTRY["sync"].__name__}
try:
    data = compute_advantage(cf_verl.to_dataproto(trajs), adv_estimator="rewardflow",
                             config=OmegaConf.create({"adv_estimator": "rewardflow", "creditflow": {}}))
    got = row_advantages(data.batch["advantages"].numpy(), data.batch["response_mask"].numpy())
    out["max_diff"] = float(np.abs(got - expected(trajs, "rewardflow")).max())
except Exception as exc:
    out["error"] = f"{type(exc).__name__}: {exc}"
print("RESULT " + json.dumps(out))
"""

ORDERS = {
    "verl first": "verl,creditflow.integrations.verl",
    "the bridge first (a notebook, a legacy-trainer script)": "creditflow.integrations.verl,verl",
    "the v1 bridge first": "creditflow.integrations.verl_v1,verl",
    "a plugin module first": "creditflow.integrations.verl_plugin",
}


def _child(order: str, **env) -> tuple[dict, str]:
    done = subprocess.run([sys.executable, "-c", CHILD, order], capture_output=True, text=True, cwd=ROOT, timeout=600,
                          env={**os.environ, "PYTHONPATH": str(ROOT), **env})
    assert done.returncode == 0, done.stderr[-3000:]
    line = next(line for line in done.stdout.splitlines() if line.startswith("RESULT "))
    return json.loads(line[len("RESULT "):]), done.stderr


@pytest.mark.parametrize("order", list(ORDERS.values()), ids=list(ORDERS))
def test_the_estimators_register_in_either_import_order(order):
    from creditflow.integrations.rows import ESTIMATORS

    got, err = _child(order)
    assert "error" not in got, got
    assert got["registered"] == sorted(ESTIMATORS)
    assert got["max_diff"] <= 1e-6, got  # verl's own compute_advantage gives creditflow.credit.score's advantages
    assert got["v1"] == "CreditflowPPOTrainerSync"  # the v1 trainer's classes too
    assert "creditflow:" not in err, err  # no registration failed


@pytest.mark.parametrize("order", [ORDERS["verl first"], ORDERS["the bridge first (a notebook, a legacy-trainer "
                                                                  "script)"]], ids=["verl first", "the bridge first"])
def test_a_registration_that_fails_says_so_on_stderr(order):
    """Another plugin holds the name ``rewardflow`` (tests/integrations/verl_taken.py, imported by verl before its
    plugins): creditflow's other estimators register, and one warning names the taken one (verl's loader would
    log it at debug level, and the trainer would later fail on it or run another's estimator)."""
    from creditflow.integrations.rows import ESTIMATORS

    got, err = _child(order, VERL_USE_EXTERNAL_MODULES="tests.integrations.verl_taken")
    warnings = [line for line in err.splitlines() if "creditflow: registering creditflow's estimators in verl failed"
                in line]
    assert len(warnings) == 1, err[-3000:]
    assert "'rewardflow' (tests.integrations.verl_taken)" in warnings[0], warnings[0]
    assert got["registered"] == sorted(ESTIMATORS)  # rewardflow is there: another's
    assert "max_diff" not in got or got["max_diff"] > 1e-3
