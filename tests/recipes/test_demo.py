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
