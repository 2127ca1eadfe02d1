"""Per model-version statistics in Triton's shape, as this process has seen them.

In the cloud each Lambda instance or ECS task keeps its own; CloudWatch (the EMF
metrics the handlers flush) holds the fleet view.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

from lambdaserve.errors import InferenceError, QueueRejected, RequestTimeout
from lambdaserve.metrics.cold_starts import ColdStart, ColdStarts

# Set while a version warms up: its runs, and the step calls an ensemble's run makes, are no
# client's requests, so no statistic or metric counts them (ts_* and nv_* count clients').
_WARMING_UP: ContextVar[bool] = ContextVar("lambdaserve_warming_up", default=False)


@contextmanager
def not_counted() -> Iterator[None]:
    """What runs inside (and in the threads it hands its context to) is never counted."""
    token = _WARMING_UP.set(True)
    try:
        yield
    finally:
        _WARMING_UP.reset(token)


# Triton's ``reason`` label of nv_inference_request_failure.
FAILURE_REASONS = ("REJECTED", "CANCELED", "BACKEND", "OTHER")


def failure_reason(error: BaseException | None) -> str:
    """BACKEND when the model's own run failed, REJECTED when the request's time ran out
    before it ran or its model's queue policy refused it, OTHER for the rest (a request the
    model cannot take)."""
    if isinstance(error, InferenceError):
        return "BACKEND"
    if isinstance(error, RequestTimeout | QueueRejected):
        return "REJECTED"
    return "OTHER"


@dataclass
class _Duration:
    count: int = 0
    ns: int = 0

    def add(self, ns: int, count: int = 1) -> None:
        self.count += count
        self.ns += ns

    def to_json(self) -> dict[str, int]:
        return {"count": self.count, "ns": self.ns}


@dataclass
class _BatchStats:
    compute_input: _Duration = field(default_factory=_Duration)
    compute_infer: _Duration = field(default_factory=_Duration)
    compute_output: _Duration = field(default_factory=_Duration)


@dataclass(frozen=True)
class Execution:
    """One model execution: how many requests it served, the batch size, its phases."""

    requests: int
    batch_size: int
    queue_ns: int
    input_ns: int
    infer_ns: int
    output_ns: int

    @property
    def total_ns(self) -> int:
        return self.queue_ns + self.input_ns + self.infer_ns + self.output_ns


@dataclass
class VersionStats:
    last_inference_ms: int = 0
    inference_count: int = 0
    execution_count: int = 0
    success: _Duration = field(default_factory=_Duration)
    fail: _Duration = field(default_factory=_Duration)
    queue: _Duration = field(default_factory=_Duration)
    compute_input: _Duration = field(default_factory=_Duration)
    compute_infer: _Duration = field(default_factory=_Duration)
    compute_output: _Duration = field(default_factory=_Duration)
    batches: dict[int, _BatchStats] = field(default_factory=dict)
    fail_reasons: dict[str, int] = field(default_factory=dict)
    cache_hit: _Duration = field(default_factory=_Duration)
    cache_miss: _Duration = field(default_factory=_Duration)
    # successful answers the response cache did not keep: over its per-entry bound
    cache_too_large: int = 0


Listener = Callable[[str, int, Execution | None, int], None]
# (model, version, hit): every response cache lookup (EMF's CacheHits / CacheMisses)
CacheListener = Callable[[str, int, bool], None]


class StatsRegistry:
    """Thread-safe counters per (model, version); ``listener`` sees every record (EMF)."""

    def __init__(
        self,
        listener: Listener | None = None,
        cache_listener: CacheListener | None = None,
        cold_starts: ColdStarts | None = None,
    ) -> None:
        self._lock = threading.Lock()
        # each load's phases and its first inference, where they are written (the catalog)
        self.cold_starts = cold_starts
        self._versions: dict[tuple[str, int], VersionStats] = {}
        # a loaded version's memory, measured at its load (serving.residency.loaded_versions)
        self._memory: dict[tuple[str, int], int] = {}
        self.listener = listener
        self.cache_listener = cache_listener

    def record_loaded(self, model: str, version: int) -> None:
        """A version loaded here: its series exist from now on, zeros until it serves (as
        Triton reports every loaded model's, so a client can read them before sending)."""
        with self._lock:
            self._versions.setdefault((model, version), VersionStats())

    def record_cold_start(self, model: str, version: int, cold: ColdStart) -> None:
        """A version's load ended here, in ``cold``'s phases."""
        if self.cold_starts is not None:
            self.cold_starts.loaded(model, version, cold)

    def record_success(self, model: str, version: int, execution: Execution) -> None:
        if _WARMING_UP.get():
            return
        if self.cold_starts is not None:
            self.cold_starts.executed(model, version, execution.total_ns / 1e6)
        with self._lock:
            stats = self._versions.setdefault((model, version), VersionStats())
            stats.last_inference_ms = int(time.time() * 1000)
            stats.inference_count += execution.batch_size
            stats.execution_count += 1
            stats.success.add(execution.total_ns, execution.requests)
            stats.queue.add(execution.queue_ns, execution.requests)
            stats.compute_input.add(execution.input_ns, execution.requests)
            stats.compute_infer.add(execution.infer_ns, execution.requests)
            stats.compute_output.add(execution.output_ns, execution.requests)
            batch = stats.batches.setdefault(execution.batch_size, _BatchStats())
            batch.compute_input.add(execution.input_ns)
            batch.compute_infer.add(execution.infer_ns)
            batch.compute_output.add(execution.output_ns)
        if self.listener:
            self.listener(model, version, execution, 0)

    def record_failure(
        self, model: str, version: int, ns: int, error: BaseException | None = None
    ) -> None:
        if _WARMING_UP.get():
            return
        reason = failure_reason(error)
        with self._lock:
            stats = self._versions.setdefault((model, version), VersionStats())
            stats.fail.add(ns)
            stats.fail_reasons[reason] = stats.fail_reasons.get(reason, 0) + 1
        if self.listener:
            self.listener(model, version, None, ns)

    def record_cache_hit(self, model: str, version: int, ns: int) -> None:
        """A request answered from the response cache: a success (Triton counts hits in
        ``success``, not in ``inference_count`` or ``execution_count``) and a hit."""
        if _WARMING_UP.get():
            return
        with self._lock:
            stats = self._versions.setdefault((model, version), VersionStats())
            stats.last_inference_ms = int(time.time() * 1000)
            stats.success.add(ns)
            stats.cache_hit.add(ns)
        if self.cache_listener:
            self.cache_listener(model, version, True)

    def record_cache_miss(self, model: str, version: int, ns: int) -> None:
        if _WARMING_UP.get():
            return
        with self._lock:
            self._versions.setdefault((model, version), VersionStats()).cache_miss.add(ns)
        if self.cache_listener:
            self.cache_listener(model, version, False)

    def record_cache_insert(self, model: str, version: int, ns: int) -> None:
        """A miss's insertion: its time joins the miss duration, as in Triton."""
        if _WARMING_UP.get():
            return
        with self._lock:
            self._versions.setdefault((model, version), VersionStats()).cache_miss.add(ns, 0)

    def record_cache_too_large(self, model: str, version: int) -> None:
        if _WARMING_UP.get():
            return
        with self._lock:
            self._versions.setdefault((model, version), VersionStats()).cache_too_large += 1

    def record_memory(self, model: str, version: int, size: int) -> None:
        """The version's memory as measured at its load (0: it left memory). A loaded version
        is listed in the stats, as Triton lists each loaded version, with ``memory_usage``."""
        with self._lock:
            if size:
                self._memory[(model, version)] = size
                self._versions.setdefault((model, version), VersionStats())
            else:
                self._memory.pop((model, version), None)

    def memory(self) -> dict[tuple[str, int], int]:
        """Per loaded version, its memory measured at load, in bytes."""
        with self._lock:
            return dict(sorted(self._memory.items()))

    def cache_too_large(self) -> dict[tuple[str, int], int]:
        """Per version, answers not cached for their size."""
        with self._lock:
            return {key: stats.cache_too_large for key, stats in sorted(self._versions.items())}

    def failures_by_reason(self) -> dict[tuple[str, int], dict[str, int]]:
        """Per version, failed requests per Triton ``reason`` (every reason, zeros included)."""
        with self._lock:
            return {
                key: {reason: stats.fail_reasons.get(reason, 0) for reason in FAILURE_REASONS}
                for key, stats in sorted(self._versions.items())
            }

    def snapshot(self, model: str | None = None, version: int | None = None) -> dict[str, Any]:
        """Triton's ``/v2/models[/{m}[/versions/{v}]]/stats`` body."""
        with self._lock:
            items = sorted(self._versions.items())
            return {
                "model_stats": [
                    _to_json(name, number, stats, self._memory.get((name, number), 0))
                    for (name, number), stats in items
                    if (model is None or name == model) and (version is None or number == version)
                ]
            }


def _to_json(name: str, version: int, stats: VersionStats, memory: int) -> dict[str, Any]:
    return {
        "name": name,
        "version": str(version),
        "last_inference": stats.last_inference_ms,
        "inference_count": stats.inference_count,
        "execution_count": stats.execution_count,
        "inference_stats": {
            "success": stats.success.to_json(),
            "fail": stats.fail.to_json(),
            "queue": stats.queue.to_json(),
            "compute_input": stats.compute_input.to_json(),
            "compute_infer": stats.compute_infer.to_json(),
            "compute_output": stats.compute_output.to_json(),
            "cache_hit": stats.cache_hit.to_json(),
            "cache_miss": stats.cache_miss.to_json(),
        },
        "batch_stats": [
            {
                "batch_size": size,
                "compute_input": batch.compute_input.to_json(),
                "compute_infer": batch.compute_infer.to_json(),
                "compute_output": batch.compute_output.to_json(),
            }
            for size, batch in sorted(stats.batches.items())
        ],
        # Triton's ModelStatistics.memory_usage: what the version holds while loaded
        "memory_usage": [{"type": "CPU", "id": 0, "byte_size": memory}] if memory else [],
    }
