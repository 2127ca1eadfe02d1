"""Per-version tallies a rollout's analysis reads: each instance's answered requests, failures
and latencies of the versions it is told to watch (a weighted label names them), summed
here and written out at most once a second to a store every instance shares (the catalog:
``catalog.tallies``), so a judge elsewhere compares the canary with the stable version over
the fleet's requests, not one instance's.

Latencies are kept as counts in log-spaced buckets (each 1.2 times the last, from 0.1 ms),
so tallies from any number of instances add up and a percentile reads within 20%.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from lambdaserve.metrics.stats import Execution

FLUSH_EVERY_S = 1.0
_FIRST_MS = 0.1
_GROWTH = 1.2
BUCKETS = 80  # 0.1 ms * 1.2**79: about 180 s

logger = logging.getLogger(__name__)


def bucket_of(ms: float) -> int:
    if ms <= _FIRST_MS:
        return 0
    return min(BUCKETS - 1, math.ceil(math.log(ms / _FIRST_MS, _GROWTH)))


def bucket_bound_ms(bucket: int) -> float:
    """The upper bound of a latency bucket (what a percentile in it reads as)."""
    return float(_FIRST_MS * _GROWTH**bucket)


@dataclass
class Tally:
    """Requests, failures and latency buckets (bucket -> count) of one version."""

    requests: int = 0
    failures: int = 0
    latency: dict[int, int] = field(default_factory=dict)

    def add(self, other: Tally) -> None:
        self.requests += other.requests
        self.failures += other.failures
        for bucket, count in other.latency.items():
            self.latency[bucket] = self.latency.get(bucket, 0) + count

    @property
    def error_rate(self) -> float:
        return self.failures / self.requests if self.requests else 0.0

    def percentile_ms(self, percent: float) -> float | None:
        """The latency ``percent`` of the requests stayed within (None: none measured)."""
        counted = sum(self.latency.values())
        if not counted:
            return None
        wanted, seen = math.ceil(counted * percent / 100), 0
        for bucket in sorted(self.latency):
            seen += self.latency[bucket]
            if seen >= wanted:
                return bucket_bound_ms(bucket)
        return bucket_bound_ms(max(self.latency))


# (model, version, when: epoch seconds, tally): one flush's write for one version
TallyWriter = Callable[[str, int, int, Tally], None]


class Tallies:
    """The stats listener that tallies; ``watched(model)`` says whether a model is being
    judged (read from the resolver's cached view: no I/O on the request path). With
    ``background``, the first tally starts a thread that flushes once a second (a
    long-running process); without, the owner calls ``flush_if_due`` (a Lambda function, as
    each invocation ends)."""

    def __init__(
        self,
        write: TallyWriter,
        watched: Callable[[str], bool],
        *,
        background: bool = False,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._write = write
        self._watched = watched
        self._clock = clock
        self._lock = threading.Lock()
        self._open: dict[tuple[str, int], Tally] = {}
        self._flushed_at = 0.0
        self._background = background
        self._flusher: threading.Thread | None = None

    def record(self, model: str, version: int, execution: Execution | None, fail_ns: int) -> None:
        """A ``StatsRegistry`` listener: one execution's requests, or one failure."""
        if not self._watched(model):
            return
        with self._lock:
            tally = self._open.setdefault((model, version), Tally())
            if execution is None:
                tally.requests += 1
                tally.failures += 1
                bucket, count = bucket_of(fail_ns / 1e6), 1
            else:
                count = max(1, execution.requests)
                tally.requests += count
                bucket = bucket_of(execution.total_ns / count / 1e6)
            tally.latency[bucket] = tally.latency.get(bucket, 0) + count
            start = self._background and self._flusher is None
            if start:
                self._flusher = threading.Thread(target=self._loop, name="tallies", daemon=True)
        if start:
            assert self._flusher is not None
            self._flusher.start()

    def flush_if_due(self) -> None:
        """Write what was tallied, unless a flush ran less than a second ago (the end of a
        Lambda invocation: a busy instance writes once a second, not once a request)."""
        if self._open and self._clock() - self._flushed_at >= FLUSH_EVERY_S:
            self.flush()

    def flush(self) -> None:
        with self._lock:
            taken, self._open = self._open, {}
            self._flushed_at = now = self._clock()
        for (model, version), tally in taken.items():
            try:
                self._write(model, version, int(now), tally)
            except Exception:  # the analysis counts a missing window as inconclusive
                logger.warning("tallies of %s/%s not written", model, version, exc_info=True)

    def _loop(self) -> None:
        while True:
            time.sleep(FLUSH_EVERY_S)
            self.flush_if_due()
