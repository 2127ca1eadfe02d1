# The two commands: `make dev` runs the system, `make test` runs every test. `make help` lists all.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
ARGS   ?=
TORCH  ?= 0
TORCHSERVE ?= 0
PADDLE ?= 0
TENSORFLOW ?= 0
OPENVINO ?= 0
VARIANT ?= cpu

.PHONY: help dev test install-redis test-localstack validate shipped-envs lock lock-upgrade lock-check test-latest test-grants build gpu-image server-image lint install-dev install-test install-torch \
	install-torchserve install-paddle install-tensorflow install-openvino \
	peer-suites bench-publish bench-infer bench-cold bench-batching bench-runtimes bench-peers \
	bench-pipelines bench-validate bench-grpc bench-hot-path bench-server-mode bench-cache bench-envs \
	bench-code-workers bench-workers robustness clean

help: ## this list
	@awk 'BEGIN {FS = ":.*## "} /^[a-z-]+:.*## / {printf "  make %-16s %s\n", $$1, $$2}' $(MAKEFILE_LIST)
	@echo "  ARGS=\"...\" passes flags (make dev ARGS=\"--model-repository ./models\"); TORCH=1 adds PyTorch to make dev, TORCHSERVE=1 TorchServe's ts for .mar handlers, PADDLE=1 Paddle Inference for Paddle 1.x models, TENSORFLOW=1 TensorFlow for the SavedModels OpenVINO does not serve, OPENVINO=1 OpenVINO for IR, SavedModels, TFLite and Paddle models"

$(BIN)/python:
	@echo "make: creating the virtual environment $(VENV) with $(PYTHON)"
	$(PYTHON) -m venv $(VENV)

