"""Per-model counts of one infer invocation, written as CloudWatch EMF lines when it ends.

One line per (model, version) the invocation ran, each step of a pipeline included, and one
per custom metric series the model's code recorded (``pb_utils.MetricFamily``, a TorchServe
handler's ``context.metrics``): Lambda has no ``/metrics`` to scrape, so they reach
CloudWatch this way, with their own name, unit and labels as dimensions. The
lines are built directly in the Embedded Metric Format rather than with Powertools'
``single_metric``: that cost ~41 us a line against ~3 us here (measured), and a 3-step
pipeline writes four lines on every request's latency path.
"""

from __future__ import annotations

import sys
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Mapping
from typing import Any, TextIO

import orjson

from lambdaserve.metrics.custom import GAUGE, HISTOGRAM, Recorded
from lambdaserve.metrics.stats import Execution

NAMESPACE = "lambdaserve"
_DIRECTIVE = {
    "Namespace": NAMESPACE,
    # Per version, and per service (the dashboard's fleet totals).
    "Dimensions": [["model", "version", "service"], ["service"]],
    "Metrics": [
        {"Name": "Inferences", "Unit": "Count"},
        {"Name": "InferenceErrors", "Unit": "Count"},
        {"Name": "InferenceMs", "Unit": "Milliseconds"},
    ],
}
# A Lambda invocation's billed compute, the version's share (Lambda's unit: GB-seconds)
_COST = {"Name": "ComputeGbSeconds", "Unit": "None"}
# Versions whose invocation asked the response cache: its hits and misses too
_CACHE_DIRECTIVE = {
    **_DIRECTIVE,
    "Metrics": [
        *_DIRECTIVE["Metrics"],
        {"Name": "CacheHits", "Unit": "Count"},
        {"Name": "CacheMisses", "Unit": "Count"},
    ],
}


# Every metric a version's line may carry (the dashboard's per-model views read these)
VERSION_METRICS = frozenset(
    ["Inferences", "InferenceErrors", "InferenceMs", "CacheHits", "CacheMisses", _COST["Name"]]
)


