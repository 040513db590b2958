# Two commands do all set-up on a fresh machine:
#   make demo   -> local virtualenv + install + `creditflow demo` (the main job)
#   make test   -> local virtualenv + install + the test suite
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.creditflow-installed

.PHONY: install demo test bench clean

$(STAMP): pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -c constraints.txt torch==2.13.0
	$(PY) -m pip install -q -c constraints.txt -e ".[dev,all]"
	touch $(STAMP)

install: $(STAMP)

demo: install
	$(VENV)/bin/creditflow demo $(ARGS)

test: install
	$(PY) -m pytest -q $(ARGS)

bench: install
	$(PY) benchmarks/rollout_throughput.py

clean:
	rm -rf $(VENV) runs
