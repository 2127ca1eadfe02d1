"""The loaded versions of one process: an LRU keyed by (model, version, fingerprint), each
version loaded once however many callers ask at the same moment, and closed when it leaves
(LRU eviction, unload, shutdown) so a Python model's ``finalize`` runs.

Residency is bounded by bytes (LAMBDASERVE_MAX_LOADED_BYTES, sized from the function's or the
task's memory by default; 0: none), as TF Serving's resource-preserving policy: each version's
memory is measured at load (this process's resident set before and after, plus its worker
processes'), and before a version loads, the least recently used ones leave until its size
(as last measured, else its files) fits, so a load never pushes the process past its memory.
A version that cannot fit even alone is refused (``ModelTooLarge``) with its size and the
budget. A count (LAMBDASERVE_MAX_LOADED_VERSIONS; 0: none) is a second bound; an ensemble
holds no model of its own (its steps are loaded versions), so it neither counts nor is
dropped to make room: else an ensemble with as many steps as the count would push out the
step it calls next, load after load. A version someone scaled (TorchServe's min_worker) is
pinned: it leaves only when nothing unpinned is left to drop, and the log says so."""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from collections.abc import Callable

from lambdaserve.errors import ModelTooLarge
from lambdaserve.runtimes.base import LoadedModel
from lambdaserve.serving.residency.memory import process_resident_bytes, release_freed_memory
from lambdaserve.serving.residency.progress import human_bytes

logger = logging.getLogger(__name__)

Key = tuple[str, int, str]  # model, version, the record's fingerprint
# (model, version, bytes measured at load; 0 once it left)
MemoryListener = Callable[[str, int, int], None]


