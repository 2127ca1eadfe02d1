"""Calls with a time limit on reused threads: a try that overran keeps its thread (Python
cannot stop it), and the next try takes another; threads return to the idle list when their
call ends. Measured 17 us a call where a thread per call cost 110 us
(scripts/bench_paddle_pipeline.py). A cap bounds the threads: past it, with none idle (every
one still running an overrun), the call times out at once instead of starting another."""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from typing import Any

_STOP = object()


class ReusedThreads:
    """Idle threads wait for a call; none is held by a call that overran its timeout."""

    def __init__(self, cap: int = 64) -> None:
        self._cap = max(1, cap)
        self._idle: list[_OpThread] = []
        self._started = 0
        self._closed = False
        self._lock = threading.Lock()

    def run(self, timeout_s: float, call: Callable[..., Any], args: tuple[Any, ...]) -> Any:
        """``call(*args)``, or TimeoutError after ``timeout_s`` (or at once, at the cap)."""
        with self._lock:
            worker = self._idle.pop() if self._idle else None
            if worker is None:
                if self._started >= self._cap:
                    raise TimeoutError("every thread is still running a call that overran")
                self._started += 1
                worker = _OpThread(self)
        return worker.run(timeout_s, call, args)

    def idle(self, worker: _OpThread) -> bool:
        """Back to the idle list; False when closed (the thread ends)."""
        with self._lock:
            if self._closed:
                return False
            self._idle.append(worker)
            return True

    def close(self) -> None:
        """End the idle threads; the busy ones end when their call returns."""
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
        for worker in idle:
            worker.stop()


class _OpThread:
    def __init__(self, threads: ReusedThreads) -> None:
        self._threads = threads
        self._jobs: queue.SimpleQueue[Any] = queue.SimpleQueue()
        threading.Thread(target=self._serve, daemon=True, name="timed-call").start()

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

    def stop(self) -> None:
        self._jobs.put(_STOP)

    def _serve(self) -> None:
        while True:
            job = self._jobs.get()
            if job is _STOP:
                return
            call, args, outcome, done = job
            try:
                outcome.append((True, call(*args)))
            except BaseException as exc:  # handed to the waiting caller
                outcome.append((False, exc))
            done.set()
            if not self._threads.idle(self):
                return


_SHARED = ReusedThreads(cap=64)


def within(timeout_s: float, call: Callable[..., Any], *args: Any) -> Any:
    """``call(*args)`` waited for ``timeout_s`` on the process's shared threads (BLS)."""
    return _SHARED.run(timeout_s, call, args)
