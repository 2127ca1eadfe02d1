"""Sequence records in this process's memory: for one process alone (tests, a server
without a shared table). The same conditional writes as the shared stores."""

from __future__ import annotations

import threading

from lambdaserve.serving.sequences.records import (
    SequenceKey,
    SequenceRecord,
    conflict,
)


class MemorySequenceStore:
    def __init__(self) -> None:
        self._records: dict[SequenceKey, SequenceRecord] = {}
        self._lock = threading.Lock()

    def read(self, key: SequenceKey) -> SequenceRecord | None:
        with self._lock:
            return self._records.get(key)

    def write(
        self, key: SequenceKey, record: SequenceRecord, expected: SequenceRecord | None
    ) -> None:
        with self._lock:
            self._check(key, expected)
            self._records[key] = record

    def delete(self, key: SequenceKey, expected: SequenceRecord | None) -> None:
        with self._lock:
            self._check(key, expected)
            self._records.pop(key, None)

    def _check(self, key: SequenceKey, expected: SequenceRecord | None) -> None:
        stored = self._records.get(key)
        if (stored.token if stored else None) != (expected.token if expected else None):
            raise conflict(key)
