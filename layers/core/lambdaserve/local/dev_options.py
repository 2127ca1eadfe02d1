"""How ``lambdaserve dev`` runs: its ports and switches, as the command line sets them."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class DevOptions:
    host: str = "127.0.0.1"
    inference_port: int = 8080
    management_port: int = 8081
    metrics_port: int | None = None  # TorchServe's metrics API (the CLI's default: 8082)
    grpc_port: int = 0  # every peer's gRPC services (the CLI's default: 8001, Triton's)
    # requests and answers over Lambda's 6 MB are a 413, as deployed (--no-lambda-limits)
    response_limit: bool = True
    aws_port: int = 4566
    aws_endpoint: str | None = None
    demo: bool = True
    model_repository: Path | None = None
    log_level: str = "info"
    access_log: bool = True
    # --server-mode: `serve` on this port, the HTTP API as deployed on http_api_port
    server_mode_port: int | None = None
    http_api_port: int = 9000
