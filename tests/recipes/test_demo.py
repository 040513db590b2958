import subprocess
import sys

import pytest


@pytest.mark.slow
def test_demo_quick_smoke(tmp_path):
    out = tmp_path / "demo"
    proc = subprocess.run([sys.executable, "-m", "creditflow", "demo", "--quick", "--out", str(out),
                           "tensorboard=false"], capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert (out / "report" / "learning_curve.png").stat().st_size > 1000
    summary = (out / "report" / "summary.md").read_text()
    assert "eval/success_rate" in summary and "before RL" in summary
    assert (out / "sft_model" / "config.json").exists()
    assert (out / "checkpoints" / "latest").exists()


def test_the_demo_presets_are_yaml_shipped_in_the_package():
    """creditflow/configs/demo/*.yaml are package data (an installed wheel reads them) and make valid configs."""
    import tomllib
    from importlib import resources
    from pathlib import Path

    from creditflow.recipes import demo

    folder = resources.files("creditflow") / "configs" / "demo"
    assert sorted(p.name for p in folder.iterdir()) == ["demo.yaml", "earlier_grpo.yaml", "env_settings.yaml",
                                                        "quick.yaml"]
    pyproject = tomllib.loads((Path(__file__).resolve().parents[2] / "pyproject.toml").read_text())
    assert pyproject["tool"]["setuptools"]["package-data"]["creditflow"] == ["configs/demo/*.yaml"]
    cfg = demo.demo_config(demo.EARLIER_GRPO_DEMO, quick=True)
    assert (cfg.rl.algo, cfg.rl.lr, cfg.rl.steps, cfg.env.kwargs) == ("grpo", 4e-4, 2, {"describe_positions": True})
    assert demo.demo_config([]).model_dump()["sft"]["lr"] == demo.DEMO_DEFAULTS["sft"]["lr"] == 1e-3
