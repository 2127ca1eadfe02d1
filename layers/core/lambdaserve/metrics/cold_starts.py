"""Each version's cold starts, phase by phase, where it serves: the process's own start (its
init, or a SnapStart restore) when the load is the process's first, the files fetched
(bytes, milliseconds), the runtime's load, the warm-up, and the first inference after them.
A load records its phases as it ends (``serving.residency.loading``); the version's first
execution afterwards adds the first inference. ``ColdStarts`` hands each to ``write`` (the
catalog, ``catalog.cold_starts``), which every instance adds to, and to ``emit`` (EMF
lines); ``summary`` gives p50 and p99 per phase over what was written (describe, and
``/v2/models/{m}/stats``).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import asdict, dataclass
from typing import Any

logger = logging.getLogger(__name__)

PHASES = ("init_ms", "fetch_ms", "load_ms", "warmup_ms", "first_inference_ms", "total_ms")
INIT, RESTORE = "init", "restore"


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
# (model, version, fields): the same fields as metrics (EMF), never a request's failure
Emit = Callable[[str, int, Mapping[str, Any]], None]


def process_age_ms() -> float | None:
    """Milliseconds since this process started (Linux's /proc; None elsewhere): a Lambda
    function's init from its interpreter's start, not only from the handler's import."""
    try:
        with open("/proc/self/stat", encoding="ascii") as stat:
            # the fields after the command's closing parenthesis; starttime is the 22nd field
            started_ticks = int(stat.read().rsplit(")", 1)[1].split()[19])
        with open("/proc/uptime", encoding="ascii") as uptime:
            up_s = float(uptime.read().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    return max(0.0, (up_s - started_ticks / os.sysconf("SC_CLK_TCK")) * 1000)


class ColdStarts:
    """A process's cold starts, written as they happen; a write that fails is logged, never
    the load's or the request's failure."""

    def __init__(
        self, write: Write, where: str, *, background: bool = False, emit: Emit | None = None
    ) -> None:
        self._write = write
        self._emit = emit
        # with ``background``, writes go to a thread of its own: the first execution after a
        # load may be recorded on an event loop's thread, and a Lambda function's first
        # request must not wait for two DynamoDB writes (measured: 85 ms of a 135 ms first
        # request). A Lambda instance frozen mid-write finishes it when next thawed; the
        # EMF line is written at once either way (stdout), so CloudWatch always has it.
        self._writer = _writer() if background else None
        self._last: Future[None] | None = None
        # "infer function" (Lambda) or "server" (serve, dev, the GPU service)
        self.where = where
        self._lock = threading.Lock()
        # (model, version) -> the sample whose first inference is still to come, and when
        # its load ended
        self._first: dict[tuple[str, int], tuple[str, float, float]] = {}
        # the process's start (kind, ms), until the first load after it takes it
        self._start: tuple[str, float] | None = None

    def process_ready(self, kind: str, started_ms: float | None) -> None:
        """The process is ready to serve, ``started_ms`` after it started (``INIT``) or was
        restored from a snapshot (``RESTORE``): the next load's cold start includes it."""
        if started_ms is not None:
            with self._lock:
                self._start = (kind, started_ms)

    def restored(self, restore_ms: float, holding: Sequence[tuple[str, int]]) -> None:
        """A SnapStart restore: each version the snapshot holds starts a cold start of its
        own here (the restore, then its first inference; nothing fetched or loaded), under a
        new sample (the snapshot's pending samples are every restored instance's)."""
        with self._lock:
            self._first.clear()
            self._start = None
        for model, version in holding:
            fields = {"init": RESTORE, "init_ms": round(restore_ms, 3)}
            self._begin(model, version, fields, restore_ms)
        if not holding:
            self.process_ready(RESTORE, restore_ms)

    def loaded(self, model: str, version: int, cold: ColdStart) -> None:
        with self._lock:
            start, self._start = self._start, None
        fields: dict[str, Any] = asdict(cold)
        if start is not None:
            fields |= {"init": start[0], "init_ms": round(start[1], 3)}
        self._begin(model, version, fields, cold.total_ms + (start[1] if start else 0.0))

    def _begin(self, model: str, version: int, fields: dict[str, Any], total_ms: float) -> None:
        sample = f"{int(time.time() * 1000):013d}-{os.urandom(3).hex()}"
        with self._lock:
            self._first[(model, version)] = (sample, time.perf_counter(), total_ms)
        fields |= {"where": self.where, "total_ms": round(total_ms, 3)}
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

    def flush(self, timeout_s: float) -> None:
        """Wait (at most ``timeout_s``) for the writes submitted so far: before a SnapStart
        snapshot, which must not freeze one half-sent."""
        last = self._last
        if last is not None:
            wait([last], timeout_s)

    def _put(self, model: str, version: int, sample: str, fields: Mapping[str, Any]) -> None:
        if self._emit is not None:
            try:
                self._emit(model, version, {"where": self.where, **fields})
            except Exception as exc:  # a cold start's record never fails what it records
                logger.warning("cold start of %s version %s not emitted: %s", model, version, exc)
        if self._writer is not None:
            self._last = self._writer.submit(self._write_now, model, version, sample, fields)
        else:
            self._write_now(model, version, sample, fields)

    def _write_now(self, model: str, version: int, sample: str, fields: Mapping[str, Any]) -> None:
        try:
            self._write(model, version, sample, fields)
        except Exception as exc:  # a cold start's record never fails what it records
            logger.warning("cold start of %s version %s not recorded: %s", model, version, exc)


def _writer() -> ThreadPoolExecutor:
    return ThreadPoolExecutor(1, thread_name_prefix="cold-starts")


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
        # how the samples that include a process start began: "init" or "restore"
        "starts": sorted({str(s["init"]) for s in samples if "init" in s}),
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
