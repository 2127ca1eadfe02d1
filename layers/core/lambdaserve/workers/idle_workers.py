"""A version's free workers, first in first out, where a sequence's step may wait for the one
worker its sequence runs on (``runtimes.sequence_affinity``): a worker some step waits for is
left to it, and handed to others only when none does."""

from __future__ import annotations

import collections
import queue
import threading
import time
from collections.abc import Callable

from lambdaserve.workers.process import WorkerProcess

# a step waiting for its worker looks again this often: that worker may have been replaced
# (a restart gives a new index, and the sequence then takes any worker)
_RECHECK_S = 0.25


class IdleWorkers:
    """Free workers, and ``None``: the wake-up a broken or closed workforce leaves."""

    def __init__(self) -> None:
        self._items: collections.deque[WorkerProcess | None] = collections.deque()
        self._ready = threading.Condition()
        self._wanted: collections.Counter[int] = collections.Counter()

    def put(self, worker: WorkerProcess | None) -> None:
        with self._ready:
            self._items.append(worker)
            if self._wanted:
                self._ready.notify_all()  # the one waiting for this worker must see it
            else:
                self._ready.notify()

    def get_nowait(self) -> WorkerProcess | None:
        return self.get(0.0)

    def get(
        self,
        timeout: float,
        pinned: int | None = None,
        exists: Callable[[int], bool] = lambda index: True,
    ) -> WorkerProcess | None:
        """The first free worker (worker ``pinned`` where it is still one); ``queue.Empty``
        after ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        with self._ready:
            while True:
                if pinned is not None and not exists(pinned):
                    pinned = None
                for position, worker in enumerate(self._items):
                    if self._fits(worker, pinned):
                        del self._items[position]
                        return worker
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise queue.Empty
                if pinned is None:
                    self._ready.wait(remaining)
                    continue
                self._wanted[pinned] += 1
                try:
                    self._ready.wait(min(remaining, _RECHECK_S))
                finally:
                    self._wanted[pinned] -= 1
                    if not self._wanted[pinned]:
                        del self._wanted[pinned]

    def _fits(self, worker: WorkerProcess | None, pinned: int | None) -> bool:
        if worker is None:
            return True
        if pinned is not None:
            return worker.index == pinned
        return worker.index not in self._wanted
