"""A version's worker processes as a pool: handed out one call at a time; a lost one (a
crash, a timeout kill) counted and restarted after a backoff, five losses within a minute
and the version is reported broken; scaled to a count; described as TorchServe does."""

from __future__ import annotations

import collections
import logging
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from lambdaserve.errors import LambdaServeError, ModelCodeFailed, ModelNotReady
from lambdaserve.runtimes.sequence_affinity import SequenceAffinity
from lambdaserve.runtimes.torchserve.manifest import FrontendBatching
from lambdaserve.workers import messages
from lambdaserve.workers.channel import ChannelClosed, error_from
from lambdaserve.workers.idle_workers import IdleWorkers
from lambdaserve.workers.messages import Message
from lambdaserve.workers.process import WorkerProcess

logger = logging.getLogger(__name__)
CRASHES_ALLOWED, CRASH_WINDOW_S = 5, 60.0
BACKOFF_S = (0.0, 0.5, 1.0, 2.0, 4.0, 8.0)


@dataclass(frozen=True)
class WorkerSpec:
    """What every worker of one version is started with."""

    model: str
    version: int
    backend: str
    model_path: Path
    config: dict[str, Any]  # Triton's JSON form of the version's config
    signature: dict[str, Any]
    python_paths: tuple[Path, ...] = ()
    min_workers: int = 1
    max_workers: int = 1
    timeout_s: float = 120.0
    start_timeout_s: float = 300.0
    decoupled: bool = False  # Triton's model_transaction_policy: responses streamed

    def load_message(self) -> Message:
        return messages.load(
            model=self.model,
            version=self.version,
            backend=self.backend,
            model_path=str(self.model_path),
            config=self.config,
            signature=self.signature,
        )


class Workforce:
    """The worker processes of one version: free ones handed out one call at a time, lost
    ones counted and replaced, the count scaled."""

    def __init__(self, spec: WorkerSpec, on_broken: Callable[[str], None] | None = None) -> None:
        self.spec = spec
        self.batching = FrontendBatching()
        self._on_broken = on_broken
        self._idle = IdleWorkers()
        self._affinity = SequenceAffinity()
        self._workers: list[WorkerProcess] = []  # started, idle or busy
        self._lock = threading.Lock()
        self._crashes: collections.deque[float] = collections.deque()
        self._target = spec.min_workers
        self._starting = 0  # workers asked for and not yet started (scaling counts them)
        self._restarts = 0
        self.broken = ""
        self._closed = False
        first = self._spawn()  # a load failure raises here, as an in-process load does
        for _ in range(spec.min_workers - 1):
            self._start_later(0.0)
        self._idle.put(first)

    def take(self) -> WorkerProcess:
        """A free worker; for a sequence's step, the worker its sequence started on."""
        pinned = self._affinity.pinned()
        while True:
            if self.broken:
                raise ModelNotReady(self.broken)
            try:  # a free worker now, without the timed wait
                worker = self._idle.get(0.0, pinned, self._has)
            except queue.Empty:
                worker = self._wait_for_worker(pinned)
            if worker is None:  # woken: broken or closed
                self._idle.put(None)
                if self._closed and not self.broken:
                    raise ModelNotReady(f"{self.spec.model!r} was unloaded")
                continue
            with self._lock:
                if worker not in self._workers:  # stopped or replaced while it waited
                    continue
                surplus = len(self._workers) > self._target
                if surplus:
                    self._workers.remove(worker)
                else:
                    worker.busy = True
            if surplus:
                threading.Thread(target=worker.stop, daemon=True).start()
                continue
            if worker.alive():
                self._affinity.hold(worker.index)
                return worker
            worker.busy = False
            self.restart(worker, worker.how_it_ended())

    def _has(self, index: int) -> bool:
        with self._lock:
            return any(w.index == index for w in self._workers)

    def _wait_for_worker(self, pinned: int | None) -> WorkerProcess | None:
        try:
            return self._idle.get(self.spec.start_timeout_s, pinned, self._has)
        except queue.Empty:
            raise ModelNotReady(
                f"no worker of {self.spec.model!r} became free within "
                f"{self.spec.start_timeout_s:g} s"
            ) from None

    def release(self, worker: WorkerProcess) -> None:
        with self._lock:
            worker.busy = False
            closing = self._closed and worker in self._workers
            if closing:
                self._workers.remove(worker)
        if closing:
            worker.stop()
        else:
            self._idle.put(worker)

    # -- starting and restarting -----------------------------------------------------------
    def _spawn(self, started_later: bool = False) -> WorkerProcess:
        with self._lock:  # restarts start from several threads
            index = self._restarts
            self._restarts += 1
        label = f"{self.spec.model} version {self.spec.version} worker {index}"
        worker = WorkerProcess(label, self.spec.python_paths, index, self._exited)
        try:
            answer = worker.start(self.spec.load_message(), self.spec.start_timeout_s)
        except (TimeoutError, ChannelClosed):
            worker.kill()
            ended = worker.how_it_ended()
            worker.close()
            raise ModelCodeFailed(
                f"the worker of {self.spec.model!r} {ended} while loading"
            ) from None
        if messages.ERROR in answer:
            worker.stop()
            raise error_from(answer[messages.ERROR])
        if answer.get(messages.BATCHING):
            self.batching = FrontendBatching(*answer[messages.BATCHING])
        with self._lock:  # started: counted once, as a worker, no longer as one starting
            self._workers.append(worker)
            self._starting -= started_later
        return worker

    def discard(self, worker: WorkerProcess) -> None:
        """A worker left mid-call (its caller stopped reading): killed and replaced, not
        counted as a crash of the model's code."""
        worker.kill()
        with self._lock:
            if worker not in self._workers:
                return
            self._workers.remove(worker)
        worker.close()
        if not self._closed:
            self._start_later(0.0)

    def _exited(self, worker: WorkerProcess) -> None:
        """A worker's process ended. An idle one is replaced now, as TorchServe restarts a
        dead worker; a busy one is its caller's to answer and replace."""
        if worker.busy or self._closed:
            return
        with self._lock:
            if worker not in self._workers:  # stopped on purpose, or already replaced
                return
        self.restart(worker, worker.how_it_ended())

    def restart(self, worker: WorkerProcess, why: str) -> None:
        """Count the loss; restart after the backoff, or report the version broken."""
        with self._lock:
            if worker not in self._workers:  # the other thread that saw it end replaced it
                return
            self._workers.remove(worker)
            now = time.monotonic()
            self._crashes.append(now)
            while self._crashes and now - self._crashes[0] > CRASH_WINDOW_S:
                self._crashes.popleft()
            crashes = len(self._crashes)
        worker.close()
        if self._closed:
            return
        if crashes >= CRASHES_ALLOWED:
            self._break(
                f"its code crashed {crashes} times within {CRASH_WINDOW_S:.0f} s; the last: {why}"
            )
            return
        self._start_later(BACKOFF_S[min(crashes - 1, len(BACKOFF_S) - 1)])

    def _start_later(self, delay_s: float) -> None:
        with self._lock:
            self._starting += 1

        def start() -> None:
            time.sleep(delay_s)
            try:
                if self._closed or self.broken:
                    raise ModelNotReady("closed")
                worker = self._spawn(started_later=True)
            except LambdaServeError as exc:
                with self._lock:
                    self._starting -= 1
                if not self._closed and not self.broken:
                    logger.error(
                        "%s version %s: restarting a worker failed: %s",
                        *(self.spec.model, self.spec.version, exc.message),
                    )
                    self._break(f"its worker could not be restarted: {exc.message}")
                return
            self._idle.put(worker)

        threading.Thread(target=start, name=f"{self.spec.model}-worker-start", daemon=True).start()

    def _break(self, reason: str) -> None:
        self.broken = reason
        self._idle.put(None)
        logger.error("%s version %s is broken: %s", self.spec.model, self.spec.version, reason)
        if self._on_broken is not None:
            self._on_broken(reason)

    # -- management ------------------------------------------------------------------------
    @property
    def target(self) -> int:
        """How many workers this version keeps (its minWorkers, or the last scaling's)."""
        return self._target

    @property
    def worker_count(self) -> int:
        """How many calls may run at once: the batcher hands this many batches to free
        workers side by side, as TorchServe's frontend gives each worker its own batch."""
        return self._target

    def scale(self, min_workers: int, max_workers: int | None = None) -> None:
        """TorchServe's ``PUT /models/{m}?min_worker=&max_worker=``, as its WorkLoadManager
        does it: fewer workers than ``min_workers`` are topped up to it; more than
        ``max_workers`` (``min_workers`` when not given) stop, idle ones now, busy ones when
        they next fall idle; a count between the two stays. Nothing ever starts workers
        beyond ``min_workers`` on load: TorchServe does not autoscale to ``maxWorkers``."""
        low = max(1, min_workers)
        high = max(low, max_workers if max_workers is not None else low)
        self.spec = replace(self.spec, min_workers=low, max_workers=high)
        with self._lock:
            current = len(self._workers) + self._starting
            target = min(max(current, low), high)
            missing = target - current
            self._target = target
        for _ in range(max(0, missing)):
            self._start_later(0.0)
        if missing < 0:
            self._trim()

    def _trim(self) -> None:
        """Stop idle workers above the target now (busy ones stop when they come back)."""
        kept: list[WorkerProcess | None] = []
        while True:
            try:
                worker = self._idle.get_nowait()
            except queue.Empty:
                break
            if worker is None:
                kept.append(worker)
                continue
            with self._lock:
                surplus = len(self._workers) > self._target
                if surplus:
                    self._workers.remove(worker)
            if surplus:
                worker.stop()
            else:
                kept.append(worker)
        for worker in kept:
            self._idle.put(worker)

    def describe(self) -> list[dict[str, Any]]:
        """TorchServe's ``workers`` entries of describe."""
        with self._lock:
            workers = list(self._workers)
        return [
            {
                "id": str(9000 + w.index),
                "startTime": time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime(w.started_at)),
                "status": "READY" if w.alive() else "UNLOADING",
                "memoryUsage": w.rss_bytes(),
                "pid": w.pid,
                "gpu": False,
                "gpuUsage": "N/A",
            }
            for w in workers
        ]

    def memory_bytes(self) -> int:
        with self._lock:
            return sum(w.rss_bytes() for w in self._workers)

    def close(self) -> None:
        """Every worker told to finalize and exit (killed when it does not): the idle ones
        now, a busy one once its call has read its answer."""
        with self._lock:
            self._closed = True
            idle = [w for w in self._workers if not w.busy]
            self._workers = [w for w in self._workers if w.busy]
        self._idle.put(None)
        for worker in idle:
            worker.stop()
