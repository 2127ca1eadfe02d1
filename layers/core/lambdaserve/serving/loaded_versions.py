"""The loaded versions of one process: an LRU keyed by (model, version, fingerprint), each
version loaded once however many callers ask at the same moment, and closed when it leaves
(LRU eviction, unload, shutdown) so a Python model's ``finalize`` runs.

Residency is bounded by a count (LAMBDASERVE_MAX_LOADED_VERSIONS; 0: none) and by bytes
(LAMBDASERVE_MAX_LOADED_BYTES; 0: none): a version's files, or its workers' resident memory
where that is more. A version someone scaled (TorchServe's min_worker) is pinned: it leaves
only when nothing unpinned is left to drop, and the log says so."""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from collections.abc import Callable

from lambdaserve.runtimes.base import LoadedModel

logger = logging.getLogger(__name__)

Key = tuple[str, int, str]  # model, version, the record's fingerprint


class LoadedVersions:
    """At most ``limit`` loaded versions and ``max_bytes`` of them, least recently used
    dropped first, ``pinned`` ones last."""

    def __init__(
        self, limit: int, max_bytes: int = 0, pinned: Callable[[Key], bool] | None = None
    ) -> None:
        self.limit = max(0, limit)
        self.max_bytes = max(0, max_bytes)
        self._pinned = pinned or (lambda key: False)
        self._sizes: dict[Key, int] = {}
        self._loaded: OrderedDict[Key, LoadedModel] = OrderedDict()
        self._lock = threading.Lock()
        self._loading: dict[Key, threading.Lock] = {}

    def __contains__(self, key: Key) -> bool:
        return key in self._loaded

    def get(self, key: Key) -> LoadedModel | None:
        with self._lock:
            return self._loaded.get(key)

    def load(self, key: Key, build: Callable[[], LoadedModel], size: int = 0) -> LoadedModel:
        """The loaded model for ``key``: from memory, or ``build()`` once (concurrent
        callers for the same key wait for that one load). A loaded model whose workers
        broke (they kept crashing) is dropped and built again: the catalog says READY only
        after a load, a reconcile or a re-upload recovered it, and that must answer."""
        with self._lock:
            found = self._loaded.get(key)
            if found is not None and not broken(found):
                self._loaded.move_to_end(key)
                return found
            loading = self._loading.setdefault(key, threading.Lock())
        with loading:
            evicted: list[tuple[Key, LoadedModel]] = []
            with self._lock:
                found = self._loaded.get(key)
                if found is not None and not broken(found):
                    return found
                if found is not None:  # broken: its crash memory goes with it
                    del self._loaded[key]
            if found is not None:
                _release((key, found), "its workers broke; loading it afresh")
            try:
                loaded = build()
                with self._lock:
                    self._loaded[key] = loaded
                    self._sizes[key] = size
                    while (victim := self._over_bound(key)) is not None:
                        evicted.append((victim, self._loaded.pop(victim)))
                        self._sizes.pop(victim, None)
            finally:
                # only once the model is in _loaded (or failed): a caller arriving between
                # would otherwise take a fresh lock and load it a second time
                with self._lock:
                    self._loading.pop(key, None)
        for dropped in evicted:
            _release(dropped, "LRU")
        return loaded

    def _over_bound(self, kept: Key) -> Key | None:
        """The version to drop while over a bound (never ``kept``, just loaded): the least
        recently used unpinned one, else the least recently used; None within bounds."""
        others = [key for key in self._loaded if key != kept]
        over_count = bool(self.limit) and len(self._loaded) > self.limit
        over_bytes = bool(self.max_bytes) and self._bytes() > self.max_bytes
        if not others or not (over_count or over_bytes):
            return None
        unpinned = [key for key in others if not self._pinned(key)]
        if unpinned:
            return unpinned[0]
        victim = others[0]
        logger.warning(
            "unloading %s version %s although it was scaled (min_worker): residency is full "
            "(%s); its next load restores its scale",
            victim[0],
            victim[1],
            _bounds(self.limit, self.max_bytes),
        )
        return victim

    def _bytes(self) -> int:
        return sum(
            max(self._sizes.get(key, 0), _resident_bytes(loaded))
            for key, loaded in self._loaded.items()
        )

    def items(self) -> list[tuple[Key, LoadedModel]]:
        with self._lock:
            return list(self._loaded.items())

    def adopt(self, other: LoadedVersions) -> None:
        """Hold ``other``'s loaded models too (a SnapStart restore renews clients, not
        models)."""
        taken = other.items()
        with self._lock:
            self._loaded.update(taken)

    def unload(self, model: str, keep: Callable[[int, str], bool] | None = None) -> int:
        """Drop every loaded version of ``model`` but those ``keep(version, fingerprint)``
        keeps; how many were dropped."""
        with self._lock:
            keys = [
                key
                for key in self._loaded
                if key[0] == model and (keep is None or not keep(key[1], key[2]))
            ]
            dropped = [(key, self._loaded.pop(key)) for key in keys]
            for key in keys:
                self._sizes.pop(key, None)
        for item in dropped:
            _release(item, "unload")
        return len(dropped)

    def close(self) -> None:
        """Drop every loaded version, as a server shutting down does."""
        with self._lock:
            dropped = list(self._loaded.items())
            self._loaded.clear()
            self._sizes.clear()
        for item in dropped:
            _release(item, "shutdown")


def broken(loaded: LoadedModel) -> str:
    """Why ``loaded`` cannot answer any more (its worker processes kept crashing), or ""."""
    why = getattr(loaded, "broken", "")
    return why if isinstance(why, str) else ""


def _resident_bytes(loaded: LoadedModel) -> int:
    measure = getattr(loaded, "memory_bytes", None)  # a worker pool's processes
    return int(measure()) if callable(measure) else 0


def _bounds(limit: int, max_bytes: int) -> str:
    said = [f"LAMBDASERVE_MAX_LOADED_VERSIONS={limit}"] if limit else []
    return ", ".join(said + ([f"LAMBDASERVE_MAX_LOADED_BYTES={max_bytes}"] if max_bytes else []))


def _release(item: tuple[Key, LoadedModel], why: str) -> None:
    """A loaded model leaves memory: its ``close`` runs (Python models' ``finalize``)."""
    (model, version, _), loaded = item
    close = getattr(loaded, "close", None)
    if close is not None:
        try:
            close()
        except Exception:
            logger.exception("closing %s version %s failed", model, version)
    logger.info("unloaded %s version %s (%s)", model, version, why)
