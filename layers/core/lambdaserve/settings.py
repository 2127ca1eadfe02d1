"""Configuration from the environment, read once into one typed object."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

DEFAULT_MAX_MODEL_BYTES = 2 * 1024**3


def default_work_dir() -> str:
    """A work directory of this user's and this process group's own: two lambdaserves on one
    machine (two users, two `make dev`) never share scratch or cache; the processes of one
    `serve --workers N` or `dev` (one group, and their model-code workers) do."""
    import tempfile

    return os.path.join(tempfile.gettempdir(), f"lambdaserve-{os.getuid()}-{os.getpgrp()}")


@dataclass(frozen=True)
class Settings:
    """Everything the domain needs to know about its environment.

    Names follow the deployed stack's environment variables; the defaults are the
    local resource names of the contract.
    """

    region: str = "us-east-1"
    endpoint_url: str | None = None
    bucket: str = "lambdaserve-models"
    # the model bucket's KMS key (template: ModelBucketKmsKeyArn), the one key the functions'
    # roles may encrypt with: a data_capture kms_key_id must name it; empty: none may be named
    kms_key_arn: str = ""
    table: str = "lambdaserve-catalog"
    repository_events_queue: str = "lambdaserve-repository-events"
    requests_queue: str = "lambdaserve-requests"
    gpu_requests_queue: str | None = None
    # The queues of Triton's priority levels 2, 3 ... in order (template.yaml's PriorityQueues);
    # level 1 is ``requests_queue``. Empty: one level.
    priority_queues: tuple[str, ...] = ()
    models_prefix: str = "models/"
    max_model_bytes: int = DEFAULT_MAX_MODEL_BYTES
    work_dir: str = field(default_factory=default_work_dir)
    cache_bytes: int = 4 * 1024**3
    device: str = "auto"
    intra_op_threads: int = 0
    max_loaded_versions: int = 4
    # Residency in bytes (LAMBDASERVE_MAX_LOADED_BYTES; 0: the count alone): by default sized
    # from the function's memory, else the task's (cgroup), by ``resident_budget``
    max_loaded_bytes: int = 0
    catalog_ttl_s: float = 2.0
    # the long-running servers' gRPC server: pygrpc-native's (grpcio's servicers, HTTP/2 and
    # gRPC in Rust outside the GIL: 2.2x grpcio's rate at c=32, docs/benchmarks.md), or grpcio's
    grpc_server: str = "native"
    max_request_bytes: int = 6 * 1024**2
    # A synchronous answer's size on the wire: Lambda's 6 MB (0: none, as in `serve`)
    max_response_bytes: int = 6 * 1024**2
    default_max_batch_size: int = 8
    infer_function: str | None = None
    results_ttl_s: int = 24 * 3600
    max_receive_count: int = 3
    topup_messages: int = 90
    topup_window_s: float = 0.02
    retry_delay_s: float = 2.0
    visibility_lease_s: int = 30
    reply_to_allowed: tuple[str, ...] = ()
    client_timeout_s: float = 30.0
    python_models: bool = False
    # Triton's --model-control-mode: "explicit" (the default) takes load / unload; "none" or
    # "poll" refuse them as Triton does (models follow the repository: uploads, deletes)
    model_control_mode: str = "explicit"
    # Model code (handlers, Python models, workflows, pipelines) in worker processes of its
    # own, as TorchServe's workers and Triton's stubs; LAMBDASERVE_CODE_WORKERS=0 runs it in
    # this process (no isolation; docs/benchmarks.md says when that is faster). The timeout
    # where a model sets none is TorchServe's default responseTimeout.
    code_workers: bool = True
    # Triton's rate limiter (`serve`/`dev` --rate-limit, --rate-limit-resource): "off" or
    # "execution_count", and the NAME:COUNT[:DEVICE] resources given
    rate_limit: str = "off"
    rate_limit_resources: tuple[str, ...] = ()
    worker_timeout_s: float = 120.0
    # In a Lambda function (AWS_LAMBDA_FUNCTION_NAME set): one worker per version, no scaling.
    in_lambda: bool = False
    # How many `serve --workers N` processes share this one's ports (its supervisor sets
    # LAMBDASERVE_WORKERS in each): each has its own model-code workers, so none scales them.
    serve_processes: int = 1
    # The code-validator Lambda (template: EnablePythonModels) that runs a Python model's
    # auto_complete_config at publish; empty: a child process without credentials.
    code_validator_function: str = ""
    # The infer function the manage functions ask to load model code before it is READY
    # (template: EnablePythonModels); empty: no check where it serves (dev wires its own).
    serving_check_function: str = ""
    # none | snapstart | provisioned (template parameter InferColdStart)
    cold_start: str = "none"
    # What the SnapStart hook may load before the snapshot (model file bytes); 0: half the
    # function's memory (AWS_LAMBDA_FUNCTION_MEMORY_SIZE) or 1 GiB outside Lambda.
    preload_bytes: int = 0
    # Background prefetch of newly READY default versions (serve, worker); 0 turns it off.
    prefetch_interval_s: float = 10.0
    # How often `lambdaserve dev` judges its active rollouts (deployed: the rollouts
    # function's schedule).
    rollout_interval_s: float = 10.0
    # Server mode: the `lambdaserve serve` service (behind its load balancer) that answers
    # synchronous requests for KIND_GPU models; empty: none, they run here.
    server_url: str = ""
    # How long a request for a server-mode model waits for the queue when the service has
    # no capacity, before answering 202 with its status URL (inside API Gateway's 29 s).
    server_wait_s: float = 25.0
    # `serve` on SIGTERM: how long it keeps answering while it reports not ready (so a load
    # balancer takes it out of rotation first), then how long in-flight requests may take.
    drain_delay_s: float = 0.0
    drain_timeout_s: float = 15.0
    # Triton's response cache (models opt in with response_cache { enable: true }): this
    # process's LRU in bytes (0: none), the largest answer kept, and a shared Redis tier
    # (empty host: none) that every instance reads and writes.
    response_cache_bytes: int = 64 * 1024**2
    response_cache_max_entry_bytes: int = 1024**2
    redis_host: str = ""
    redis_port: int = 6379
    redis_username: str = ""
    redis_password: str = ""
    redis_tls: bool = False
    redis_ttl_s: int = 3600
    redis_timeout_ms: int = 100
    # Triton's sequence batcher: where each sequence's record lives, "dynamodb" (the catalog
    # table) or "redis" (the endpoint above): every instance and task reads and writes it
    sequence_store: str = "dynamodb"
    # instance_group.count on the Lambda path: where each version's executions in flight
    # are counted fleet-wide, "dynamodb" (the catalog table) or "redis" (the endpoint above)
    inflight_store: str = "dynamodb"
    # Model environments (requirements files) at publish: the package index the sandbox
    # installs wheels from (a URL, or a local directory of wheels: --no-index --find-links)
    # and the most an environment may unpack to.
    package_index_url: str = "https://pypi.org/simple"
    env_max_bytes: int = 512 * 1024**2
    # The EventBridge bus (name or ARN) each version state change is announced on; empty:
    # none (catalog/state_events.py)
    event_bus: str = ""
    # A Lambda function's memory (AWS_LAMBDA_FUNCTION_MEMORY_SIZE), 0 elsewhere: what its
    # invocations are billed by, split per model in the EMF metrics
    lambda_memory_mb: int = 0
    # How often a long-running server writes its CPU seconds per model as EMF lines
    # (metrics/cpu_cost.py): every minute in an ECS task (its logs reach CloudWatch), 0 (off)
    # elsewhere unless LAMBDASERVE_COST_INTERVAL_S asks
    cost_interval_s: float = 0.0

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        """Build settings from environment variables (``LAMBDASERVE_*`` and AWS ones)."""
        env = os.environ if env is None else env
        defaults = cls()
        return cls(
            region=env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION") or defaults.region,
            endpoint_url=env.get("AWS_ENDPOINT_URL") or None,
            bucket=env.get("LAMBDASERVE_BUCKET", defaults.bucket),
            kms_key_arn=env.get("LAMBDASERVE_KMS_KEY_ARN", ""),
            table=env.get("LAMBDASERVE_TABLE", defaults.table),
            repository_events_queue=env.get(
                "LAMBDASERVE_REPOSITORY_EVENTS_QUEUE", defaults.repository_events_queue
            ),
            requests_queue=env.get("LAMBDASERVE_REQUESTS_QUEUE", defaults.requests_queue),
            gpu_requests_queue=env.get("LAMBDASERVE_GPU_REQUESTS_QUEUE") or None,
            priority_queues=tuple(
                name.strip()
                for name in env.get("LAMBDASERVE_PRIORITY_QUEUES", "").split(",")
                if name.strip()
            ),
            models_prefix=env.get("LAMBDASERVE_MODELS_PREFIX", defaults.models_prefix),
            max_model_bytes=int(
                env.get("LAMBDASERVE_MAX_MODEL_BYTES", str(defaults.max_model_bytes))
            ),
            work_dir=env.get("LAMBDASERVE_WORK_DIR", defaults.work_dir),
            cache_bytes=int(env.get("LAMBDASERVE_CACHE_BYTES", str(defaults.cache_bytes))),
            device=env.get("LAMBDASERVE_DEVICE", defaults.device),
            intra_op_threads=int(
                env.get("LAMBDASERVE_INTRA_OP_THREADS", str(defaults.intra_op_threads))
            ),
            max_loaded_versions=int(
                env.get("LAMBDASERVE_MAX_LOADED_VERSIONS", str(defaults.max_loaded_versions))
            ),
            max_loaded_bytes=_max_loaded_bytes(env),
            catalog_ttl_s=float(env.get("LAMBDASERVE_CATALOG_TTL_S", str(defaults.catalog_ttl_s))),
            grpc_server=env.get("LAMBDASERVE_GRPC_SERVER", defaults.grpc_server),
            max_request_bytes=int(
                env.get("LAMBDASERVE_MAX_REQUEST_BYTES", str(defaults.max_request_bytes))
            ),
            server_url=env.get("LAMBDASERVE_SERVER_URL", defaults.server_url).rstrip("/"),
            server_wait_s=float(env.get("LAMBDASERVE_SERVER_WAIT_S", str(defaults.server_wait_s))),
            drain_delay_s=float(env.get("LAMBDASERVE_DRAIN_DELAY_S", str(defaults.drain_delay_s))),
            drain_timeout_s=float(
                env.get("LAMBDASERVE_DRAIN_TIMEOUT_S", str(defaults.drain_timeout_s))
            ),
            max_response_bytes=int(
                env.get("LAMBDASERVE_MAX_RESPONSE_BYTES", str(defaults.max_response_bytes))
            ),
            default_max_batch_size=int(
                env.get("LAMBDASERVE_DEFAULT_MAX_BATCH_SIZE", str(defaults.default_max_batch_size))
            ),
            infer_function=env.get("LAMBDASERVE_INFER_FUNCTION") or None,
            results_ttl_s=int(env.get("LAMBDASERVE_RESULTS_TTL_S", str(defaults.results_ttl_s))),
            max_receive_count=int(
                env.get("LAMBDASERVE_MAX_RECEIVE_COUNT", str(defaults.max_receive_count))
            ),
            topup_messages=int(env.get("LAMBDASERVE_TOPUP_MESSAGES", str(defaults.topup_messages))),
            topup_window_s=float(
                env.get("LAMBDASERVE_TOPUP_WINDOW_S", str(defaults.topup_window_s))
            ),
            retry_delay_s=float(env.get("LAMBDASERVE_RETRY_DELAY_S", str(defaults.retry_delay_s))),
            visibility_lease_s=int(
                env.get("LAMBDASERVE_VISIBILITY_LEASE_S", str(defaults.visibility_lease_s))
            ),
            reply_to_allowed=tuple(
                entry.strip()
                for entry in env.get("LAMBDASERVE_REPLY_TO_ALLOWED", "").split(",")
                if entry.strip()
            ),
            python_models=env.get("LAMBDASERVE_PYTHON_MODELS", "").lower() in ("1", "true", "yes"),
            model_control_mode=_model_control_mode(env),
            code_workers=env.get("LAMBDASERVE_CODE_WORKERS", "1").lower()
            not in ("0", "false", "no", "off"),
            rate_limit=env.get("LAMBDASERVE_RATE_LIMIT", "off"),
            rate_limit_resources=tuple(
                r for r in env.get("LAMBDASERVE_RATE_LIMIT_RESOURCES", "").split(",") if r
            ),
            worker_timeout_s=float(
                env.get("LAMBDASERVE_WORKER_TIMEOUT_S", str(defaults.worker_timeout_s))
            ),
            in_lambda=bool(env.get("AWS_LAMBDA_FUNCTION_NAME")),
            serve_processes=int(env.get("LAMBDASERVE_WORKERS", "1") or "1"),
            code_validator_function=env.get("LAMBDASERVE_CODE_VALIDATOR_FUNCTION", ""),
            serving_check_function=env.get("LAMBDASERVE_SERVING_CHECK_FUNCTION", ""),
            client_timeout_s=float(
                env.get("LAMBDASERVE_CLIENT_TIMEOUT_S", str(defaults.client_timeout_s))
            ),
            cold_start=env.get("LAMBDASERVE_COLD_START", defaults.cold_start),
            preload_bytes=int(env.get("LAMBDASERVE_PRELOAD_BYTES", "0")) or _half_the_memory(env),
            prefetch_interval_s=float(
                env.get("LAMBDASERVE_PREFETCH_INTERVAL_S", str(defaults.prefetch_interval_s))
            ),
            rollout_interval_s=float(
                env.get("LAMBDASERVE_ROLLOUT_INTERVAL_S", str(defaults.rollout_interval_s))
            ),
            package_index_url=env.get("LAMBDASERVE_PACKAGE_INDEX_URL", "")
            or defaults.package_index_url,
            env_max_bytes=int(env.get("LAMBDASERVE_ENV_MAX_BYTES", "") or defaults.env_max_bytes),
            event_bus=env.get("LAMBDASERVE_EVENT_BUS", ""),
            lambda_memory_mb=int(env.get("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "") or 0)
            if env.get("AWS_LAMBDA_FUNCTION_NAME")
            else 0,
            cost_interval_s=float(
                env.get("LAMBDASERVE_COST_INTERVAL_S", "")
                or (60 if env.get("ECS_CONTAINER_METADATA_URI_V4") else 0)
            ),
            **_response_cache(env, defaults),
        )


def _response_cache(env: Mapping[str, str], defaults: Settings) -> dict[str, Any]:
    def number(name: str, default: int) -> int:
        return int(env.get(f"LAMBDASERVE_{name}", "") or default)

    return {
        "response_cache_bytes": number("RESPONSE_CACHE_BYTES", defaults.response_cache_bytes),
        "response_cache_max_entry_bytes": number(
            "RESPONSE_CACHE_MAX_ENTRY_BYTES", defaults.response_cache_max_entry_bytes
        ),
        "redis_host": env.get("LAMBDASERVE_REDIS_HOST", ""),
        "redis_port": number("REDIS_PORT", defaults.redis_port),
        "redis_username": env.get("LAMBDASERVE_REDIS_USERNAME", ""),
        "redis_password": env.get("LAMBDASERVE_REDIS_PASSWORD", ""),
        "redis_tls": env.get("LAMBDASERVE_REDIS_TLS", "").lower() in ("1", "true", "yes"),
        "redis_ttl_s": number("REDIS_TTL_S", defaults.redis_ttl_s),
        "redis_timeout_ms": number("REDIS_TIMEOUT_MS", defaults.redis_timeout_ms),
        "sequence_store": env.get("LAMBDASERVE_SEQUENCE_STORE", "") or defaults.sequence_store,
        "inflight_store": env.get("LAMBDASERVE_INFLIGHT_STORE", "") or defaults.inflight_store,
    }


# What a process holds besides its models: the interpreter, the runtimes' libraries, the
# web servers (measured: ~250 MB with onnxruntime and uvicorn imported)
RESERVED_BYTES = 256 * 1024**2
CGROUP = Path("/sys/fs/cgroup")


def _max_loaded_bytes(env: Mapping[str, str]) -> int:
    said = env.get("LAMBDASERVE_MAX_LOADED_BYTES", "").strip()
    if said:
        return int(said)
    if env.get("AWS_LAMBDA_FUNCTION_NAME") and env.get("AWS_LAMBDA_FUNCTION_MEMORY_SIZE"):
        return resident_budget(int(env["AWS_LAMBDA_FUNCTION_MEMORY_SIZE"]) * 1024**2)
    return resident_budget(memory_limit())


def resident_budget(limit: int) -> int:
    """The bytes of loaded versions a process of ``limit`` bytes of memory holds: three
    quarters of it less what the process itself needs (the rest is headroom for requests'
    tensors and the runtimes' working memory), at least a quarter; 0 (no bound) for no
    limit."""
    if limit <= 0:
        return 0
    return max(limit // 4, limit * 3 // 4 - RESERVED_BYTES)


def memory_limit(root: Path = CGROUP) -> int:
    """The memory this process's container may use (an ECS task's, a docker run -m): the
    cgroup's limit, v2 (memory.max) or v1 (memory.limit_in_bytes); 0 when unlimited or not
    in a container (a v1 "no limit" is a number larger than the machine's memory)."""
    for name in ("memory.max", "memory/memory.limit_in_bytes"):
        try:
            text = (root / name).read_text().strip()
        except OSError:
            continue
        if not text.isdigit():
            return 0  # "max": unlimited
        limit = int(text)
        physical = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        return limit if limit < physical else 0
    return 0


def _half_the_memory(env: Mapping[str, str]) -> int:
    megabytes = int(env.get("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "2048") or "2048")
    return megabytes * 1024**2 // 2


@cache
def get_settings() -> Settings:
    """The process-wide settings, read from the environment on first use."""
    return Settings.from_env()


MODEL_CONTROL_MODES = ("explicit", "none", "poll")


def _model_control_mode(env: Mapping[str, str]) -> str:
    mode = env.get("LAMBDASERVE_MODEL_CONTROL_MODE", "explicit").strip().lower() or "explicit"
    if mode not in MODEL_CONTROL_MODES:
        raise ValueError(
            f"LAMBDASERVE_MODEL_CONTROL_MODE={mode!r}: use one of {', '.join(MODEL_CONTROL_MODES)}"
        )
    return mode
