"""Paddle's auto-batching for an Op's ``process``: requests arriving within
``auto_batching_timeout`` of the first share one call (up to ``batch_size``), their feeds
concatenated along axis 0 and the fetches split back by each request's rows."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np


def merged_feeds(feeds: list[dict[str, Any]]) -> tuple[dict[str, Any], list[tuple[int, int]]]:
    """Paddle's auto-batching: each key's arrays concatenated along axis 0; each request's
    rows are ``[start, end)`` by the length of its first value."""
    if len(feeds) == 1:
        return feeds[0], [(0, 0)]
    merged: dict[str, Any] = {}
    bounds, start = [], 0
    for feed in feeds:
        for key, value in feed.items():
            if key not in merged:
                merged[key] = value
            elif isinstance(value, np.ndarray):
                merged[key] = np.append(merged[key], value, axis=0)
        first = next(iter(feed.values()), None)
        rows = len(first) if isinstance(first, list | np.ndarray) else 1
        bounds.append((start, start + rows))
        start += rows
    return merged, bounds


def sliced(fetched: Any, start: int, end: int, count: int) -> Any:
    if count == 1 or not isinstance(fetched, dict):
        return fetched
    return {k: v[start:end] if isinstance(v, np.ndarray) else v for k, v in fetched.items()}


class Gatherer:
    """Requests arriving within ``wait_s`` of the first share one call (up to ``size``)."""

    def __init__(
        self, call: Callable[[list[Any], int], Any], size: int, wait_s: float | None
    ) -> None:
        self._call = call
        self._size = size
        self._wait_s = wait_s or 0.0
        self._cond = threading.Condition()
        self._queue: list[_Item] = []
        self._leading = False

    def submit(self, feed: dict[str, Any], log_id: int) -> Any:
        item = _Item(feed)
        with self._cond:
            self._queue.append(item)
            self._cond.notify_all()
            while not item.done:
                if self._leading:
                    self._cond.wait()
                    continue
                self._leading = True
                deadline = time.monotonic() + self._wait_s
                while len(self._queue) < self._size and (left := deadline - time.monotonic()) > 0:
                    self._cond.wait(left)
                batch, self._queue = self._queue[: self._size], self._queue[self._size :]
                self._cond.release()
                try:
                    results: Any = self._call([i.feed for i in batch], log_id)
                except BaseException as exc:  # each waiter hears it; none waits forever
                    results = exc
                finally:
                    self._cond.acquire()
                for index, waiting in enumerate(batch):
                    waiting.result = results[index] if isinstance(results, list) else results
                    waiting.done = True
                self._leading = False
                self._cond.notify_all()
        if isinstance(item.result, BaseException):
            raise item.result
        return item.result


class _Item:
    def __init__(self, feed: dict[str, Any]) -> None:
        self.feed = feed
        self.result: Any = None
        self.done = False
