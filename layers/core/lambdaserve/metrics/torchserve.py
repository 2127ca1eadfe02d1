"""TorchServe's metrics API families (``metrics_mode=prometheus``), read when scraped.

TorchServe serves these on its metrics port (8082): per-model request counts and cumulative
latencies (``ts_inference_requests_total``, ``ts_inference_latency_microseconds``,
``ts_queue_latency_microseconds``, labels ``model_name``, ``model_version``, ``hostname``),
the host's response counts (``Requests2XX``/``4XX``/``5XX``) and its CPU, memory and disk
gauges (``Level="Host"``). The per-model numbers come from the same ``StatsRegistry`` as
Triton's ``/metrics`` and ``/v2/models/stats``, so the three always agree.

TorchServe writes them with the Java Prometheus client, whose text format ends every label
set with a comma (``{Level="Host",Hostname="h",}``) and gives counters no ``_total``
suffix; Prometheus reads both forms, but scripts and tests written against TorchServe
match its exact text (its own Postman collection does). The families are built with
prometheus_client; ``render`` writes them in that dialect.
"""

from __future__ import annotations

import socket
from collections.abc import Callable, Collection, Iterable
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry
from prometheus_client.core import Metric, UnknownMetricFamily
from prometheus_client.utils import floatToGoString

from lambdaserve.metrics.custom import CUSTOM_METRICS
from lambdaserve.metrics.stats import StatsRegistry

MODEL_LABELS = ("model_name", "model_version", "hostname")
HOST_LABELS = ("Level", "Hostname")
# TorchServe's declared types and units; the families are untyped in prometheus_client so
# their sample names stay TorchServe's (a counter's samples would gain ``_total``).
TYPES: dict[str, tuple[str, str]] = {
    "ts_inference_requests_total": ("counter", "Count"),
    "ts_inference_latency_microseconds": ("counter", "Microseconds"),
    "ts_queue_latency_microseconds": ("counter", "Microseconds"),
    "Requests2XX": ("counter", "Count"),
    "Requests4XX": ("counter", "Count"),
    "Requests5XX": ("counter", "Count"),
    "CPUUtilization": ("gauge", "Percent"),
    "MemoryUsed": ("gauge", "Megabytes"),
    "MemoryAvailable": ("gauge", "Megabytes"),
    "MemoryUtilization": ("gauge", "Percent"),
    "DiskUsage": ("gauge", "Gigabytes"),
    "DiskAvailable": ("gauge", "Gigabytes"),
    "DiskUtilization": ("gauge", "Percent"),
}
ResponseCounts = Callable[[], dict[str, int]]  # "2XX"/"4XX"/"5XX" -> responses answered


class TorchServeMetrics:
    """A prometheus_client collector of TorchServe's frontend and host families."""

    def __init__(
        self,
        stats: Callable[[], StatsRegistry],
        responses: ResponseCounts,
        disk_path: str = "/",
        hostname: str | None = None,
    ) -> None:
        self._stats = stats
        self._responses = responses
        self._disk_path = disk_path
        self._hostname = hostname or socket.gethostname()

    def describe(self) -> Iterable[Metric]:
        return [_family(name) for name in TYPES]

    def collect(self) -> Iterable[Metric]:
        host = self._hostname
        requests, latency, queued = (
            _family("ts_inference_requests_total"),
            _family("ts_inference_latency_microseconds"),
            _family("ts_queue_latency_microseconds"),
        )
        for entry in self._stats().snapshot()["model_stats"]:
            labels = [entry["name"], entry["version"], host]
            times = entry["inference_stats"]
            requests.add_metric(labels, float(times["success"]["count"] + times["fail"]["count"]))
            latency.add_metric(labels, (times["success"]["ns"] + times["fail"]["ns"]) / 1000)
            queued.add_metric(labels, times["queue"]["ns"] / 1000)
        yield from (requests, latency, queued)
        counts = self._responses()
        for status in ("2XX", "4XX", "5XX"):
            family = _family(f"Requests{status}")
            if counts.get(status):  # TorchServe lists a count once it has one
                family.add_metric(["Host", host], float(counts[status]))
            yield family
        for name, value in _host_gauges(self._disk_path).items():
            family = _family(name)
            family.add_metric(["Host", host], value)
            yield family


def _family(name: str) -> UnknownMetricFamily:
    kind, unit = TYPES[name]
    labels = MODEL_LABELS if name.startswith("ts_") else HOST_LABELS
    return UnknownMetricFamily(
        name, f"Torchserve prometheus {kind} metric with unit: {unit}", labels=labels
    )


def _host_gauges(disk_path: str) -> dict[str, float]:
    """The host's CPU, memory and disk, as TorchServe's system metrics report them (psutil,
    which TorchServe also uses; without it, no host gauges)."""
    try:
        import psutil
    except ImportError:
        return {}
    memory = psutil.virtual_memory()
    disk = psutil.disk_usage(_existing(Path(disk_path)))
    return {
        "CPUUtilization": float(psutil.cpu_percent(interval=None)),
        "MemoryUsed": memory.used / 2**20,
        "MemoryAvailable": memory.available / 2**20,
        "MemoryUtilization": float(memory.percent),
        "DiskUsage": disk.used / 2**30,
        "DiskAvailable": disk.free / 2**30,
        "DiskUtilization": float(disk.percent),
    }


def _existing(path: Path) -> str:
    """The disk holding ``path``: its nearest existing ancestor (the cache may not exist yet)."""
    while not path.exists() and path != path.parent:
        path = path.parent
    return str(path)


def torchserve_registry(
    stats: Callable[[], StatsRegistry], responses: ResponseCounts, disk_path: str = "/"
) -> CollectorRegistry:
    registry = CollectorRegistry()
    registry.register(TorchServeMetrics(stats, responses, disk_path))
    registry.register(CUSTOM_METRICS)
    return registry


def render(registry: CollectorRegistry, names: Collection[str] = ()) -> str:
    """The registry's families in the Java client's text format, only ``names`` if given
    (TorchServe's ``?name[]=`` filter)."""
    lines: list[str] = []
    for family in registry.collect():
        if names and family.name not in names:
            continue
        kind = TYPES.get(family.name, ("untyped", ""))[0]
        lines += [f"# HELP {family.name} {family.documentation}", f"# TYPE {family.name} {kind}"]
        lines += [
            f"{sample.name}{_labels(sample.labels)} {floatToGoString(sample.value)}"  # type: ignore[no-untyped-call]
            for sample in family.samples
        ]
    return "\n".join(lines) + "\n"


def _labels(labels: dict[str, Any]) -> str:
    if not labels:
        return ""
    return "{" + "".join(f'{key}="{_escaped(value)}",' for key, value in labels.items()) + "}"


def _escaped(value: Any) -> str:
    return str(value).replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")
