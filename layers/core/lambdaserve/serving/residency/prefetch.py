"""Prefetch on publish: a long-running server (``serve``, the ECS ``worker``) notices newly
READY default versions through its catalog view and downloads them into its disk cache in
the background, so the first request after a publish does not wait for the download."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from lambdaserve.errors import LambdaServeError
from lambdaserve.serving.residency.residency import Residency

logger = logging.getLogger(__name__)


class Prefetcher:
    """Every ``interval_s``, each model's default version into the cache (once per fingerprint)."""

    def __init__(self, residency: Callable[[], Residency], interval_s: float) -> None:
        self._residency = residency
        self._interval_s = interval_s
        self._seen: set[tuple[str, int, str]] = set()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.fetched: list[tuple[str, int]] = []  # versions this prefetcher downloaded
        self.rounds = 0

    def run_once(self) -> list[tuple[str, int]]:
        """One look at the catalog; the versions downloaded now."""
        residency = self._residency()
        fetched = []
        for name in residency.resolver.catalog.all_model_names():
            try:
                served = residency.resolver.resolve(name, None)
            except LambdaServeError:
                continue  # nothing READY to fetch
            key = (name, served.version, served.record.fingerprint)
            if key in self._seen:
                continue
            try:
                if residency.prefetch(served):
                    fetched.append((name, served.version))
            except Exception as exc:  # the next round tries again; requests still load
                logger.warning("prefetch of %s version %s failed: %s", name, served.version, exc)
                continue
            self._seen.add(key)
        self.rounds += 1
        self.fetched.extend(fetched)
        for name, version in fetched:
            logger.info("prefetched %s version %s into the local cache", name, version)
        return fetched

    def start(self) -> Prefetcher:
        self._thread = threading.Thread(target=self._loop, name="prefetch", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self.run_once()
            except Exception:  # the catalog unreachable for a while: keep serving, retry
                logger.exception("prefetch round failed")
            self._stop.wait(self._interval_s)
