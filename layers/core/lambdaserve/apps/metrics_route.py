"""``GET /metrics``: Triton's per-model metrics in Prometheus' text format, on the inference
port as Triton's HTTP service serves them."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fastapi import FastAPI, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from lambdaserve.batching.dynamic_batcher import TensorBatcher
from lambdaserve.errors import LambdaServeError
from lambdaserve.metrics.prometheus import Pending, metrics_registry
from lambdaserve.metrics.stats import StatsRegistry
from lambdaserve.serving.data_plane import InferenceDataPlane

_DOCUMENTED: dict[int | str, dict[str, Any]] = {
    200: {
        "description": (
            "Triton's per-model metrics (nv_inference_*, labels model and version) in "
            "Prometheus' text exposition format, for what this process has served"
        ),
        "content": {"text/plain": {"schema": {"type": "string"}}},
    }
}


def install_metrics(
    app: FastAPI, stats: Callable[[], StatsRegistry], pending: Pending | None = None
) -> None:
    registry = metrics_registry(stats, pending)

    @app.get(
        "/metrics",
        response_class=Response,
        responses=_DOCUMENTED,
        summary="Prometheus metrics with Triton's names",
    )
    async def metrics() -> Response:
        return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)


def queued_in(batcher: TensorBatcher, plane: InferenceDataPlane) -> Pending:
    """What waits in the batcher, by the version it will run on (the default version for
    requests that named none)."""

    def pending() -> dict[tuple[str, str], int]:
        counts: dict[tuple[str, str], int] = {}
        for (model, asked), waiting in batcher.waiting().items():
            try:
                version = asked if asked is not None else plane.resolve_now(model, None).version
            except LambdaServeError:
                continue
            key = (model, str(version))
            counts[key] = counts.get(key, 0) + waiting
        return counts

    return pending
