"""Triton's per-model Prometheus metrics, read from the ``StatsRegistry`` when scraped.

The names and labels (``model``, ``version``) are Triton's, so dashboards and alerts written
against Triton's ``/metrics`` read lambdaserve's. Nothing is counted on the request path and
nothing twice: each scrape turns ``StatsRegistry.snapshot()`` (the ``/v2/models/stats``
body) into metric families, so ``/metrics`` and ``/stats`` always agree.

Triton declares these families as counters and writes them without a ``_total`` suffix;
prometheus_client writes every counter's samples as ``<name>_total``, which would rename
every series a Triton dashboard queries. The families are therefore exposed untyped under
Triton's exact names; their values only ever grow (until the process restarts), so
``rate()`` and ``increase()`` read them as they read Triton's.

A Python model's ``pb_utils.MetricFamily`` counter is typed, as Triton types it: ``exposition``
writes a counter whose samples carry the family's own name with ``# HELP``, ``# TYPE ...
counter`` and samples all under that name (prometheus_client would head it ``<name>_total``,
and python_backend's custom_metrics example looks for ``# HELP requests_process_latency_ns``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric, UnknownMetricFamily
from prometheus_client.registry import Collector

from lambdaserve.metrics.custom import CUSTOM_METRICS
from lambdaserve.metrics.stats import StatsRegistry

LABELS = ("model", "version")
FAILURE = "nv_inference_request_failure"
# in Triton's order (its exposition sorts them): clients match the series line as a string
FAILURE_LABELS = ("model", "reason", "version")
FAILURE_DOC = (
    "Inference requests that failed, by Triton's reason (REJECTED, CANCELED, BACKEND, OTHER)"
)
PENDING = "nv_inference_pending_request_count"
PENDING_DOC = "Requests waiting in this process's dynamic batcher for their model to run them"
# (model, version) -> requests waiting in a queue of this process
Pending = Callable[[], Mapping[tuple[str, str], int]]


@dataclass(frozen=True)
class Family:
    """One of Triton's per-model families and how to read it from a ``model_stats`` entry."""

    name: str
    documentation: str
    read: Callable[[dict[str, Any]], float]


def _count(key: str) -> Callable[[dict[str, Any]], float]:
    return lambda entry: float(entry["inference_stats"][key]["count"])


def _us(key: str) -> Callable[[dict[str, Any]], float]:
    return lambda entry: entry["inference_stats"][key]["ns"] / 1000


FAMILIES = (
    Family(
        "nv_inference_request_success",
        "Inference requests that succeeded (a request counts once whatever its batch size)",
        _count("success"),
    ),
    Family(
        "nv_inference_count",
        "Inferences performed (a batch of n counts n)",
        lambda entry: float(entry["inference_count"]),
    ),
    Family(
        "nv_inference_exec_count",
        "Model executions performed (one per batch run)",
        lambda entry: float(entry["execution_count"]),
    ),
    Family(
        "nv_inference_request_duration_us",
        "Cumulative duration of successful inference requests, in microseconds",
        _us("success"),
    ),
    Family(
        "nv_inference_queue_duration_us",
        "Cumulative time requests waited in the scheduling queue, in microseconds",
        _us("queue"),
    ),
    Family(
        "nv_inference_compute_input_duration_us",
        "Cumulative time spent preparing inference inputs, in microseconds",
        _us("compute_input"),
    ),
    Family(
        "nv_inference_compute_infer_duration_us",
        "Cumulative time spent running the model, in microseconds",
        _us("compute_infer"),
    ),
    Family(
        "nv_inference_compute_output_duration_us",
        "Cumulative time spent producing inference outputs, in microseconds",
        _us("compute_output"),
    ),
    # Triton's response cache families (per model; Triton writes them when a cache is on)
    Family(
        "nv_cache_num_hits_per_model",
        "Requests answered from the response cache",
        _count("cache_hit"),
    ),
    Family(
        "nv_cache_num_misses_per_model",
        "Response cache lookups that found no answer (the model ran)",
        _count("cache_miss"),
    ),
    Family(
        "nv_cache_hit_duration_per_model",
        "Cumulative time of response cache hits (lookup and read), in microseconds",
        _us("cache_hit"),
    ),
    Family(
        "nv_cache_miss_duration_per_model",
        "Cumulative time of response cache misses (lookup and insertion), in microseconds",
        _us("cache_miss"),
    ),
)
TOO_LARGE = "lambdaserve_cache_entries_too_large"
TOO_LARGE_DOC = (
    "Successful answers the response cache did not keep: over its per-entry bound "
    "(LAMBDASERVE_RESPONSE_CACHE_MAX_ENTRY_BYTES)"
)

