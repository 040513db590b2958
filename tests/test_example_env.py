"""examples/my_first_env: its README's walkthrough from the command line, on the package installed in a fresh
virtualenv, and the same env trained from Python through the API.

The virtualenv sees the test's own site-packages through a ``.pth`` file (``venv --system-site-packages`` would
give the base interpreter's instead) and the example is installed with ``pip install --no-deps
--no-build-isolation --no-index -e``: nothing is downloaded and the test's environment is left as it was.
"""

import json
import os
import shutil
import site
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

import creditflow
from creditflow import envs

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "my_first_env"
# the tiny policy made tinier, and the smallest budgets that still run every stage
TINY_POLICY = ["policy.tiny_hidden_size=32", "policy.tiny_layers=1", "policy.tiny_vocab_size=300", "tensorboard=false"]
TINY_SFT = ["sft.demos=16", "sft.epochs=1"]
TINY_RL = ["rl.steps=1", "rollout.tasks_per_step=2", "rollout.group_size=2", "rl.eval_episodes=2",
           "generation.max_new_tokens=8"]


@pytest.fixture(scope="module")
def venv_python(tmp_path_factory):
    root = tmp_path_factory.mktemp("example")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root / "venv")], check=True, timeout=120)
    python = root / "venv" / "bin" / "python"
    venv_site = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                                    capture_output=True, text=True, check=True).stdout.strip())
    (venv_site / "parent.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    package = root / "my_first_env"  # a copy: the build leaves nothing in the repository
    shutil.copytree(EXAMPLE, package)
    proc = subprocess.run([str(python), "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "--no-index",
                           "-e", str(package)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return python


def creditflow_cli(python, cwd, *args):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run([str(python), "-m", "creditflow", *args], capture_output=True, text=True, cwd=cwd, env=env,
                          timeout=600)
    assert proc.returncode == 0, f"creditflow {' '.join(args)}:\n{proc.stderr[-3000:]}"
    return proc.stdout


@pytest.mark.slow
def test_the_readme_walkthrough_on_the_installed_package(venv_python, tmp_path):
    listing = creditflow_cli(venv_python, tmp_path, "envs")
    assert "reach: Reach the target number" in listing and "[plug-in of package my-first-env" in listing
    checks = creditflow_cli(venv_python, tmp_path, "envs", "check", "reach")
    assert checks.count("pass") == 8 and "truncate" in checks  # truncate: skip (the example has none)
    creditflow_cli(venv_python, tmp_path, "sft", "--env", "reach", "--out", "runs/reach", *TINY_SFT, *TINY_POLICY)
    assert (tmp_path / "runs/reach/sft_model/config.json").exists()
    done = creditflow_cli(venv_python, tmp_path, "train", "--env", "reach", "--algo", "rewardflow", "--model",
                          "runs/reach/sft_model", "--out", "runs/reach-rf", *TINY_RL, "tensorboard=false")
    assert "done: step 1" in done
    metrics = json.loads(creditflow_cli(venv_python, tmp_path, "eval", "--env", "reach", "--model", "runs/reach-rf",
                                        "--episodes", "2", "generation.max_new_tokens=8"))
    assert metrics["eval/episodes"] == 2 and 0 <= metrics["eval/success_rate"] <= 1


@pytest.mark.slow
def test_the_example_trains_from_python(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(EXAMPLE))
    monkeypatch.setattr(envs, "_REGISTERED", {})
    from my_first_env import ReachEnv

    out = tmp_path / "run"
    result = creditflow.train([f"out_dir={out}", "rl.algo=rewardflow", *TINY_SFT, *TINY_RL, *TINY_POLICY],
                              env=ReachEnv)
    assert (out / "sft_model" / "config.json").exists() and result.metrics["step"] == 1
    # the run records the env as module:Class, the name the CLI resolves where the package is importable
    assert yaml.safe_load((out / "config.yaml").read_text())["env"]["name"] == "my_first_env.env:ReachEnv"
    evaluated = creditflow.evaluate(["generation.max_new_tokens=8"], env=ReachEnv, model=result.model, episodes=2)
    assert evaluated.metrics["eval/episodes"] == 2
    for module in ("my_first_env", "my_first_env.env"):
        sys.modules.pop(module, None)
