"""``GET /metrics``: Triton's per-model metrics in Prometheus' text format, on the inference
port as Triton's HTTP service serves them."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from fastapi import FastAPI, Response
from prometheus_client import CONTENT_TYPE_LATEST
from prometheus_client.core import GaugeMetricFamily, Metric

from lambdaserve.batching.dynamic_batcher import TensorBatcher
from lambdaserve.errors import LambdaServeError
from lambdaserve.metrics.capture_counts import CaptureMetrics
from lambdaserve.metrics.cpu_cost import CpuCost, CpuCostMetrics
from lambdaserve.metrics.prometheus import LABELS, Pending, exposition, metrics_registry
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
    app: FastAPI,
    stats: Callable[[], StatsRegistry],
    pending: Pending | None = None,
    workers: Callable[[], Workers] | None = None,
    capture: Callable[[], Mapping[str, int]] | None = None,
) -> None:
    registry = metrics_registry(stats, pending)
    if workers is not None:
        registry.register(WorkerMemory(workers))
    if capture is not None:
        registry.register(CaptureMetrics(capture))
    registry.register(CpuCostMetrics(CpuCost(stats)))  # cost per model (long-running servers)

    @app.get(
        "/metrics",
        response_class=Response,
        responses=_DOCUMENTED,
        summary="Prometheus metrics with Triton's names",
    )
    async def metrics() -> Response:
        return Response(exposition(registry), media_type=CONTENT_TYPE_LATEST)


# (model, version) -> (live worker processes, their resident bytes)
Workers = dict[tuple[str, str], tuple[int, int]]


class WorkerMemory:
    """Each model version's worker processes and their memory (RSS), as TorchServe's
    describe reports a worker's ``memoryUsage``: one model's memory told from another's."""

    def __init__(self, workers: Callable[[], Workers]) -> None:
        self._workers = workers

    def describe(self) -> Iterable[Metric]:
        return [
            GaugeMetricFamily(_WORKERS, _WORKERS_DOC, labels=LABELS),
            GaugeMetricFamily(_MEMORY, _MEMORY_DOC, labels=LABELS),
        ]

    def collect(self) -> Iterable[Metric]:
        counts = GaugeMetricFamily(_WORKERS, _WORKERS_DOC, labels=LABELS)
        memory = GaugeMetricFamily(_MEMORY, _MEMORY_DOC, labels=LABELS)
        for (model, version), (count, rss) in sorted(self._workers().items()):
            counts.add_metric([model, version], float(count))
            memory.add_metric([model, version], float(rss))
        yield counts
        yield memory


_WORKERS = "lambdaserve_model_workers"
_WORKERS_DOC = "Worker processes running the model version's code"
_MEMORY = "lambdaserve_model_worker_memory_bytes"
_MEMORY_DOC = "Resident memory (RSS) of the model version's worker processes, in bytes"


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
