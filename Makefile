# The two commands: `make dev` runs the system, `make test` runs every test.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
ARGS   ?=

.PHONY: dev test test-localstack validate lint install-dev install-test bench-publish bench-infer \
	bench-batching bench-peers clean

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

# The integration suite against LocalStack: LOCALSTACK_ENDPOINT when given, else a LocalStack
# started on this host without Docker (scripts/localstack.sh), stopped afterwards.
test-localstack: install-test
	scripts/localstack.sh run $(BIN)/pytest tests/integration $(ARGS)

# SAM CLI pins boto3 exactly, so it lives in its own venv. `sam build` of the zip functions
# needs python3.12 on PATH (pyenv's 3.12.1 here); it is skipped with a message without one.
SAM_VENV := .sam-cli
$(SAM_VENV)/bin/sam:
	$(PYTHON) -m venv $(SAM_VENV)
	$(SAM_VENV)/bin/pip install -q aws-sam-cli==1.170.0

validate: $(SAM_VENV)/bin/sam
	SAM_CLI_TELEMETRY=0 $(SAM_VENV)/bin/sam validate --lint --region us-east-1
	scripts/sam_build.sh $(SAM_VENV)/bin/sam

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

# TorchServe 0.12.0 and Triton (nvidia-pytriton 0.7.0) side by side with lambdaserve; each peer
# gets its own venv under bench/peers/. wrk comes from Debian when it can be installed.
bench-peers: install-test
	command -v wrk >/dev/null || apt-get install -y -q wrk >/dev/null 2>&1 \
	  || echo "bench-peers: no wrk; using the Python load generator"
	$(BIN)/pip install -q 'matplotlib>=3.8'
	$(BIN)/python scripts/bench_peers.py $(ARGS)

clean:
	rm -rf $(VENV) $(SAM_VENV) .localstack .aws-sam .pytest_cache .mypy_cache .ruff_cache .hypothesis
