"""A long-running server's readiness, as Triton's: ready once the versions it serves are
downloaded, loaded and warmed up; not ready again once it drains.

``starting`` (live, loading its versions) -> ``ready`` -> ``draining`` (stopping: the load
balancer takes it out of rotation while in-flight requests finish). A version that fails to
load does not hold the whole server out of rotation: the server becomes ready without it
(``skipped`` says why), and that model's requests answer its load error, as they would
have on first use. Liveness is another question (the process answers at all).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass

from lambdaserve.serving.model_server import ModelServer
from lambdaserve.serving.residency.preload import Preloaded, preload_models

logger = logging.getLogger(__name__)
Listener = Callable[[bool], None]


@dataclass(frozen=True)
class ReadinessView:
    """What a probe reports: the state, and why it is not ready where it is not."""

    state: str
    loaded: tuple[tuple[str, int], ...] = ()
    skipped: tuple[tuple[str, str], ...] = ()

    @property
    def ready(self) -> bool:
        return self.state == "ready"

    @property
    def reason(self) -> str:
        if self.state == "starting":
            return "loading and warming up the models this server serves"
        if self.state == "draining":
            return "shutting down: finishing the requests in flight"
        return ""


class Readiness:
    """Thread-safe state; listeners hear every change of ``ready`` (gRPC health, say)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._view = ReadinessView("starting")
        self._listeners: list[Listener] = []

    @property
    def view(self) -> ReadinessView:
        return self._view

    @property
    def ready(self) -> bool:
        return self._view.ready

    @property
    def draining(self) -> bool:
        return self._view.state == "draining"

    def listen(self, listener: Listener) -> None:
        with self._lock:
            self._listeners.append(listener)

    def warmed(self, report: Preloaded) -> None:
        """The warm-up finished: ready, unless it already drains."""
        self._move("ready", report, only_from="starting")

    def drain(self) -> None:
        self._move("draining", None, only_from=None)

    def _move(self, state: str, report: Preloaded | None, only_from: str | None) -> None:
        with self._lock:
            before = self._view
            if only_from is not None and before.state != only_from:
                return
            self._view = ReadinessView(
                state,
                report.loaded if report else before.loaded,
                report.skipped if report else before.skipped,
            )
            listeners = list(self._listeners)
        if before.ready != self._view.ready:
            for listener in listeners:
                listener(self._view.ready)


def warm_up_in_background(
    server: Callable[[], ModelServer],
    readiness: Readiness,
    budget_bytes: int,
    then: Callable[[], None] | None = None,
) -> threading.Thread:
    """Load (download, load, warm up) the versions this server serves — the models marked
    ``preload``, else every model's default version, within ``budget_bytes`` — in a thread,
    then (after ``then``, which may wait: for the sibling workers, say) mark ``readiness``
    ready. Failures are skipped with their reason (never raised)."""

    def run() -> None:
        try:
            report = preload_models(server().residency, budget_bytes)
        except Exception:  # the catalog unreachable: serve on demand rather than never
            logger.exception("warm-up failed; ready without preloaded versions")
            report = Preloaded((), (), 0)
        if then is not None:
            then()
        readiness.warmed(report)
        logger.info(
            "ready: %d version(s) loaded and warmed up, %d skipped",
            len(report.loaded),
            len(report.skipped),
        )

    thread = threading.Thread(target=run, name="warm-up", daemon=True)
    thread.start()
    return thread
