"""Calls with a time limit on reused threads: a try that overran keeps its thread (Python
cannot stop it), and the next try takes another; threads return to the idle list when their
call ends. Measured 17 us a call where a thread per call cost 110 us
(scripts/bench_paddle_pipeline.py)."""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from typing import Any


def within(timeout_s: float, call: Callable[..., Any], *args: Any) -> Any:
    """``call(*args)`` on a thread of the Op threads, waited for ``timeout_s``: a call that
    overran keeps its thread, and the next try takes another (Paddle's func_timeout runs each
    try on a thread of its own; these are reused once their call returns)."""
    return _OP_THREADS.run(timeout_s, call, args)


class _ReusedThreads:
    """Idle threads wait for a call; none is held by a call that overran its timeout."""

    def __init__(self) -> None:
        self._idle: list[_OpThread] = []
        self._lock = threading.Lock()

    def run(self, timeout_s: float, call: Callable[..., Any], args: tuple[Any, ...]) -> Any:
        with self._lock:
            worker = self._idle.pop() if self._idle else None
        return (worker or _OpThread(self)).run(timeout_s, call, args)

    def idle(self, worker: _OpThread) -> None:
        with self._lock:
            self._idle.append(worker)


class _OpThread:
    def __init__(self, threads: _ReusedThreads) -> None:
        self._threads = threads
        self._jobs: queue.SimpleQueue[tuple[Any, ...]] = queue.SimpleQueue()
        threading.Thread(target=self._serve, daemon=True, name="paddle-op-try").start()

    def run(self, timeout_s: float, call: Callable[..., Any], args: tuple[Any, ...]) -> Any:
        done = threading.Event()
        outcome: list[tuple[bool, Any]] = []
        self._jobs.put((call, args, outcome, done))
        if not done.wait(timeout_s):
            raise TimeoutError
        succeeded, value = outcome[0]
        if not succeeded:
            raise value
        return value

    def _serve(self) -> None:
        while True:
            call, args, outcome, done = self._jobs.get()
            try:
                outcome.append((True, call(*args)))
            except BaseException as exc:  # handed to the waiting caller
                outcome.append((False, exc))
            done.set()
            self._threads.idle(self)


_OP_THREADS = _ReusedThreads()