class LoadedVersions:
    """At most ``limit`` loaded versions and ``max_bytes`` of them, least recently used
    dropped first, ``pinned`` ones last; ``resident`` measures this process (bytes)."""

    def __init__(
        self,
        limit: int,
        max_bytes: int = 0,
        pinned: Callable[[Key], bool] | None = None,
        *,
        resident: Callable[[], int] = process_resident_bytes,
        on_memory: MemoryListener | None = None,
    ) -> None:
        self.limit = max(0, limit)
        self.max_bytes = max(0, max_bytes)
        self._pinned = pinned or (lambda key: False)
        self._resident = resident
        self._on_memory = on_memory or (lambda model, version, size: None)
        self._sizes: dict[Key, int] = {}  # what each loaded version counts against the bound
        self._measured: dict[Key, int] = {}  # measured at its last load, kept after it left
        self._loaded: OrderedDict[Key, LoadedModel] = OrderedDict()
        self._uncounted: set[Key] = set()  # ensembles: no model of their own
        self._lock = threading.Lock()
        self._loading: dict[Key, threading.Lock] = {}

    def __contains__(self, key: Key) -> bool:
        return key in self._loaded

    def get(self, key: Key) -> LoadedModel | None:
        with self._lock:
            return self._loaded.get(key)

    def resident(self, key: Key) -> LoadedModel | None:
        """The loaded model for ``key`` where it is loaded and sound (the last used now);
        None where it must be loaded (``load``)."""
        with self._lock:
            found = self._loaded.get(key)
            if found is None or broken(found):
                return None
            self._loaded.move_to_end(key)
            return found

    def load(
        self,
        key: Key,
        build: Callable[[], LoadedModel],
        size: int = 0,
        prepare: Callable[[], None] | None = None,
        *,
        counted: bool = True,
    ) -> LoadedModel:
        """The loaded model for ``key``: from memory, or ``build()`` once (concurrent
        callers for the same key wait for that one load). ``size``: its files; ``prepare``
        runs before the load is measured (the runtime's library, shared by every version);
        ``counted``: False for an ensemble (it holds no model, and stays out of the bounds).
        A loaded model whose workers broke (they kept crashing) is dropped and built again:
        the catalog says READY only after a load, a reconcile or a re-upload recovered it,
        and that must answer. Raises ``ModelTooLarge`` when it cannot fit the byte bound."""
        with self._lock:
            found = self._loaded.get(key)
            if found is not None and not broken(found):
                self._loaded.move_to_end(key)
                return found
            loading = self._loading.setdefault(key, threading.Lock())
            if not counted:
                self._uncounted.add(key)
        with loading:
            with self._lock:
                found = self._loaded.get(key)
                if found is not None and not broken(found):
                    return found
                if found is not None:  # broken: its crash memory goes with it
                    del self._loaded[key]
                    self._sizes.pop(key, None)
            if found is not None:
                _release((key, found), "its workers broke; loading it afresh")
                release_freed_memory()
            try:
                loaded = self._build(key, build, size, prepare)
            finally:
                # only once the model is in _loaded (or failed): a caller arriving between
                # would otherwise take a fresh lock and load it a second time
                with self._lock:
                    self._loading.pop(key, None)
        return loaded

    def _build(
        self,
        key: Key,
        build: Callable[[], LoadedModel],
        size: int,
        prepare: Callable[[], None] | None,
    ) -> LoadedModel:
        expected = max(size, self._measured.get(key, 0))
        self._refuse_if_too_large(
            key, expected, "its files" if expected == size else "measured at its last load"
        )
        self._make_room(key, expected)  # before it loads: the process never passes its memory
        if prepare is not None:
            prepare()
        # Freed heap (the last load's file bytes) would be reused by this load unseen by the
        # resident set: hand it back first, so the difference is what this version holds.
        # No collection here: every release collects as it happens, and a full collection
        # in a fresh process (every imported module's objects) cost the infer function's
        # first request 52 ms (measured).
        release_freed_memory(collect=False)
        before = self._resident()
        loaded = build()
        measured = max(0, self._resident() - before) + _resident_bytes(loaded)
        self._measured[key] = measured
        try:
            self._refuse_if_too_large(
                key,
                max(size, measured),
                "measured at load" if measured >= size else "its files",
            )
        except ModelTooLarge:
            _release((key, loaded), "larger than the residency budget")
            release_freed_memory()
            raise
        evicted: list[tuple[Key, LoadedModel]] = []
        with self._lock:
            self._loaded[key] = loaded
            self._sizes[key] = max(size, measured)
            while (victim := self._over_bound(key)) is not None:
                evicted.append((victim, self._loaded.pop(victim)))
                self._sizes.pop(victim, None)
        self._on_memory(key[0], key[1], measured)
        self._drop(evicted, "LRU")
        return loaded

    def _refuse_if_too_large(self, key: Key, size: int, what: str) -> None:
        if not self.max_bytes or size <= self.max_bytes:
            return
        raise ModelTooLarge(
            f"{key[0]} version {key[1]} needs {human_bytes(size)} of memory ({what}), "
            f"more than this process's residency budget of {human_bytes(self.max_bytes)} "
            f"({self.max_bytes} bytes): it can never be resident here. Raise "
            "LAMBDASERVE_MAX_LOADED_BYTES (and the function's or the task's memory), or serve "
            "it where there is more memory"
        )

    def _make_room(self, key: Key, expected: int) -> None:
        """Drop the least recently used versions until ``expected`` more bytes (and one more
        version) fit the bounds."""
        evicted: list[tuple[Key, LoadedModel]] = []
        with self._lock:
            while (victim := self._over_bound(key, incoming=expected)) is not None:
                evicted.append((victim, self._loaded.pop(victim)))
                self._sizes.pop(victim, None)
        self._drop(evicted, f"LRU: making room for {key[0]} version {key[1]}")

    def _drop(self, evicted: list[tuple[Key, LoadedModel]], why: str) -> None:
        for dropped in evicted:
            _release(dropped, why)
            self._on_memory(dropped[0][0], dropped[0][1], 0)
        if evicted:
            release_freed_memory()

    def _over_bound(self, kept: Key, incoming: int | None = None) -> Key | None:
        """The version to drop while over a bound (never ``kept``, loaded or loading, nor an
        ensemble): the least recently used unpinned one, else the least recently used; None
        within bounds. ``incoming``: the bytes of ``kept`` about to load (it is not in
        ``_loaded`` yet)."""
        counted = [key for key in self._loaded if key not in self._uncounted]
        others = [key for key in counted if key != kept]
        arriving = incoming is not None and kept not in self._loaded
        count = len(counted) + (arriving and kept not in self._uncounted)
        over_count = bool(self.limit) and count > self.limit
        over_bytes = bool(self.max_bytes) and self._bytes() + (incoming or 0) > self.max_bytes
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

    def memory(self) -> dict[tuple[str, int], int]:
        """Each loaded version's memory as measured at its load, in bytes."""
        with self._lock:
            return {(k[0], k[1]): self._measured.get(k, 0) for k in self._loaded}

    def items(self) -> list[tuple[Key, LoadedModel]]:
        with self._lock:
            return list(self._loaded.items())

    def adopt(self, other: LoadedVersions) -> None:
        """Hold ``other``'s loaded models too (a SnapStart restore renews clients, not
        models)."""
        taken = other.items()
        with other._lock:
            sizes, measured = dict(other._sizes), dict(other._measured)
            uncounted = set(other._uncounted)
        with self._lock:
            self._loaded.update(taken)
            self._sizes.update(sizes)
            self._measured.update(measured)
            self._uncounted |= uncounted

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
        self._drop(dropped, "unload")
        return len(dropped)

    def close(self) -> None:
        """Drop every loaded version, as a server shutting down does."""
        with self._lock:
            dropped = list(self._loaded.items())
            self._loaded.clear()
            self._sizes.clear()
        self._drop(dropped, "shutdown")


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
