# Two commands on a fresh machine: `make demo` and `make test`.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
JOBS   ?= 2

.PHONY: setup system demo test lint bench fuzz clean

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip

$(STAMP): $(PY) pyproject.toml requirements/models.txt
	$(PY) -m pip install -q -e '.[test]'
	$(PY) -m pip install -q --no-deps -r requirements/models.txt
	touch $(STAMP)

setup: $(STAMP)

# Debian packages the board-transport tests need (a real sshd, the real adb).
system:
	@bash scripts/install-system-deps.sh

demo: setup
	$(VENV)/bin/qnn-ci run examples/ocr/qnn-ci.yaml --workdir .qnn-ci-demo

lint: setup
	$(VENV)/bin/ruff check qnn_ci tests fixtures benchmarks examples
	$(VENV)/bin/lint-imports --no-cache

test: setup system lint
	$(PY) -m pytest -n $(JOBS) -q tests

# 10,000 hypothesis examples per fuzz target (make test runs a bounded few).
fuzz: setup
	QNN_CI_FUZZ_EXAMPLES=10000 $(PY) -m pytest -n $(JOBS) -q tests/fuzz

bench: setup
	$(PY) -m pip install -q -e '.[bench]'
	$(PY) benchmarks/_run_all.py --table-out benchmarks/last-run.md

clean:
	rm -rf $(VENV) .qnn-ci-demo
