"""Progress of long work (downloads, validation, warm-up) in words people read: sizes, rates."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable


def human_bytes(size: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if abs(size) < 1024 or unit == "GB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} GB"


class TransferProgress:
    """Counts bytes of a transfer (boto3's ``Callback``) and reports every ``every_s``.

    ``report`` gets a line such as ``downloading 512.0 MB: 40% (210.3 MB) at 120.4 MB/s``.
    """

    def __init__(
        self,
        verb: str,
        total: int,
        report: Callable[[str], None],
        every_s: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._verb = verb
        self._total = max(total, 1)
        self._report = report
        self._every_s = every_s
        self._clock = clock
        self._started = clock()
        self._last = self._started
        self._done = 0
        self._lock = threading.Lock()

    def __call__(self, chunk: int) -> None:
        with self._lock:
            self._done += chunk
            now = self._clock()
            if now - self._last < self._every_s:
                return
            self._last = now
            line = self.describe()
        self._report(line)

    def describe(self) -> str:
        elapsed = max(self._clock() - self._started, 1e-6)
        return (
            f"{self._verb} {human_bytes(self._total)}: {100 * self._done // self._total}% "
            f"({human_bytes(self._done)}) at {human_bytes(self._done / elapsed)}/s"
        )

    def finished(self) -> str:
        elapsed = max(self._clock() - self._started, 1e-6)
        return (
            f"{self._verb} {human_bytes(self._total)} took {elapsed:.1f} s "
            f"({human_bytes(self._total / elapsed)}/s)"
        )
