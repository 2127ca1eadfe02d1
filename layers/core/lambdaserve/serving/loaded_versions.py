"""The loaded versions of one process: an LRU keyed by (model, version, fingerprint), each
version loaded once however many callers ask at the same moment, and closed when it leaves
(LRU eviction, unload, shutdown) so a Python model's ``finalize`` runs."""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from collections.abc import Callable

from lambdaserve.runtimes.base import LoadedModel

logger = logging.getLogger(__name__)

Key = tuple[str, int, str]  # model, version, the record's fingerprint


class LoadedVersions:
    """At most ``limit`` loaded versions, least recently used dropped first."""

    def __init__(self, limit: int) -> None:
        self.limit = max(1, limit)
        self._loaded: OrderedDict[Key, LoadedModel] = OrderedDict()
        self._lock = threading.Lock()
        self._loading: dict[Key, threading.Lock] = {}

    def __contains__(self, key: Key) -> bool:
        return key in self._loaded

    def get(self, key: Key) -> LoadedModel | None:
        with self._lock:
            return self._loaded.get(key)

    def load(self, key: Key, build: Callable[[], LoadedModel]) -> LoadedModel:
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
                    while len(self._loaded) > self.limit:
                        evicted.append(self._loaded.popitem(last=False))
            finally:
                # only once the model is in _loaded (or failed): a caller arriving between
                # would otherwise take a fresh lock and load it a second time
                with self._lock:
                    self._loading.pop(key, None)
        for dropped in evicted:
            _release(dropped, "LRU")
        return loaded

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
        for item in dropped:
            _release(item, "unload")
        return len(dropped)

    def close(self) -> None:
        """Drop every loaded version, as a server shutting down does."""
        with self._lock:
            dropped = list(self._loaded.items())
            self._loaded.clear()
        for item in dropped:
            _release(item, "shutdown")


def broken(loaded: LoadedModel) -> str:
    """Why ``loaded`` cannot answer any more (its worker processes kept crashing), or ""."""
    why = getattr(loaded, "broken", "")
    return why if isinstance(why, str) else ""


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
