"""``GET /metrics``: Triton's per-model metrics in Prometheus' text format, on the inference
port as Triton's HTTP service serves them."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fastapi import FastAPI, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from lambdaserve.prometheus_metrics import metrics_registry
from lambdaserve.stats import StatsRegistry

_DOCUMENTED: dict[int | str, dict[str, Any]] = {
    200: {
        "description": (
            "Triton's per-model metrics (nv_inference_*, labels model and version) in "
            "Prometheus' text exposition format, for what this process has served"
        ),
        "content": {"text/plain": {"schema": {"type": "string"}}},
    }
}


def install_metrics(app: FastAPI, stats: Callable[[], StatsRegistry]) -> None:
    registry = metrics_registry(stats)

    @app.get(
        "/metrics",
        response_class=Response,
        responses=_DOCUMENTED,
        summary="Prometheus metrics with Triton's names",
    )
    async def metrics() -> Response:
        return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)