# Installs come from the locks (locks/*.txt, scripts/lock.sh): exact versions, every file's hash
# checked, nothing resolved afresh; then lambdaserve itself, editable, built by the locked
# setuptools. torch's CPU wheel (torch==2.13.0+cpu): /opt/wheels on these machines, else PyTorch's
# CPU index.
LOCKED  = $(BIN)/pip install -q --require-hashes $(if $(wildcard /opt/wheels/torch-*),,--extra-index-url https://download.pytorch.org/whl/cpu) -r
EDITABLE = $(BIN)/pip install -q --no-deps --no-build-isolation -e .

# Runtime + local stack only: torch stays optional (ONNX Runtime is the default runtime).
$(VENV)/.dev-installed: pyproject.toml locks/dev.txt | $(BIN)/python
	@echo "make: installing lambdaserve (editable) with ONNX Runtime and the local stack (moto server, uvicorn) and Pillow for image pipelines into $(VENV), from locks/dev.txt ..."
	$(LOCKED) locks/dev.txt
	$(EDITABLE)
	touch $@

# Everything the tests need, TorchScript, OpenVINO and Paddle Inference included (torch==2.13.0
# and paddlepaddle==3.3.1, the CPU wheels).
$(VENV)/.test-installed: pyproject.toml locks/test.txt locks/peer-stubs.txt | $(BIN)/python
	@echo "make: installing lambdaserve with the test tools (pytest, schemathesis, ruff, mypy, cfn-lint, awscli), OpenVINO, torch==2.13.0 (CPU), paddlepaddle (CPU) and the peers' clients into $(VENV), from locks/test.txt ..."
	$(LOCKED) locks/test.txt
	$(EDITABLE)
	@# TF Serving's client stubs; their `tensorflow` requirement is met by tensorflow-cpu
	$(BIN)/pip install -q --require-hashes --no-deps -r locks/peer-stubs.txt
	@# Paddle Serving's pipeline stubs (its wheel pins an old protobuf: only the file is used)
	$(BIN)/pip download -q --no-deps -d $(VENV)/peer-wheels 'paddle-serving-server==0.9.0'
	touch $@ $(VENV)/.dev-installed $(VENV)/.torch-installed $(VENV)/.torchserve-installed \
	  $(VENV)/.paddle-installed $(VENV)/.openvino-installed $(VENV)/.tensorflow-installed

$(VENV)/.torch-installed: locks/dev-torch.txt | $(BIN)/python
	@echo "make: installing torch==2.13.0 (CPU) into $(VENV) for TorchScript models, from locks/dev-torch.txt ..."
	$(LOCKED) locks/dev-torch.txt
	$(EDITABLE)
	touch $@

# What .mar archives and handlers import: TorchServe's `ts` (its BaseHandler, built-in
# handlers and loader), torch, torchvision and captum (the `torchserve` extra).
$(VENV)/.torchserve-installed: pyproject.toml locks/dev-torchserve.txt | $(BIN)/python
	@echo "make: installing TorchServe's handler code (torchserve==0.12.0, torch==2.13.0, torchvision, captum) into $(VENV) for .mar archives and handlers, from locks/dev-torchserve.txt ..."
	$(LOCKED) locks/dev-torchserve.txt
	$(EDITABLE)
	touch $@ $(VENV)/.torch-installed

# Paddle Inference for the Paddle models OpenVINO does not read (the `paddle` extra).
$(VENV)/.paddle-installed: pyproject.toml locks/dev-paddle.txt | $(BIN)/python
	@echo "make: installing Paddle Inference (paddlepaddle==3.3.1, CPU) into $(VENV) for Paddle 1.x models (__model__) and old operators, from locks/dev-paddle.txt ..."
	$(LOCKED) locks/dev-paddle.txt
	$(EDITABLE)
	touch $@

# TensorFlow for the SavedModels OpenVINO does not serve (the `tensorflow` extra).
$(VENV)/.tensorflow-installed: pyproject.toml locks/dev-tensorflow.txt | $(BIN)/python
	@echo "make: installing TensorFlow (tensorflow-cpu 2.20) into $(VENV) for SavedModels OpenVINO does not serve, from locks/dev-tensorflow.txt ..."
	$(LOCKED) locks/dev-tensorflow.txt
	$(EDITABLE)
	touch $@

# OpenVINO for OpenVINO IR, TF SavedModels, TFLite and Paddle models (the `openvino` extra).
$(VENV)/.openvino-installed: pyproject.toml locks/dev-openvino.txt | $(BIN)/python
	@echo "make: installing OpenVINO into $(VENV) for OpenVINO IR, TF SavedModels, TFLite and Paddle models, from locks/dev-openvino.txt ..."
	$(LOCKED) locks/dev-openvino.txt
	$(EDITABLE)
	touch $@

# The locks (scripts/lock.sh, uv from locks/test.txt): lock after editing pyproject.toml or an
# .in file; lock-upgrade moves every pin forward (then make test, and commit what passes);
# lock-check fails when the locks and pyproject.toml disagree (.ci/run); test-latest runs the
# unit tests and the deployed journeys against every package's newest release, no lock.
lock: install-test ## re-lock locks/ after pyproject.toml or a locks/*.in file changed (uv)
	UV=$(BIN)/uv scripts/lock.sh
lock-upgrade: install-test ## move every pin in locks/ to the newest release pyproject.toml allows
	UV=$(BIN)/uv scripts/lock.sh --upgrade
lock-check: install-test ## fail when locks/ and pyproject.toml disagree
	UV=$(BIN)/uv scripts/lock.sh --check
# One template grant taken out at a time, the deployed journeys against each: every removal must
# fail one, naming the grant, or be kept on purpose (scripts/test_grants.py); hours, not in CI.
test-grants: install-test install-redis shipped-envs ## remove each grant of template.yaml in turn: a journey must fail naming it
	$(BIN)/python scripts/test_grants.py $(ARGS)

LATEST := .cache/latest
test-latest: install-test install-redis ## no lock: the newest release of everything, unit tests and deployed journeys, what moved
	UV=$(BIN)/uv $(BIN)/python scripts/test_latest.py $(LATEST) $(ARGS)

install-dev: $(VENV)/.dev-installed
install-test: $(VENV)/.test-installed
install-torch: $(VENV)/.torch-installed ## add PyTorch (TorchScript models) to .venv
install-torchserve: $(VENV)/.torchserve-installed ## add TorchServe's ts (.mar archives, BaseHandler handlers) to .venv
install-paddle: $(VENV)/.paddle-installed ## add Paddle Inference (Paddle 1.x __model__ models, old operators) to .venv
install-tensorflow: $(VENV)/.tensorflow-installed ## add TensorFlow (SavedModels OpenVINO does not serve, every signature) to .venv
install-openvino: $(VENV)/.openvino-installed ## add OpenVINO (OpenVINO IR, TF SavedModels, TFLite, Paddle models) to .venv

DEV_EXTRAS = $(if $(filter 1,$(TORCH)),install-torch) $(if $(filter 1,$(TORCHSERVE)),install-torchserve) \
	$(if $(filter 1,$(PADDLE)),install-paddle) $(if $(filter 1,$(OPENVINO)),install-openvino) \
	$(if $(filter 1,$(TENSORFLOW)),install-tensorflow)
DEPLOYED ?= 0
# OTLP_ENDPOINT=http://host:4318: every request's spans (OpenTelemetry mode, rate 1) to that
# OTLP/HTTP collector (Jaeger, Tempo, an OpenTelemetry Collector; /v1/traces is added)
comma := ,
TRACE_FLAGS = $(if $(OTLP_ENDPOINT),--trace-config mode=opentelemetry \
	--trace-config opentelemetry$(comma)url=$(OTLP_ENDPOINT)/v1/traces --trace-config level=TIMESTAMPS \
	--trace-config rate=1)
dev: install-dev $(DEV_EXTRAS) ## run the whole system locally (Ctrl-C stops it); DEPLOYED=1: as template.yaml deploys it; OTLP_ENDPOINT=URL: traces to that collector
	$(BIN)/lambdaserve dev $(if $(filter 1,$(DEPLOYED)),--deployed) $(TRACE_FLAGS) $(ARGS)

# The response cache's tests run a real redis-server: Debian's package, installed when missing.
SUDO := $(if $(filter 0,$(shell id -u)),,sudo)
install-redis:
	@command -v redis-server >/dev/null || { $(SUDO) apt-get install -y -q redis-server >/dev/null 2>&1 \
	  || { $(SUDO) apt-get update -q >/dev/null && $(SUDO) apt-get install -y -q redis-server >/dev/null; }; } \
	  || echo "make: could not install redis-server (apt-get install -y redis-server): the response cache's tests will fail saying so"

# Four pytest processes. The tests marked own_process load paddle's native library, which
# crashed the one shared process (SIGSEGV/SIGABRT inside libpaddle's first load, after
# hundreds of tests and a dozen other runtimes loaded; never in a process of its own), and
# paddle crashes loading after TensorFlow (the tests marked tensorflow, apart too); the
# deployed journeys switch moto's IAM checks on, process-wide (test-deployed, below). Exit 5
# (none collected, e.g. ARGS names one file) is no failure for the later ones. The first, the
# largest, runs on TEST_WORKERS pytest-xdist workers, each file whole on one worker (its
# fixtures shared as written); its tests mostly wait on servers, so two share two cores.
TEST_WORKERS ?= 2
test: install-test install-redis ## install what the tests need and run every test
	$(BIN)/pytest -n $(TEST_WORKERS) --dist loadfile -m "not own_process and not deployed and not tensorflow" $(ARGS)
	$(BIN)/pytest -m own_process $(ARGS) || [ $$? -eq 5 ]
	$(BIN)/pytest -m tensorflow $(ARGS) || [ $$? -eq 5 ]
	$(BIN)/pytest -m deployed $(ARGS) || [ $$? -eq 5 ]

# The journeys through the stack as template.yaml deploys it: each function started from its
# shape in the template (handler, environment, queue sources) under its own role, IAM
# enforced in the emulator. moto's IAM switch is process-wide: a pytest process of its own.
test-deployed: install-test install-redis ## the journeys through the stack as template.yaml deploys it, IAM enforced
	$(BIN)/pytest -m deployed tests/deployed $(ARGS)

# The integration tests against LocalStack: LOCALSTACK_ENDPOINT when given, else a LocalStack
# started on this host without Docker (scripts/localstack.sh), stopped afterwards. By default
# the tests whose subject is the AWS services' behaviour (S3 events into SQS, DynamoDB's
# conditional writes, queues, DLQs, labels, archives in S3), within CI's budget;
# LOCALSTACK_SUITE=tests/integration runs every integration test there (about 19 minutes here).
LOCALSTACK_SUITE ?= $(addprefix tests/integration/test_,publish.py convergence.py event_pump.py \
	queued.py queued_hardening.py version_labels.py torchserve_archives.py)
test-localstack: install-test ## the AWS-facing integration tests on LocalStack (LOCALSTACK_SUITE=tests/integration: all)
	scripts/localstack.sh run $(BIN)/pytest $(LOCALSTACK_SUITE) $(ARGS)

# SAM CLI pins boto3 exactly, so it lives in its own venv. `sam build` of the zip functions
# needs python3.12 on PATH (pyenv's 3.12.1 here); it is skipped with a message without one.
SAM_VENV := .sam-cli
$(SAM_VENV)/bin/sam:
	$(PYTHON) -m venv $(SAM_VENV)
	$(SAM_VENV)/bin/pip install -q aws-sam-cli==1.170.0

# What `validate` proves offline: the template lints and transforms, the zip function and the
# layer build and import under python3.12, the manage image's package validates every format,
# and the torchserve variant's infer and CPU server-mode environments install and import.
# What only `make build` (Docker) and a deploy prove: the images build, and the stack deploys.
build: $(SAM_VENV)/bin/sam ## sam build of the Lambda images (Docker): VARIANT=cpu (default), torch, torchserve, paddle, tensorflow or mixed (torchserve and tensorflow)
	SAM_CLI_TELEMETRY=0 $(SAM_VENV)/bin/sam build -t $$($(PYTHON) scripts/image_variant.py $(VARIANT))

GPU_TORCHSERVE_EXTRAS := server,images,torchserve
gpu-image: ## docker build of the ECS GPU image (functions/infer/Dockerfile.gpu): push it, pass its URI as GpuImageUri; VARIANT=torchserve adds TorchServe's ts
	docker build -f functions/infer/Dockerfile.gpu -t lambdaserve-infer-gpu \
	  $(if $(filter torchserve,$(VARIANT)),--build-arg EXTRAS=$(GPU_TORCHSERVE_EXTRAS)) .

SERVER_TORCHSERVE_ARGS := --build-arg EXTRAS=server,images,openvino,torchserve \
	--build-arg TORCH_INDEX=https://download.pytorch.org/whl/cpu
SERVER_MIXED_ARGS := --build-arg EXTRAS=server,images,openvino,torchserve,tensorflow \
	--build-arg TORCH_INDEX=https://download.pytorch.org/whl/cpu
server-image: ## docker build of the CPU server-mode image (functions/infer/Dockerfile.cpu): push it, pass its URI as ServerModeImageUri with ServerModeKind=cpu; VARIANT=torchserve adds TorchServe's ts, VARIANT=tensorflow TensorFlow, VARIANT=mixed both
	docker build -f functions/infer/Dockerfile.cpu -t lambdaserve-serve-cpu \
	  $(if $(filter torchserve,$(VARIANT)),$(SERVER_TORCHSERVE_ARGS)) \
	  $(if $(filter mixed,$(VARIANT)),$(SERVER_MIXED_ARGS)) \
	  $(if $(filter tensorflow,$(VARIANT)),--build-arg EXTRAS=server,images,openvino,tensorflow \
	    --build-arg LOCK=serve-cpu-tensorflow) .

# validate's tools stay out of .venv (the venv `make dev` runs from): SAM CLI has its own venv,
# and manage_image_check.py's driver (the package and the emulator) gets this one.
VALIDATE_VENV := .cache/validate-venv
$(VALIDATE_VENV)/.installed: pyproject.toml locks/dev.txt
	$(PYTHON) -m venv $(VALIDATE_VENV)
	$(MAKE) VENV=$(VALIDATE_VENV) $(VALIDATE_VENV)/.dev-installed
	touch $@
	touch $@

validate: $(SAM_VENV)/bin/sam $(VALIDATE_VENV)/.installed ## sam validate --lint, sam build of the zip function, the manage image's validation, the torchserve images' installs resolved
	SAM_CLI_TELEMETRY=0 $(SAM_VENV)/bin/sam validate --lint --region us-east-1
	scripts/sam_build.sh $(SAM_VENV)/bin/sam
	$(VALIDATE_VENV)/bin/python scripts/manage_image_check.py
	$(PYTHON) scripts/shipped_envs.py resolve infer-mixed serve-cpu-mixed

# Every shipped environment built as its recipe builds it (the images' pip installs under
# python3.12, the batcher's layer, make dev's venv), under .cache/shipped-envs and reused until
# its recipe changes; then checked from inside it. The tests run the journeys from them.
shipped-envs: ## build each shipped environment from its recipe and check its imports (network)
	$(PYTHON) scripts/shipped_envs.py check $(ARGS)

# checkov pins its own dependencies (boto3, networkx, ...), so, like SAM CLI, it has a venv of
# its own; scripts/template_scan.py transforms the template with SAM's translator (.venv) and
# scans it with defaults and with every option on (about 15 s here).
CHECKOV_VENV := .cache/checkov-venv
$(CHECKOV_VENV)/bin/checkov:
	$(PYTHON) -m venv $(CHECKOV_VENV)
	$(CHECKOV_VENV)/bin/pip install -q checkov==3.3.30

lint: install-test $(CHECKOV_VENV)/bin/checkov ## ruff, ruff format, mypy strict, the rooms' layering (no circles, no arrow up), checkov over the template
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/lint-imports --no-cache
	$(BIN)/python scripts/import_graph.py --check
	$(BIN)/python scripts/template_scan.py $(CHECKOV_VENV)/bin/checkov

# The peers' own suites (Triton's client examples and qa/L0_http, TorchServe's Postman
# collections, KServe's v2 required API) against lambdaserve; checkouts under SUITES=DIR.
peer-suites: install-test ## the peers' own test suites against lambdaserve (SUITES=dir of checkouts)
	SUITES=$(SUITES) $(BIN)/python scripts/peer_suites.py $(ARGS)

bench-publish: install-test ## publish -> READY latency, convergence under shuffled events
	$(BIN)/python scripts/bench_publish.py $(ARGS)

bench-envs: install-test ## publish -> READY with a requirements.txt: first build, then reuse (ARGS="--index URL")
	$(BIN)/python scripts/bench_envs.py $(ARGS)

bench-infer: install-test ## inference overhead vs raw InferenceSession.run
	$(BIN)/python scripts/bench_infer.py $(ARGS)

bench-cold: install-test ## cold start: init per function, first request vs download + session, phases recorded for 1 MB, 100 MB, 1 GB models
	$(BIN)/python scripts/bench_cold.py $(ARGS)

bench-batching: install-test ## batching machinery cost, dynamic batcher vs none
	$(BIN)/python scripts/bench_batching.py $(ARGS)

bench-runtimes: install-test ## ONNX Runtime vs OpenVINO (+ SavedModels vs TF with TF_PYTHON=...): latency, load
	$(BIN)/python scripts/bench_runtimes.py $(ARGS)

# TorchServe 0.12.0 and Triton (nvidia-pytriton 0.7.0) side by side with lambdaserve; each peer
# gets its own venv under bench/peers/. wrk comes from Debian when it can be installed.
bench-peers: install-test ## side by side with TorchServe and Triton
	command -v wrk >/dev/null || apt-get install -y -q wrk >/dev/null 2>&1 \
	  || echo "bench-peers: no wrk; using the Python load generator"
	$(BIN)/pip install -q 'matplotlib>=3.8'
	$(BIN)/python scripts/bench_peers.py $(ARGS)
	$(BIN)/python scripts/bench_grpc.py

# req/s and CPU per request against worker count (1..cores), beside TorchServe's workers and
# Triton's instances; ARGS="--http uvicorn,granian" adds our app under granian (pip install granian)
bench-workers: install-test ## serve --workers 1..cores vs TorchServe workers and Triton instances
	command -v wrk >/dev/null || apt-get install -y -q wrk >/dev/null 2>&1 \
	  || echo "bench-workers: no wrk; using the Python load generator"
	$(BIN)/python scripts/bench_workers.py $(ARGS)

bench-cache: install-test ## response cache: hit vs computed (local, Redis), cold instance from Redis vs cold load
	$(BIN)/python scripts/bench_cache.py $(ARGS)

bench-grpc: install-test ## gRPC: lambdaserve serve vs Triton's gRPC front end (pytriton), and vs its HTTP path
	$(BIN)/python scripts/bench_grpc.py $(ARGS)

# Every hot door of `serve` (v2 JSON and binary, /predictions, :predict, gRPC) at c=1 and 32 with
# its CPU per request; ARGS="--trees new=.,base=/path/to/an/older/checkout" compares two trees.
bench-hot-path: install-test ## serve's hot doors, CPU per request; two source trees side by side
	$(BIN)/python scripts/bench_hot_path.py $(ARGS)

# A 3-step ensemble (Python pre -> ONNX -> Python post) vs its steps called directly, the
# Lambda warm path, and `serve` beside a TorchServe workflow and a pytriton callable at c=1, 32.
bench-server-mode: install-test ## server mode: the infer function forwarding to serve, vs serve directly
	$(BIN)/python scripts/bench_server_mode.py $(ARGS)

bench-pipelines: install-test ## pipelines vs TorchServe workflow, pytriton; Paddle Ops; decoupled streams
	command -v wrk >/dev/null || apt-get install -y -q wrk >/dev/null 2>&1 \
	  || echo "bench-pipelines: no wrk; using the Python load generator"
	$(BIN)/python scripts/bench_pipelines.py $(ARGS)
	$(BIN)/python scripts/bench_paddle_pipeline.py
	$(BIN)/python scripts/bench_decoupled.py

bench-validate: install-test ## publish-time validation of large versions: seconds, memory
	$(BIN)/python scripts/bench_validate.py $(ARGS)

bench-code-workers: install-test ## model code in a worker process vs in process: added latency per call
	$(BIN)/python scripts/bench_workers_code.py $(ARGS)

robustness: install-test ## hostile inputs, uploads, injections and a poisoned async burst
	$(BIN)/python scripts/robustness.py $(ARGS)

clean: ## remove the virtual environments and caches (the shipped environments too)
	rm -rf $(VENV) $(SAM_VENV) .cache .localstack .aws-sam .pytest_cache .mypy_cache .ruff_cache .hypothesis
