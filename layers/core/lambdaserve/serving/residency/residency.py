"""Which versions this process holds loaded, and how: loaded through the artifact cache and
warmed up on first use, scaled (TorchServe's min/max workers, remembered across residency),
unloaded as Triton's unload does, let go when the catalog stops serving them, and a load
that fails where it serves recorded as the version's state (READY means it answers).

The execution side (``serving.model_server``) asks ``load`` for a version's model; the
management doors ask the rest."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from lambdaserve.catalog import version_policy
from lambdaserve.config.runtime_names import ENSEMBLE_RUNTIME, TENSORFLOW_RUNTIME
from lambdaserve.errors import LambdaServeError, ModelCodeFailed, ModelNotReady, ModelTooLarge
from lambdaserve.metrics.stats import StatsRegistry
from lambdaserve.runtimes.base import LoadedModel, LoadOptions
from lambdaserve.serving.cache import ArtifactCache
from lambdaserve.serving.rate_limiter import RateLimiter
from lambdaserve.serving.residency.loaded_versions import Key, LoadedVersions
from lambdaserve.serving.residency.loading import load_version, version_files
from lambdaserve.serving.residency.memory import import_runtime_library
from lambdaserve.serving.version_resolver import ServedVersion, VersionResolver
from lambdaserve.workers.options import WorkerOptions

logger = logging.getLogger(__name__)


class Residency:
    """The loaded versions of one process, bounded by count and bytes (``LoadedVersions``),
    with the scales someone asked for and the rate limiter's view of their instances."""

    def __init__(
        self,
        resolver: VersionResolver,
        cache: ArtifactCache,
        options: LoadOptions,
        stats: StatsRegistry,
        *,
        max_loaded: int,
        max_loaded_bytes: int = 0,
        workers: WorkerOptions | None = None,
        rate_limiter: RateLimiter | None = None,
    ) -> None:
        self.resolver = resolver  # the catalog view these versions were resolved from
        self._cache = cache
        self._options = options
        self._stats = stats
        self.workers = workers  # model code's worker processes (None: in this process)
        self._rate_limiter = rate_limiter
        # (model, version) -> the workers someone scaled it to: kept resident, and restored
        # when residency had to drop it anyway
        self._scales: dict[tuple[str, int], tuple[int, int | None]] = {}
        self._loaded = LoadedVersions(
            max_loaded,
            max_loaded_bytes,
            lambda key: (key[0], key[1]) in self._scales,
            on_memory=stats.record_memory,
        )

    @property
    def max_loaded(self) -> int:
        """How many versions this process holds loaded (LAMBDASERVE_MAX_LOADED_VERSIONS;
        0: no count bound, LAMBDASERVE_MAX_LOADED_BYTES alone)."""
        return self._loaded.limit

    @property
    def downloads(self) -> int:
        """How many files this process fetched from the bucket into its cache so far."""
        return self._cache.downloads

    def get(self, served: ServedVersion) -> LoadedModel | None:
        """``served``'s model where it is loaded; None where it is not (nothing loads)."""
        return self._loaded.get(key_of(served))

    def code_workers(self, served: ServedVersion) -> int:
        """How many worker processes run this loaded version's code; 0 when it runs in this
        process or is not loaded."""
        return worker_count(self.get(served))

    def executions_at_once(self, served: ServedVersion) -> int:
        """How many executions of the version may run at once: its worker processes or its
        instances where it is loaded, else what its config's instance_group asks."""
        loaded = self.get(served)
        if loaded is None or served.record.runtime == TENSORFLOW_RUNTIME:
            return served.config.instance_count  # a SavedModel: one session, N runs at once
        count = worker_count(loaded) or getattr(loaded, "instance_count", 1)
        return count if isinstance(count, int) and count > 0 else 1

    def loaded_versions(self) -> list[tuple[str, int]]:
        return [(model, version) for (model, version, _), _loaded in self._loaded.items()]

    def loaded_models(self) -> list[tuple[str, int, LoadedModel]]:
        """Every loaded version with its model (worker pools are described from these)."""
        return [(model, version, loaded) for (model, version, _), loaded in self._loaded.items()]

    def adopt(self, other: Residency) -> None:
        """Hold ``other``'s loaded models (a SnapStart restore renews clients, not models)."""
        self._loaded.adopt(other._loaded)

    def prefetch(self, served: ServedVersion) -> bool:
        """Download ``served``'s files into the local cache; True when it fetched any."""
        before = self._cache.downloads
        self._cache.materialize(version_files(served))
        return self._cache.downloads > before

    def load(self, served: ServedVersion) -> LoadedModel:
        """The loaded model for ``served``: from memory, or cache + runtime + warm-up."""
        found = self._loaded.resident(key_of(served))
        if found is not None:  # every request asks: nothing built for it
            return found
        try:
            return self._loaded.load(
                key_of(served),
                lambda: self._load(served),
                served.record.size,
                prepare=lambda: import_runtime_library(served.record.runtime),
                counted=served.record.runtime != ENSEMBLE_RUNTIME,
            )
        except ModelTooLarge as exc:
            self._report_load_failure(served, exc, prefix="cannot be resident where it serves")
            raise

    def scale(self, served: ServedVersion, min_workers: int, max_workers: int | None) -> Any:
        """TorchServe's scaling of a version's workers, remembered: the version stays
        resident, and a load after residency dropped it anyway comes back at this scale."""
        self._scales[(served.model, served.version)] = (min_workers, max_workers)
        loaded = self.load(served)
        loaded.scale(min_workers, max_workers)  # type: ignore[attr-defined]
        self._limit(served, loaded, min_workers)
        return loaded

    def unload(self, model: str) -> int:
        """Drop every loaded version of ``model`` (a Python model's ``finalize`` runs), as
        Triton's unload does; returns how many were loaded. Its scale is forgotten, as
        TorchServe's unregister forgets it."""
        self._forget_scales(model, lambda version: True)
        return self._loaded.unload(model)

    def scale_of(self, model: str, version: int) -> tuple[int, int | None] | None:
        """The workers someone scaled the version to (kept across residency), or None."""
        return self._scales.get((model, version))

    def catalog_changed(self, model: str) -> None:
        """The management side of this process changed ``model``'s states: serve from the
        catalog as it is now, and let go of loaded versions it no longer serves (Triton's
        unload frees them; a version that failed is loaded afresh by its next load)."""
        self.resolver.forget(model)
        try:
            serving = {
                (v.version, v.fingerprint)
                for v in self.resolver.versions(model).values()
                if v.state == version_policy.READY
            }
        except LambdaServeError:
            serving = set()  # the model is gone
        self._forget_scales(model, lambda version: version not in {v for v, _ in serving})
        self._loaded.unload(model, keep=lambda version, fp: (version, fp) in serving)

    def close(self) -> None:
        """Drop every loaded version, as a server shutting down does."""
        self._loaded.close()

    def _forget_scales(self, model: str, gone: Callable[[int], bool]) -> None:
        for key in [k for k in self._scales if k[0] == model and gone(k[1])]:
            self._scales.pop(key, None)

    def _load(self, served: ServedVersion) -> LoadedModel:
        try:
            loaded = load_version(
                served,
                self._cache,
                replace(self._options, version=served.version),
                self.workers,
                on_broken=lambda reason: self._report_broken(served, reason),
                on_loaded=lambda cold: self._stats.record_cold_start(
                    served.model, served.version, cold
                ),
            )
            self._limit(served, loaded)
        except ModelCodeFailed as exc:
            self._report_load_failure(served, exc)
            raise
        self._stats.record_loaded(served.model, served.version)
        scale = self._scales.get((served.model, served.version))
        rescale = getattr(loaded, "scale", None)
        if scale is not None and rescale is not None:
            logger.info(
                "%s version %s: restoring its scale, min_worker=%s",
                *(served.model, served.version, scale[0]),
            )
            rescale(*scale)
            self._limit(served, loaded, scale[0])
        return loaded

    def _limit(self, served: ServedVersion, loaded: LoadedModel, scaled: int = 0) -> None:
        """Under the rate limiter: the version's instances and their needs (LoadRefused)."""
        if self._rate_limiter is not None and not served.config.is_ensemble:
            limits = served.config.rate_limits  # an ensemble's steps are limited as theirs
            self._rate_limiter.register_loaded(key_of(served), loaded, limits, scaled)

    def _report_broken(self, served: ServedVersion, reason: str) -> None:
        """The version's workers keep crashing: UNAVAILABLE with the reason, as a failed load."""
        self._report_load_failure(served, ModelCodeFailed(reason), prefix="crashes where it serves")

    def _report_load_failure(
        self,
        served: ServedVersion,
        exc: ModelNotReady,
        prefix: str = "failed to load where it serves",
    ) -> None:
        """READY means it answers: the version's own code failed here (or it cannot fit this
        process's memory), so the catalog says UNAVAILABLE with the error, and the next
        request fails fast with it."""
        reason = f"{prefix}: {exc.message}"
        logger.error("%s version %s %s", served.model, served.version, reason)
        try:
            self.resolver.catalog.record_load_failure(
                served.model, served.version, served.record.fingerprint, reason[:1000]
            )
        except Exception:
            logger.exception("could not record the load failure of %s", served.model)
        self.resolver.forget(served.model)


def key_of(served: ServedVersion) -> Key:
    return (served.model, served.version, served.record.fingerprint)


def worker_count(loaded: LoadedModel | None) -> int:
    # a worker pool's count (workers.worker_model, not imported here: the Lambda cold path)
    count = getattr(loaded, "worker_count", 0)
    return count if isinstance(count, int) else 0
