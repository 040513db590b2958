"""docs/trl.md "Offline, end to end" runs as written (issue 74 part 2): the page's ``walk_env.py``, its
``creditflow sft --tools`` command and its ``train_walk.py``, in an empty directory, with nothing downloaded, the
budgets cut to one step (each cut must find its number on the page, so the page and the test cannot drift)."""

import importlib.util
import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("trl", minversion="1.16.0")
if importlib.util.find_spec("verl") is not None or importlib.util.find_spec("skyrl") is not None:
    pytest.skip("the TRL integration is tested in the main environment", allow_module_level=True)

from transformers import AutoTokenizer  # noqa: E402
from trl.chat_template_utils import supports_tool_calling  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
SECTION = "## Offline, end to end"


def section_blocks() -> list[tuple[str, str]]:
    """``(language, code)`` of each fenced block of the section, in order."""
    text = (ROOT / "docs" / "trl.md").read_text()
    start = text.index(SECTION)
    end = text.find("\n## ", start + len(SECTION))
    return re.findall(r"^```(\w+)\n(.*?)^```$", text[start:end if end > 0 else None], re.S | re.M)


def cut(code: str, budgets: dict[str, str]) -> str:
    for old, new in budgets.items():
        assert code.count(old) == 1, f"docs/trl.md no longer has {old!r} once: update this test's budget cuts"
        code = code.replace(old, new)
    return code


def run(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
           "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false",
           "TRL_EXPERIMENTAL_SILENCE": "1"}
    proc = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, f"{shlex.join(args[:4])} failed:\n{proc.stderr[-3000:]}"
    return proc


def test_the_offline_example_of_docs_trl_runs_as_written(tmp_path):
    blocks = section_blocks()
    assert [lang for lang, _ in blocks] == ["python", "bash", "python"]
    (_, env_code), (_, command), (_, train_code) = blocks
    (tmp_path / "walk_env.py").write_text(env_code)

    command = cut(command.strip(), {"sft.demos=64": "sft.demos=8", "sft.epochs=3": "sft.epochs=1"})
    argv = shlex.split(command)
    assert argv[:2] == ["creditflow", "sft"] and "--tools" in argv
    run([sys.executable, "-m", "creditflow", *argv[1:]], tmp_path)
    model = tmp_path / "runs" / "walk" / "sft_model"
    tok = AutoTokenizer.from_pretrained(str(model))  # the saved model carries its template and parser
    assert supports_tool_calling(tok) and "tool_calls" in tok.response_template["fields"]

    train_code = cut(train_code, {"max_steps=150": "max_steps=1", "per_device_train_batch_size=16":
                                  "per_device_train_batch_size=2", "num_generations=8": "num_generations=2"})
    train_code += "\nimport json\nprint('LOG', json.dumps(trainer.state.log_history))\n"
    (tmp_path / "train_walk.py").write_text(train_code)
    out = run([sys.executable, "train_walk.py"], tmp_path).stdout
    log = json.loads(out.split("LOG ", 1)[1].splitlines()[0])
    step = next(row for row in log if "loss" in row)
    assert step["step"] == 1 and "credit/graph_nodes" in step and "tools/call_frequency" in step
