"""Each version's cold starts, phase by phase, where it serves: the files fetched (bytes,
milliseconds), the runtime's load, the warm-up, and the first inference after them. A load
records its phases as it ends (``serving.residency.loading``); the version's first
execution afterwards adds the first inference. ``ColdStarts`` hands each to ``write`` (the
catalog, ``catalog.cold_starts``), which every instance adds to; ``summary`` gives p50 and
p99 per phase over what was written (describe).
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from typing import Any

logger = logging.getLogger(__name__)

PHASES = ("fetch_ms", "load_ms", "warmup_ms", "first_inference_ms", "total_ms")


@dataclass(frozen=True)
class ColdStart:
    """One load's phases (milliseconds), and the device it loaded on."""

    device: str
    fetch_bytes: int
    fetch_ms: float
    load_ms: float
    warmup_ms: float

    @property
    def total_ms(self) -> float:
        return self.fetch_ms + self.load_ms + self.warmup_ms


# (model, version, sample id, fields): one write of a sample (its fields set, others kept)
Write = Callable[[str, int, str, Mapping[str, Any]], None]


class ColdStarts:
    """A process's cold starts, written as they happen; a write that fails is logged, never
    the load's or the request's failure."""

    def __init__(self, write: Write, where: str, *, background: bool = False) -> None:
        self._write = write
        # a long-running process writes on a thread of its own: the first execution after a
        # load may be recorded on the event loop's thread, which must not wait for DynamoDB
        # (a Lambda function writes as it goes: its instance freezes once it has answered)
        self._writer = (
            ThreadPoolExecutor(1, thread_name_prefix="cold-starts") if background else None
        )
        # "infer function" (Lambda) or "server" (serve, dev, the GPU service)
        self.where = where
        self._lock = threading.Lock()
        # (model, version) -> the sample whose first inference is still to come, and when
        # its load ended
        self._first: dict[tuple[str, int], tuple[str, float, float]] = {}

    def loaded(self, model: str, version: int, cold: ColdStart) -> None:
        sample = f"{int(time.time() * 1000):013d}-{uuid.uuid4().hex[:6]}"
        with self._lock:
            self._first[(model, version)] = (sample, time.perf_counter(), cold.total_ms)
        fields = asdict(cold) | {"where": self.where, "total_ms": round(cold.total_ms, 3)}
        self._put(model, version, sample, fields)

    def executed(self, model: str, version: int, execution_ms: float) -> None:
        """A version's execution (the stats listener): the first after a load completes its
        cold start; every other costs one dictionary lookup."""
        if not self._first:
            return
        with self._lock:
            pending = self._first.pop((model, version), None)
        if pending is None:
            return
        sample, _, loaded_ms = pending
        fields = {
            "first_inference_ms": round(execution_ms, 3),
            "total_ms": round(loaded_ms + execution_ms, 3),
        }
        self._put(model, version, sample, fields)

    def _put(self, model: str, version: int, sample: str, fields: Mapping[str, Any]) -> None:
        if self._writer is not None:
            self._writer.submit(self._write_now, model, version, sample, fields)
        else:
            self._write_now(model, version, sample, fields)

    def _write_now(self, model: str, version: int, sample: str, fields: Mapping[str, Any]) -> None:
        try:
            self._write(model, version, sample, fields)
        except Exception as exc:  # a cold start's record never fails what it records
            logger.warning("cold start of %s version %s not recorded: %s", model, version, exc)


def summary(samples: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """p50 and p99 of each phase over ``samples`` (the newest's bytes, where and device),
    as describe shows them; empty before the first load anywhere."""
    if not samples:
        return {}
    newest = max(samples, key=lambda s: str(s.get("sample", "")))
    answer: dict[str, Any] = {
        "count": len(samples),
        "where": sorted({str(s["where"]) for s in samples if "where" in s}),
        "device": newest.get("device"),
        "fetchBytes": newest.get("fetch_bytes"),
    }
    for phase in PHASES:
        values = sorted(float(s[phase]) for s in samples if s.get(phase) is not None)
        if values:
            answer[_camel(phase)] = {"p50": _at(values, 0.5), "p99": _at(values, 0.99)}
    return answer


def _at(values: list[float], quantile: float) -> float:
    index = min(len(values) - 1, max(0, round(quantile * len(values) + 0.5) - 1))
    return round(values[index], 3)


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.title() for part in rest)