MEMORY = "lambdaserve_model_memory_bytes"
MEMORY_DOC = (
    "Memory a loaded model version holds, measured at its load (this process's resident set "
    "before and after, plus its worker processes'), in bytes: what residency counts against "
    "LAMBDASERVE_MAX_LOADED_BYTES"
)


class TritonMetrics:
    """A prometheus_client collector: Triton's families, one series per model version."""

    def __init__(self, stats: Callable[[], StatsRegistry], pending: Pending | None = None) -> None:
        self._stats = stats
        self._pending = pending or dict

    def describe(self) -> Iterable[Metric]:
        return [
            *(UnknownMetricFamily(f.name, f.documentation, labels=LABELS) for f in FAMILIES),
            UnknownMetricFamily(FAILURE, FAILURE_DOC, labels=FAILURE_LABELS),
            GaugeMetricFamily(PENDING, PENDING_DOC, labels=LABELS),
            UnknownMetricFamily(TOO_LARGE, TOO_LARGE_DOC, labels=LABELS),
            GaugeMetricFamily(MEMORY, MEMORY_DOC, labels=LABELS),
        ]

    def collect(self) -> Iterable[Metric]:
        registry = self._stats()
        entries = registry.snapshot()["model_stats"]
        for family in FAMILIES:
            metric = UnknownMetricFamily(family.name, family.documentation, labels=LABELS)
            for entry in entries:
                metric.add_metric([entry["name"], entry["version"]], family.read(entry))
            yield metric
        failures = UnknownMetricFamily(FAILURE, FAILURE_DOC, labels=FAILURE_LABELS)
        for (model, version), reasons in registry.failures_by_reason().items():
            for reason, count in reasons.items():
                failures.add_metric([model, reason, str(version)], float(count))
        yield failures
        waiting = dict(self._pending())
        pending = GaugeMetricFamily(PENDING, PENDING_DOC, labels=LABELS)
        for labels in sorted({(e["name"], e["version"]) for e in entries} | set(waiting)):
            pending.add_metric(list(labels), float(waiting.get(labels, 0)))
        yield pending
        too_large = UnknownMetricFamily(TOO_LARGE, TOO_LARGE_DOC, labels=LABELS)
        for (model, version), count in registry.cache_too_large().items():
            too_large.add_metric([model, str(version)], float(count))
        yield too_large
        memory = GaugeMetricFamily(MEMORY, MEMORY_DOC, labels=LABELS)
        for (model, version), size in registry.memory().items():
            memory.add_metric([model, str(version)], float(size))
        yield memory


def metrics_registry(
    stats: Callable[[], StatsRegistry], pending: Pending | None = None
) -> CollectorRegistry:
    """A registry of its own (not prometheus_client's global one): one per app, so several
    servers in one process each answer for their own ``StatsRegistry``."""
    registry = CollectorRegistry()
    registry.register(TritonMetrics(stats, pending))
    registry.register(CUSTOM_METRICS)
    return registry


class _Families(Collector):
    """A collector of the given families (what ``generate_latest`` writes one family from)."""

    def __init__(self, *families: Metric) -> None:
        self._families = families

    def collect(self) -> Iterable[Metric]:
        return self._families


def exposition(registry: Collector) -> bytes:
    """``registry`` in Prometheus' text format, as ``generate_latest`` writes it, but for a
    counter whose samples are named as the family (Triton's): headed by its own name."""
    parts = []
    for family in registry.collect():
        samples = family.samples
        if family.type != "counter" or not samples or any(s.name != family.name for s in samples):
            parts.append(generate_latest(_Families(family)))
            continue
        untyped = Metric(family.name, family.documentation, "unknown")
        untyped.samples = samples
        text = generate_latest(_Families(untyped)).decode()
        typed = f"# TYPE {family.name} counter\n"
        parts.append(text.replace(f"# TYPE {family.name} untyped\n", typed, 1).encode())
    return b"".join(parts)