class InvocationMetrics:
    """Counts per (model, version) until ``flush`` writes them (``StatsRegistry`` listener).

    ``memory_mb`` (a Lambda function's, None elsewhere): each invocation's billed compute,
    its duration since ``begin`` x its memory in GB, is split among the versions it ran,
    in proportion to their inference time (``ComputeGbSeconds``: cost per model, since one
    function serves many and its bill is one line)."""

    def __init__(
        self, service: str, stream: TextIO | None = None, memory_mb: int | None = None
    ) -> None:
        self._service = service
        self._stream = stream
        self._memory_gb = memory_mb / 1024 if memory_mb else None
        self._began: float | None = None
        self._lock = threading.Lock()
        self._pending: dict[tuple[str, int], list[float]] = defaultdict(lambda: [0, 0, 0.0, 0, 0])
        self._custom: dict[tuple[str, tuple[str, ...], tuple[str, ...]], _Custom] = {}
        # payload capture's counts (``watch_capture``) and what the last line reported
        self._capture: Callable[[], Mapping[str, int]] | None = None
        self._capture_seen: dict[str, int] = {}

    @property
    def service(self) -> str:
        """The ``service`` dimension of this process's lines."""
        return self._service

    def watch_capture(self, counts: Callable[[], Mapping[str, int]]) -> None:
        """Report payload capture's losses (records dropped or failed since the last line):
        Lambda has no ``/metrics``, and capture never fails an answer, so this is where its
        losses show."""
        self._capture = counts

    def record_custom(self, recorded: Recorded) -> None:
        """A custom metric's value (``CustomMetrics`` listener): summed for a counter, the last
        for a gauge, every observation (up to EMF's 100) for a histogram."""
        key = (recorded.name, recorded.labels, recorded.values)
        value = recorded.value
        with self._lock:
            entry = self._custom.setdefault(key, _Custom(recorded.kind, recorded.unit))
            if recorded.kind == GAUGE:
                entry.values = [value]
            elif recorded.kind == HISTOGRAM:
                if len(entry.values) < _MAX_VALUES:
                    entry.values.append(value)
            else:
                entry.values = [sum(entry.values) + value]

    def record(self, model: str, version: int, execution: Execution | None, fail_ns: int) -> None:
        with self._lock:
            entry = self._pending[(model, version)]
            if execution is None:
                entry[1] += 1
            else:
                entry[0] += execution.requests
                entry[2] += execution.total_ns / 1e6

    def record_cache(self, model: str, version: int, hit: bool) -> None:
        """A response cache lookup (``StatsRegistry`` cache listener); a hit is also an
        answered request (``Inferences``), as Triton counts hits as successes."""
        with self._lock:
            entry = self._pending[(model, version)]
            if hit:
                entry[0] += 1
                entry[3] += 1
            else:
                entry[4] += 1

    def begin(self) -> None:
        """An invocation starts (its billed duration runs from here to ``flush``)."""
        self._began = time.monotonic()

    def flush(self) -> None:
        with self._lock:
            pending, self._pending = self._pending, defaultdict(lambda: [0, 0, 0.0, 0, 0])
            custom, self._custom = self._custom, {}
        began, self._began = self._began, None
        losses = self._capture_losses()
        if not pending and not custom and not losses:
            return
        timestamp = int(time.time() * 1000)
        shares = _compute_shares(pending, self._memory_gb, began)
        lines = [
            orjson.dumps(
                _version_line(
                    timestamp, self._service, (model, version), counts, shares.get((model, version))
                )
            )
            for (model, version), counts in pending.items()
        ]
        lines += [
            orjson.dumps(_custom_line(timestamp, self._service, key, entry))
            for key, entry in custom.items()
        ]
        if losses:
            lines.append(orjson.dumps(_capture_line(timestamp, self._service, losses)))
        stream = self._stream or sys.stdout
        stream.write(b"\n".join(lines).decode() + "\n")
        stream.flush()

    def _capture_losses(self) -> dict[str, int]:
        if self._capture is None:
            return {}
        counts = self._capture()
        losses = {
            name: counts.get(key, 0) - self._capture_seen.get(key, 0)
            for name, key in (("CaptureDropped", "dropped"), ("CaptureFailed", "failed"))
        }
        self._capture_seen = dict(counts)
        return losses if any(losses.values()) else {}


def _capture_line(timestamp: int, service: str, losses: Mapping[str, int]) -> dict[str, Any]:
    directive = {
        "Namespace": NAMESPACE,
        "Dimensions": [["service"]],
        "Metrics": [{"Name": name, "Unit": "Count"} for name in losses],
    }
    return {
        "_aws": {"Timestamp": timestamp, "CloudWatchMetrics": [directive]},
        "service": service,
        **losses,
    }


def _compute_shares(
    pending: dict[tuple[str, int], list[float]], memory_gb: float | None, began: float | None
) -> dict[tuple[str, int], float]:
    """Each version's share of the invocation's GB-seconds: by its inference time, or
    evenly among versions that took none (cache hits, failures)."""
    if memory_gb is None or began is None or not pending:
        return {}
    billed = (time.monotonic() - began) * memory_gb
    total_ms = sum(counts[2] for counts in pending.values())
    return {
        key: round(billed * (counts[2] / total_ms if total_ms else 1 / len(pending)), 9)
        for key, counts in pending.items()
    }


def _version_line(
    timestamp: int,
    service: str,
    version_of: tuple[str, int],
    counts: list[float],
    gb_seconds: float | None = None,
) -> dict[str, Any]:
    model, version = version_of
    ok, failed, ms, hits, misses = counts
    cached = bool(hits or misses)
    directive = _CACHE_DIRECTIVE if cached else _DIRECTIVE
    if gb_seconds is not None:
        directive = {**directive, "Metrics": [*directive["Metrics"], _COST]}
    line = {
        "_aws": {"Timestamp": timestamp, "CloudWatchMetrics": [directive]},
        "model": model,
        "version": str(version),
        "service": service,
        "Inferences": ok,
        "InferenceErrors": failed,
        "InferenceMs": round(ms, 3),
    }
    if cached:
        line |= {"CacheHits": hits, "CacheMisses": misses}
    if gb_seconds is not None:
        line["ComputeGbSeconds"] = gb_seconds
    return line


