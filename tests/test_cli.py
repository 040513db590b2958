"""Bad input never produces a traceback: one line, exit code 2, nothing half-written."""

import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from creditflow import credit
from creditflow.cli import app, main
from creditflow.cli.runtime import quiet_third_party_warnings
from creditflow.config import build_config


def cli(*args, cwd=None):
    proc = subprocess.run([sys.executable, "-m", "creditflow", *args], capture_output=True, text=True, cwd=cwd,
                          timeout=300)
    return proc.returncode, proc.stdout, proc.stderr


def one_line_error(stderr):
    lines = [l for l in stderr.strip().splitlines() if l.strip()]
    assert "Traceback" not in stderr
    assert len(lines) == 1, stderr
    assert lines[0].startswith("error: ")
    return lines[0]


@pytest.mark.parametrize("args,needle", [
    (["train", "--env", "nowhere"], "unknown env 'nowhere'"),
    (["train", "--algo", "magic"], "unknown estimator 'magic'"),
    (["train", "rl.lr=abc"], "rl.lr"),
    (["train", "rl.nonsense=1"], "rl.nonsense: unknown option"),
    (["train", "env.kwargs.colour=red"], "no option(s) colour"),
    (["train", "justaword"], "must look like key=value"),
    (["train", "--model", "/no/such/model"], "does not exist"),
    (["eval", "--model", "/no/such/model"], "does not exist"),
])
def test_user_errors_are_one_line_exit_2(tmp_path, args, needle):
    code, out, err = cli(*args, "out_dir=" + str(tmp_path / "run"), cwd=tmp_path)
    assert code == 2
    assert needle in one_line_error(err)
    assert not (tmp_path / "run" / "metrics.jsonl").exists()


def test_malformed_yaml_names_file_and_line(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("rl:\n  lr: 1e-5\n  steps: [1,\n")
    code, _, err = cli("train", "--config", str(bad))
    assert code == 2
    line = one_line_error(err)
    assert "bad.yaml:" in line and "invalid YAML" in line


def test_missing_config_file(tmp_path):
    code, _, err = cli("train", "--config", str(tmp_path / "nope.yaml"))
    assert code == 2 and "does not exist" in one_line_error(err)


def test_model_dir_without_config(tmp_path):
    (tmp_path / "empty").mkdir()
    code, _, err = cli("eval", "--model", str(tmp_path / "empty"))
    assert code == 2 and "no config.json" in one_line_error(err)


def test_resume_without_checkpoint(tmp_path):
    code, _, err = cli("train", "--resume", str(tmp_path))
    assert code == 2 and "no config.yaml" in one_line_error(err)


def test_unknown_command_and_option_exit_2():
    assert cli("frobnicate")[0] == 2
    assert cli("train", "--frobnicate")[0] == 2


def test_envs_lists_sokoban_with_options():
    code, out, _ = cli("envs")
    assert code == 0 and "sokoban" in out and "num_boxes = 1" in out


def test_help_lists_commands():
    code, out, _ = cli("--help")
    for name in ("demo", "train", "sft", "eval", "envs"):
        assert name in out


def test_unknown_credit_knob_fails_before_any_work(tmp_path):
    code, _, err = cli("train", "--algo", "rewardflow", "rl.credit.gama=0.9", f"out_dir={tmp_path / 'r'}")
    assert code == 2 and "no knob 'gama'" in one_line_error(err)
    assert not (tmp_path / "r").exists()


def test_shipped_configs_validate():
    files = sorted((Path(__file__).parents[1] / "configs").glob("*.yaml"))
    assert files
    for f in files:
        cfg = build_config(f)
        credit.validate_knobs(cfg.rl.algo, cfg.rl.credit)


def test_third_party_warnings_are_filtered_at_the_cli_ours_are_not():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        quiet_third_party_warnings()
        warnings.warn_explicit("gradient_checkpointing is deprecated", FutureWarning, "modeling_utils.py", 1,
                               module="transformers.modeling_utils")
        warnings.warn_explicit("old TRL flag", DeprecationWarning, "sft_config.py", 1, module="trl.trainer.sft_config")
        warnings.warn_explicit("ours", UserWarning, "config.py", 1, module="creditflow.config")
    assert [str(w.message) for w in caught] == ["ours"]


def test_unknown_option_gets_a_close_suggestion_only(capsys):
    for argv, line in ((["train", "--ot", "x"], "No such option: --ot (did you mean --out?)"),
                       (["train", "--bogus"], "No such option: --bogus; see `creditflow train --help`")):
        with pytest.raises(SystemExit) as exc:
            main(argv)
        assert exc.value.code == 2
        assert line in one_line_error(capsys.readouterr().err)


def test_flags_become_overrides_in_one_way():
    """Given flags (literal values) come first and None flags not at all; key=value arguments follow, prefixed, so
    that they win (what every command that has both does)."""
    from creditflow.cli.options import config_overrides

    items = config_overrides({"env.name": "null", "out_dir": None, "rro.tasks": 3}, ["size=5"], prefix="env.kwargs.")
    assert items == ["env.name=null", "rro.tasks=3", "env.kwargs.size=5"]
    cfg = build_config(None, items)
    assert cfg.env.name == "null" and cfg.rro.tasks == 3 and cfg.env.kwargs == {"size": 5}
    assert cfg.out_dir == build_config(None, []).out_dir
    assert build_config(None, config_overrides({"rl.algo": "grpo"}, ["rl.algo=rloo"])).rl.algo == "rloo"
