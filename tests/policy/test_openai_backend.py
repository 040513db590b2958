"""The openai backend against a local fake OpenAI-compatible server: answers, retries, one-line errors, and an
RRO collection that survives a server failure and resumes. (tests/recipes/test_vllm_serve.py runs the same
paths against a real ``vllm serve``.)"""

import json
import socket

import pytest

pytest.importorskip("openai")

from creditflow.cli import main  # noqa: E402
from creditflow.config import build_config  # noqa: E402
from creditflow.policy.backends.base import SamplingParams  # noqa: E402
from creditflow.policy.backends.hf import HFBackend  # noqa: E402
from creditflow.policy.backends.openai import BackendUnavailable, OpenAIBackend  # noqa: E402
from creditflow.policy.load import load_policy  # noqa: E402
from creditflow.recipes.rro import run_collect  # noqa: E402
from tests.policy.openai_fake import FakeCompletionsServer  # noqa: E402


@pytest.fixture(scope="module")
def policy(tiny_model_dir):
    return load_policy(tiny_model_dir, "cpu", "float32")


def prompts(tok, n=3):
    return [tok.apply_chat_template([{"role": "user", "content": f"push the box {i}"}], add_generation_prompt=True,
                                    tokenize=True)["input_ids"] for i in range(n)]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_answers_are_the_in_process_generations(policy):
    model, tok = policy
    local = HFBackend(model, tok)
    params = SamplingParams(max_new_tokens=8, temperature=0.0, stop_token_ids=[5])
    with FakeCompletionsServer(local) as server:
        remote = OpenAIBackend(server.base_url, "tiny", tok).generate(prompts(tok), params)
    for want, have in zip(local.generate(prompts(tok), params), remote):
        assert (have.text, have.token_ids, have.logprobs) == (want.text, want.token_ids, want.logprobs)


@pytest.mark.parametrize("mode,needle", [("malformed", "malformed response"), ("down", "cannot connect"),
                                         ("slow", "timed out"), ("unavailable", "HTTP 503")])
def test_failures_are_retried_with_backoff_then_one_error(policy, mode, needle):
    _, tok = policy
    waits = []
    server = FakeCompletionsServer(None, mode=mode, delay=2.0, fail_after=0 if mode == "unavailable" else None)
    with server:
        url = f"http://127.0.0.1:{free_port()}/v1" if mode == "down" else server.base_url
        backend = OpenAIBackend(url, "tiny", tok, timeout=0.5, retries=2, backoff=0.25, sleep=waits.append)
        with pytest.raises(BackendUnavailable) as err:
            backend.generate(prompts(tok, 1), SamplingParams(max_new_tokens=4))
    assert needle in str(err.value) and "3 tries" in str(err.value)
    assert "\n" not in str(err.value)
    assert waits == [0.25, 0.5]  # exponential backoff between the three tries
    if mode != "down":
        assert server.requests == 3


def test_cli_eval_with_the_server_down_is_one_line_exit_2(tiny_model_dir, tmp_path, capsys):
    url = f"http://127.0.0.1:{free_port()}/v1"
    with pytest.raises(SystemExit) as exit_:
        main(["eval", "--backend", "openai", "--base-url", url, "--model-name", "tiny", "--model",
              str(tiny_model_dir), "--episodes", "1", "policy.request_retries=1", f"out_dir={tmp_path}"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert err[0].startswith(f"error: OpenAI-compatible server at {url}: cannot connect") and err[0].endswith("2 tries")


COLLECT = ["--exploration", "rising", "--candidates", "2", "--mc-rollouts", "1", "--tasks", "3",
           "generation.temperature=0", "generation.max_new_tokens=8", "rollout.max_steps=3", "policy.device=cpu",
           "policy.dtype=float32", "policy.request_retries=0"]


def collected(data_dir) -> dict:
    """The data of a collection, without wall-clock fields."""
    tasks = [{k: v for k, v in json.loads(line).items() if k != "seconds"}
             for line in (data_dir / "tasks.jsonl").read_text().splitlines()]
    return {"pairs": (data_dir / "preferences.jsonl").read_text(), "tasks": tasks,
            "trajectories": (data_dir / "trajectories.jsonl").read_text()}


def collect(server_url, model_dir, out, capsys) -> tuple[int, list[str]]:
    with pytest.raises(SystemExit) as exit_:
        main(["rro", "collect", "--backend", "openai", "--base-url", server_url, "--model-name", "tiny", "--model",
              str(model_dir), "--out", str(out), *COLLECT])
    return exit_.value.code, capsys.readouterr().err.strip().splitlines()


def test_rro_collection_keeps_finished_tasks_when_the_server_fails_and_resumes(policy, tiny_model_dir, tmp_path,
                                                                                capsys):
    model, tok = policy
    in_process = build_config(None, [f"out_dir={tmp_path / 'hf'}", f"policy.model={tiny_model_dir}",
                                     "rro.exploration=rising", "rro.candidates=2", "rro.mc_rollouts=1", "rro.tasks=3",
                                     *COLLECT[8:]])
    run_collect(in_process, log=lambda *_: None)
    want = collected(tmp_path / "hf" / "preferences")

    with FakeCompletionsServer(HFBackend(model, tok)) as server:
        code, _ = collect(server.base_url, tiny_model_dir, tmp_path / "ok", capsys)
        assert code == 0
        assert collected(tmp_path / "ok" / "preferences") == want  # greedy: the server gives the same data
        per_run = server.requests

    with FakeCompletionsServer(HFBackend(model, tok), fail_after=per_run * 2 // 3) as server:
        code, err = collect(server.base_url, tiny_model_dir, tmp_path / "broken", capsys)
    assert code == 2
    assert err[-1].startswith("error: OpenAI-compatible server at") and "HTTP 503" in err[-1]
    assert not any("Traceback" in line for line in err)
    done = (tmp_path / "broken" / "preferences" / "tasks.jsonl").read_text().splitlines()
    assert 1 <= len(done) < 3  # what finished before the failure is kept

    with FakeCompletionsServer(HFBackend(model, tok)) as server:
        code, err = collect(server.base_url, tiny_model_dir, tmp_path / "broken", capsys)
    assert code == 0
    assert any("resuming" in line for line in err)
    assert collected(tmp_path / "broken" / "preferences") == want