_MAX_VALUES = 100  # EMF takes at most 100 values of one metric in one document
# TorchServe's and common unit spellings as CloudWatch's units
_UNITS = {
    "ms": "Milliseconds",
    "milliseconds": "Milliseconds",
    "s": "Seconds",
    "seconds": "Seconds",
    "us": "Microseconds",
    "microseconds": "Microseconds",
    "percent": "Percent",
    "%": "Percent",
    "mb": "Megabytes",
    "megabytes": "Megabytes",
    "gb": "Gigabytes",
    "kb": "Kilobytes",
    "b": "Bytes",
    "bytes": "Bytes",
    "count": "Count",
}


class _Custom:
    def __init__(self, kind: str, unit: str) -> None:
        self.kind = kind
        self.unit = unit
        self.values: list[float] = []


def _custom_line(
    timestamp: int,
    service: str,
    key: tuple[str, tuple[str, ...], tuple[str, ...]],
    entry: _Custom,
) -> dict[str, Any]:
    name, labels, values = key
    unit = _UNITS.get(entry.unit.lower(), "Count" if entry.kind == "counter" else "None")
    directive = {
        "Namespace": NAMESPACE,
        "Dimensions": [[*labels, "service"]],
        "Metrics": [{"Name": name, "Unit": unit}],
    }
    value: float | list[float] = entry.values if entry.kind == HISTOGRAM else entry.values[0]
    return {
        "_aws": {"Timestamp": timestamp, "CloudWatchMetrics": [directive]},
        "service": service,
        **dict(zip(labels, values, strict=True)),
        name: value,
    }


# A cold start's phases (``metrics.cold_starts``), as CloudWatch metrics per version
_COLD_METRICS = {
    "init_ms": ("ColdStartInitMs", "Milliseconds"),
    "fetch_ms": ("ColdStartFetchMs", "Milliseconds"),
    "fetch_bytes": ("ColdStartFetchBytes", "Bytes"),
    "load_ms": ("ColdStartLoadMs", "Milliseconds"),
    "warmup_ms": ("ColdStartWarmupMs", "Milliseconds"),
    "first_inference_ms": ("ColdStartFirstInferenceMs", "Milliseconds"),
}
_COLD_UNITS = dict(_COLD_METRICS.values()) | {"ColdStartMs": "Milliseconds"}


def write_cold_start(
    service: str, stream: TextIO | None = None
) -> Callable[[str, int, Mapping[str, Any]], None]:
    """``ColdStarts``' ``emit``: one EMF line per write of a cold start's phases (the load's,
    then the first inference's), at once (a cold start is rare; nothing waits for a flush)."""

    def emit(model: str, version: int, fields: Mapping[str, Any]) -> None:
        found = {name: fields[key] for key, (name, _) in _COLD_METRICS.items() if key in fields}
        if "first_inference_ms" in fields:  # the sample is whole: its total
            found["ColdStartMs"] = fields["total_ms"]
        if not found:
            return
        directive = {
            "Namespace": NAMESPACE,
            "Dimensions": _DIRECTIVE["Dimensions"],  # per version and per service, as theirs
            "Metrics": [{"Name": name, "Unit": _COLD_UNITS[name]} for name in found],
        }
        line = {
            "_aws": {"Timestamp": int(time.time() * 1000), "CloudWatchMetrics": [directive]},
            "model": model,
            "version": str(version),
            "service": service,
            "where": str(fields.get("where", "")),
            **found,
        }
        out = stream or sys.stdout
        out.write(orjson.dumps(line).decode() + "\n")
        out.flush()

    return emit
