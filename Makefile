# The two commands: `make dev` runs the system, `make test` runs every test.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
ARGS   ?=

.PHONY: dev test lint install-dev install-test bench-publish bench-infer bench-batching clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip

# Runtime + local stack only: torch stays optional (ONNX Runtime is the default runtime).
$(VENV)/.dev-installed: pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q -e '.[local]'
	touch $@

# Everything the tests need, TorchScript included (torch==2.13.0, the CPU wheel).
$(VENV)/.test-installed: pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q -e '.[dev,torch]'
	touch $@ $(VENV)/.dev-installed

install-dev: $(VENV)/.dev-installed
install-test: $(VENV)/.test-installed

dev: install-dev
	$(BIN)/lambdaserve dev $(ARGS)

test: install-test
	$(BIN)/pytest $(ARGS)

lint: install-test
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

bench-publish: install-test
	$(BIN)/python scripts/bench_publish.py $(ARGS)

bench-infer: install-test
	$(BIN)/python scripts/bench_infer.py $(ARGS)

bench-batching: install-test
	$(BIN)/python scripts/bench_batching.py $(ARGS)

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis
