"""Scale-in without losing a request: SIGTERM drains ``serve`` before it exits.

ECS stops a task with SIGTERM (after deregistering it from the load balancer), then SIGKILL
after the container's ``StopTimeout``. On SIGTERM the server first reports not ready (HTTP
``/v2/health/ready`` 503, ``grpc.health.v1`` NOT_SERVING) and keeps answering for
``LAMBDASERVE_DRAIN_DELAY_S``, so a load balancer still routing to it sees it leave rotation
before its port closes; then uvicorn stops accepting connections and waits (up to
``LAMBDASERVE_DRAIN_TIMEOUT_S``) for the requests in flight — those waiting in the dynamic
batcher's queue included, since each is an in-flight request awaiting its batch; then the
lifespan's stop steps run (gRPC's in-flight calls get their grace, models unload). A second
SIGTERM skips what is left of the delay.
"""

from __future__ import annotations

import logging
import signal
import threading
from types import FrameType
from typing import Any

from lambdaserve.serving.readiness import Readiness

logger = logging.getLogger(__name__)


class DrainOnSigterm:
    """A lifespan start step: wraps the SIGTERM handler uvicorn installed (it runs inside
    uvicorn's ``capture_signals``, so in every worker process, and ``serve``'s one)."""

    def __init__(self, readiness: Readiness, delay_s: float) -> None:
        self._readiness = readiness
        self._delay_s = delay_s
        self._timer: threading.Timer | None = None

    async def __call__(self) -> None:
        # signal handlers belong to the main thread: a server in a test's thread has none
        if threading.current_thread() is not threading.main_thread():
            return
        stop = signal.getsignal(signal.SIGTERM)
        if not callable(stop):
            return
        signal.signal(signal.SIGTERM, lambda sig, frame: self._on_sigterm(stop, sig, frame))

    def _on_sigterm(self, stop: Any, sig: int, frame: FrameType | None) -> None:
        if self._readiness.draining:  # the second SIGTERM: stop now
            if self._timer is not None:
                self._timer.cancel()
            self._stop(stop, sig, frame)
            return
        self._readiness.drain()
        logger.info(
            "SIGTERM: not ready; answering for %.0f s more, then finishing what is in flight",
            self._delay_s,
        )
        if self._delay_s <= 0:
            self._stop(stop, sig, frame)
            return
        self._timer = threading.Timer(self._delay_s, self._stop, (stop, sig, frame))
        self._timer.daemon = True
        self._timer.start()

    @staticmethod
    def _stop(stop: Any, sig: int, frame: FrameType | None) -> None:
        server = getattr(stop, "__self__", None)
        if server is not None and hasattr(server, "should_exit"):
            # uvicorn's graceful exit, without its re-raise of the signal after shutdown: a
            # drained server exits 0, as a finished job does
            server.should_exit = True
            return
        stop(sig, frame)
