"""What ``lambdaserve serve`` prints as it starts: where each API listens, and how."""

from __future__ import annotations

from lambdaserve.processes.replica_contract import ServeOptions
from lambdaserve.settings import get_settings


def banner(options: ServeOptions, replicas: int) -> str:
    host, port, grpc = options.host, options.port, options.grpc_port
    metrics, management = options.metrics_port, options.management_port
    settings = get_settings()
    where = settings.endpoint_url or f"AWS ({settings.region})"
    return "\n".join(
        [
            "lambdaserve serve is running",
            f"  inference API     http://{host}:{port}/v2  (KServe v2 + Triton extensions; "
            "/predictions/<model>; /docs)",
            f"  catalog           {settings.table} via {where}; models from s3://"
            f"{settings.bucket}/{settings.models_prefix}",
            f"  batching          {'dynamic, per model version' if options.batching else 'off'}; "
            f"{replicas} worker process{'es' if replicas > 1 else ''}",
            f"  access log        {'on' if options.access_log else 'off (--access-log)'}",
            f"  gRPC              {host}:{grpc} (KServe v2/Triton, TF Serving, TorchServe, "
            "Paddle; grpc.health.v1)"
            if grpc
            else "  gRPC              off (--grpc-port)",
            f"  metrics           http://{host}:{port}/metrics (Triton's names)"
            + (f"; http://{host}:{metrics}/metrics (TorchServe's)" if metrics else ""),
            f"  management API    http://{host}:{management}/models (TorchServe's; /docs)"
            if management
            else "  management API    off (--management-port)",
            "Ctrl-C stops it.",
        ]
    )
