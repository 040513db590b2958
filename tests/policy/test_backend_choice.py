"""policy.backend: misuse and a missing optional package are one-line errors with exit code 2."""

import importlib.util

import pytest

from creditflow.cli import main


def one_line_exit_2(args, capsys) -> str:
    with pytest.raises(SystemExit) as exit_:
        main(args)
    assert exit_.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: "), err
    return err[0]


def test_training_refuses_a_fixed_policy_server(tmp_path, capsys):
    line = one_line_exit_2(["train", "policy.backend=openai", f"out_dir={tmp_path}"], capsys)
    assert "serves fixed policies" in line


def test_rro_run_refuses_the_openai_backend(tmp_path, capsys):
    line = one_line_exit_2(["rro", "run", "policy.backend=openai", f"out_dir={tmp_path}"], capsys)
    assert "rro collect --backend openai" in line


def test_openai_backend_needs_a_server(tiny_model_dir, tmp_path, capsys):
    line = one_line_exit_2(["eval", "--backend", "openai", "--model", str(tiny_model_dir), f"out_dir={tmp_path}"],
                           capsys)
    assert "policy.base_url and policy.model_name" in line


def test_unknown_backend(tmp_path, capsys):
    line = one_line_exit_2(["train", "policy.backend=tgi", f"out_dir={tmp_path}"], capsys)
    assert "policy.backend" in line


@pytest.mark.skipif(importlib.util.find_spec("vllm") is not None, reason="vllm is installed here")
def test_vllm_backend_without_vllm_says_how_to_install_it(tiny_model_dir, tmp_path, capsys):
    line = one_line_exit_2(["eval", "--backend", "vllm", "--model", str(tiny_model_dir), "--episodes", "1",
                            "policy.device=cpu", f"out_dir={tmp_path}"], capsys)
    assert "make vllm" in line


@pytest.mark.skipif(importlib.util.find_spec("vllm") is not None, reason="vllm is installed here")
def test_training_without_vllm_fails_before_any_work(tmp_path, capsys):
    """No policy.model: the run would build and SFT the tiny policy (minutes) before the engine starts."""
    run = tmp_path / "run"
    line = one_line_exit_2(["train", "policy.backend=vllm", f"out_dir={run}"], capsys)
    assert "make vllm" in line
    assert not run.exists()


def test_rro_collect_without_a_server_fails_before_any_work(tmp_path, capsys):
    run = tmp_path / "run"
    line = one_line_exit_2(["rro", "collect", "--backend", "openai", "--out", str(run)], capsys)
    assert "policy.base_url and policy.model_name" in line
    assert not run.exists()
