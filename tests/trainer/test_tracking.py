"""Experiment tracking (issue 90): ``logging.report_to`` sends the JSONL's metrics, under the same names, to
TensorBoard, Weights & Biases and trackio (its local store), each through its own package. A whole run that
reports to wandb offline: tests/recipes/test_first_hour.py.

trackio 0.43 pins pillow < 13 and the main environment has pillow 13, so trackio lives in an environment of its
own (``make trackio``: .venv-trackio, creditflow without torch), which runs this file with ``--noconftest``: nothing
here imports torch, and each tracker's test is skipped where its package is not installed."""

import importlib.util
import json

import pytest

from creditflow.config import build_config
from creditflow.errors import UserError
from creditflow.trainer.metrics import TRACKERS_FILE, MetricsLogger, check_trackers

ROWS = [{"step": 0, "eval/success_rate": 0.25, "dist/world_size": 1},
        {"step": 1, "train/success_rate": 0.5, "train/adv_std": 0.75, "train/update_skipped": 0.0, "note": "text",
         "eval/success_rate": 0.5},
        {"step": 2, "train/success_rate": 1.0, "train/adv_std": 0.0, "train/update_skipped": 1.0}]


def _numbers(rows):
    return {k for r in rows for k, v in r.items() if isinstance(v, float | int) and k != "step"}


def test_report_to_takes_trl_names_and_the_old_tensorboard_switch():
    assert build_config(None, []).logging.report_to == ["tensorboard"]
    assert build_config(None, ["logging.report_to=wandb,trackio"]).logging.report_to == ["wandb", "trackio"]
    assert build_config(None, ["logging.report_to=none"]).logging.report_to == []
    assert build_config(None, ["tensorboard=false"]).logging.report_to == []  # config files of earlier releases
    assert build_config(None, ["tensorboard=true", "logging.report_to=[wandb]"]).logging.report_to == [
        "tensorboard", "wandb"]
    with pytest.raises(UserError, match=r"unknown tracker 'wanbd' \(did you mean 'wandb'\?\)"):
        build_config(None, ["logging.report_to=wanbd"])


def test_a_tracker_that_is_not_installed_is_one_line_before_any_work(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "trackio" else real(name, *a))
    check_trackers(["tensorboard"])
    with pytest.raises(UserError, match="logging.report_to names trackio, but the trackio package is not installed: "
                                        r"pip install trackio \(or creditflow\[trackio\]\)"):
        check_trackers(["tensorboard", "trackio"])


def test_tensorboard_gets_the_jsonl_names(tmp_path):
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    logger = MetricsLogger(tmp_path, ["tensorboard"])
    for row in ROWS:
        logger.log(row)
    logger.close()
    events = EventAccumulator(str(tmp_path / "tb"))
    events.Reload()
    assert set(events.Tags()["scalars"]) == _numbers(ROWS)
    assert [(e.step, e.value) for e in events.Scalars("train/adv_std")] == [(1, 0.75), (2, 0.0)]


def test_trackio_gets_the_jsonl_names_and_a_resume_continues_its_run(tmp_path, monkeypatch):
    """Runs where trackio is installed (``make trackio``: its own environment, see the module docstring)."""
    trackio = pytest.importorskip("trackio")
    monkeypatch.setenv("TRACKIO_DIR", str(tmp_path / "store"))
    monkeypatch.setattr(trackio, "TRACKIO_DIR", tmp_path / "store", raising=False)
    from trackio.sqlite_storage import SQLiteStorage

    logger = MetricsLogger(tmp_path / "rf", ["trackio"], project="issue90", config={"rl": {"algo": "rewardflow"}})
    for row in ROWS[:2]:
        logger.log(row)
    logger.close()
    name = json.loads((tmp_path / "rf" / TRACKERS_FILE).read_text())["trackio"]
    assert name == "rf"
    logger = MetricsLogger(tmp_path / "rf", ["trackio"], resume_step=1, project="issue90")  # --resume
    logger.log(ROWS[2])
    logger.close()
    logs = SQLiteStorage.get_logs("issue90", "rf")
    assert [log["step"] for log in logs] == [0, 1, 2]
    assert {k for log in logs for k in log if k not in ("step", "timestamp")} == _numbers(ROWS)
    assert logs[1]["train/adv_std"] == 0.75 and "note" not in logs[1]
