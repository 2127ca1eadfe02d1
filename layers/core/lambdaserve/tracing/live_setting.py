"""One trace setting in force (the global one, or a model's): its values, which of them its
scope set itself, and its counters: requests seen, traces left (``count``), traces waiting to
be written. Triton's ``TraceSetting``: a change replaces the object (its counters start
again), and the replaced one writes what it still holds (``retire``)."""

from __future__ import annotations

import threading
from dataclasses import dataclass

from lambdaserve.tracing.config import OPENTELEMETRY, TRITON
from lambdaserve.tracing.trace_file import TraceFile

FIELDS = ("level", "rate", "count", "log_frequency", "file")


@dataclass(frozen=True)
class SettingValues:
    levels: tuple[str, ...]  # () is OFF
    rate: int
    count: int
    log_frequency: int
    file: str
    mode: str = TRITON
    specified: frozenset[str] = frozenset()  # which FIELDS this scope set itself

    def invalid_reason(self) -> str | None:
        """Why this setting traces nothing (Triton's reasons); None when it may trace."""
        if not self.levels:
            return "tracing is disabled"
        if self.rate == 0:
            return "sample rate must be non-zero"
        if self.mode == TRITON and not self.file:
            return "trace file name is not given"
        if self.count == 0:
            return "trace_count is 0 (it takes -1 for no limit, or the traces left)"
        return None


class LiveSetting:
    def __init__(self, values: SettingValues, file: TraceFile | None) -> None:
        self.values = values
        self.file = file
        self._lock = threading.Lock()
        self._count = values.count
        self._sampled = 0  # requests counted towards the rate
        self._collected = 0
        self._waiting: list[str] = []  # traces' records, each a run of JSON objects
        self._retired = False
        self.traces = values.invalid_reason() is None and values.mode in (TRITON, OPENTELEMETRY)

    @property
    def count(self) -> int:
        """Traces left to take (-1: no limit), as the settings API reports it."""
        return self._count

    def sample(self) -> bool:
        """Whether this request is traced: every ``rate``-th, while traces are left."""
        if not self.traces:
            return False
        with self._lock:
            if self._count == 0:
                return False
            self._sampled += 1
            if self._sampled % self.values.rate:
                return False
            if self._count > 0:
                self._count -= 1
            return True

    def write(self, records: str) -> None:
        """One finished trace: kept until ``log_frequency`` are, or the count ran out (then
        into the next numbered file); a retired setting writes at once."""
        if self.file is None:
            return
        frequency = self.values.log_frequency
        with self._lock:
            self._waiting.append(records)
            self._collected += 1
            full = (self._count == 0 and self._collected == self._sampled) or (
                frequency != 0 and len(self._waiting) >= frequency
            )
            if not (full or self._retired):
                return
            taken, self._waiting = self._waiting, []
        self.file.save(taken, numbered=full or frequency != 0)

    def retire(self) -> None:
        """Replaced or shut down: what waits goes to the file (numbered with a log frequency,
        as Triton's destructor writes it); traces still running write when they end."""
        with self._lock:
            self._retired = True
            taken, self._waiting = self._waiting, []
        if self.file is not None and taken:
            self.file.save(taken, numbered=self.values.log_frequency != 0)
