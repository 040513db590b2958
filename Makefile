# Two commands do all set-up on a fresh machine:
#   make demo   -> local virtualenv + install + `creditflow demo` (the main job)
#   make test   -> local virtualenvs + install + the test suite, then the verl integration tests
#   make verl   -> .venv-verl: verl 0.9.1 from the lock constraints-verl.txt, with creditflow (editable)
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.creditflow-installed
VERL_VENV ?= .venv-verl
VERL_PY := $(VERL_VENV)/bin/python
VERL_STAMP := $(VERL_VENV)/.creditflow-installed
# verl 0.9.1 imports these without declaring them (docs/verl.md)
VERL_PACKAGES := verl==0.9.1 cachetools uvicorn fastapi pytest

.PHONY: install demo test bench clean verl verl-lock

$(STAMP): pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -c constraints.txt torch==2.13.0
	$(PY) -m pip install -q -c constraints.txt -e ".[dev,all]"
	touch $(STAMP)

install: $(STAMP)

demo: install
	$(VENV)/bin/creditflow demo $(ARGS)

test: install verl
	$(PY) -m pytest -q $(ARGS)
	$(VERL_PY) -m pytest -q tests/integrations $(VERL_ARGS)

# torch first, from the local CPU wheel (any other torch build downloads GBs), then the lock
$(VERL_STAMP): pyproject.toml constraints-verl.txt
	$(PYTHON) -m venv $(VERL_VENV)
	$(VERL_PY) -m pip install -q --upgrade pip
	$(VERL_PY) -m pip install -q -c constraints-verl.txt torch==2.13.0
	$(VERL_PY) -m pip install -q -c constraints-verl.txt -e . $(VERL_PACKAGES)
	touch $(VERL_STAMP)

verl: $(VERL_STAMP)

# re-resolve the lock from scratch (unpinned verl 0.9.1 + creditflow) into constraints-verl.txt
verl-lock:
	rm -rf .venv-verl-lock
	$(PYTHON) -m venv .venv-verl-lock
	.venv-verl-lock/bin/python -m pip install -q --upgrade pip
	.venv-verl-lock/bin/python -m pip install -q -c constraints.txt torch==2.13.0
	.venv-verl-lock/bin/python -m pip install -q -c constraints.txt -e . $(VERL_PACKAGES)
	{ sed -n '1,3p' constraints-verl.txt; .venv-verl-lock/bin/python -m pip freeze --exclude-editable \
	  | sed 's/^torch==2.13.0+cpu$$/torch==2.13.0/'; } > constraints-verl.txt.new
	mv constraints-verl.txt.new constraints-verl.txt
	rm -rf .venv-verl-lock

bench: install
	$(PY) benchmarks/rollout_throughput.py

clean:
	rm -rf $(VENV) $(VERL_VENV) runs
