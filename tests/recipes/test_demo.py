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
    assert "A --quick smoke run" in summary and "its numbers are noise" in summary  # issue 90
    assert "Held-out success is measured on 4 tasks" in summary
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


def test_the_learning_curve_keeps_one_colour_per_split_whole_steps_and_a_rolling_mean():
    """Issue 90: the two panels used to swap colours, label fractional steps and plot raw per-step training success."""
    from matplotlib.colors import same_color

    from creditflow.recipes.report import (EVAL_COLOUR, TRAIN_COLOUR, learning_curve_figure, noise_note,
                                           rolling_mean)

    rows = [{"step": 0, "eval/success_rate": 0.25, "eval/reward": 0.1}]
    rows += [{"step": s, "train/success_rate": float(s % 2), "train/reward": float(s % 2) - 0.5,
              **({"eval/success_rate": 0.5, "eval/reward": 0.2} if s % 10 == 0 else {})} for s in range(1, 31)]
    fig = learning_curve_figure(rows, "t")
    for ax in fig.axes:
        lines = {line.get_label(): line for line in ax.get_lines()}
        assert same_color(lines["held-out (greedy)"].get_color(), EVAL_COLOUR)
        assert same_color(lines["training rollouts (3-step mean)"].get_color(), TRAIN_COLOUR)
        smooth = lines["training rollouts (3-step mean)"].get_ydata()
        assert max(smooth[2:]) - min(smooth[2:]) < 0.5  # the 0/1 alternation, averaged
        assert all(float(t).is_integer() for t in ax.get_xticks())
    assert rolling_mean([0, 1, 0, 1], 2) == [0, 0.5, 0.5, 0.5]
    assert noise_note(4, 0.25).startswith("Held-out success is measured on 4 tasks, in steps of 0.25: at 0.25 its 95% "
                                          "interval is [0.05, 0.70]")
