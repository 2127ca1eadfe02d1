"""Resolve a version, load it through the cache, warm it up, execute requests.

The warm path reads nothing remote: the catalog view is cached for a short TTL and
loaded versions stay in the server's ``LoadedVersions`` (``serving.loaded_versions``: an LRU
bounded by count and bytes, scaled versions pinned) across invocations; the process keeps
one ``ModelServer``, built by its composition root.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, TypeVar

import numpy as np

from lambdaserve.batching.assembly import BatchResult, assemble, check_invariant
from lambdaserve.batching.ragged import member_outputs, model_inputs
from lambdaserve.catalog import version_policy
from lambdaserve.config.runtime_names import ENSEMBLE_RUNTIME, TENSORFLOW_RUNTIME
from lambdaserve.errors import LambdaServeError, ModelCodeFailed, ModelNotReady, ModelTooLarge
from lambdaserve.metrics.stats import Execution, StatsRegistry
from lambdaserve.protocol.v2 import InferRequest
from lambdaserve.runtimes.base import LoadedModel, LoadOptions
from lambdaserve.runtimes.code_errors import request_ids
from lambdaserve.runtimes.sequence_requests import passing_sequence, sequence_parameters
from lambdaserve.serving.batch_runs import executing, run_batch
from lambdaserve.serving.binding import bind_inputs, check_batch_size, select_outputs
from lambdaserve.serving.cache import ArtifactCache
from lambdaserve.serving.classification import classify
from lambdaserve.serving.fleet_slots.gate import FleetSlots
from lambdaserve.serving.loaded_versions import Key, LoadedVersions
from lambdaserve.serving.loading import load_version, version_files
from lambdaserve.serving.memory import import_runtime_library
from lambdaserve.serving.rate_limiter import RateLimiter
from lambdaserve.serving.response_cache.lookups import Lookup, ResponseCache
from lambdaserve.serving.sequences.memory_store import MemorySequenceStore
from lambdaserve.serving.sequences.oldest import run_oldest
from lambdaserve.serving.sequences.served_step import served_step
from lambdaserve.serving.sequences.steps import SequenceSteps
from lambdaserve.serving.version_resolver import ServedVersion, VersionResolver
from lambdaserve.tracing.request_trace import computed, parent_of
from lambdaserve.workers.deadline import request_deadline
from lambdaserve.workers.options import WorkerOptions

logger = logging.getLogger(__name__)
T = TypeVar("T")


@dataclass(frozen=True)
class BatchItem:
    """One request of a batch handed to the infer function's batch entry point."""

    model: str
    version: int | None
    request: InferRequest


class ModelServer:
    """Executes inference for READY versions; one instance per process."""

    def __init__(
        self,
        resolver: VersionResolver,
        cache: ArtifactCache,
        options: LoadOptions,
        max_loaded: int,
        stats: StatsRegistry,
        *,
        default_max_batch_size: int = 8,
        response_cache: ResponseCache | None = None,
        workers: WorkerOptions | None = None,
        max_loaded_bytes: int = 0,
        sequences: SequenceSteps | None = None,
        rate_limiter: RateLimiter | None = None,
        fleet_slots: FleetSlots | None = None,
    ) -> None:
        self.resolver = resolver
        # Triton's sequence batcher: records in a store every instance shares (wiring's)
        self.sequences = sequences or SequenceSteps(MemorySequenceStore())
        self.workers = workers
        self.rate_limiter = rate_limiter  # `serve --rate-limit execution_count`; None: off
        # the Lambda path: stated instance counts bound executions fleet-wide (never with
        # the rate limiter, which is serve's)
        self.fleet_slots = fleet_slots
        self.stats = stats
        self.response_cache = response_cache
        self._default_max_batch_size = default_max_batch_size
        self._cache = cache
        self._options = options
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
    def _executions(self) -> RateLimiter | FleetSlots | None:
        """What each execution holds: an instance (serve's rate limiter) or a fleet slot."""
        return self.rate_limiter or self.fleet_slots

    @property
    def max_loaded_bytes(self) -> int:
        """The residency budget in bytes (LAMBDASERVE_MAX_LOADED_BYTES; 0: none)."""
        return self._loaded.max_bytes

    @property
    def max_loaded(self) -> int:
        """How many versions this server holds loaded (LAMBDASERVE_MAX_LOADED_VERSIONS;
        0: no count bound, LAMBDASERVE_MAX_LOADED_BYTES alone)."""
        return self._loaded.limit

    def infer(
        self,
        model: str,
        version: int | None,
        request: InferRequest,
        encode: Callable[[ServedVersion, dict[str, np.ndarray[Any, Any]]], T],
        *,
        cached: bool = True,
    ) -> T:
        """Run one request; ``encode`` shapes the outputs (timed as compute_output). With
        ``cached`` (unless the caller asked the response cache itself), a cached answer is
        given before the model is loaded: a cold instance answers without the model."""
        served = self.resolver.resolve(model, version)
        lookup = self.cache_lookup(served, request) if cached else None
        if lookup is not None and lookup.outputs is not None:
            return encode(served, lookup.outputs)
        loaded = self.load(served)  # a cold load is not inference time, as in Triton's stats
        if served.config.sequence_batching is not None:
            return served_step(self.sequences, self.stats, served, loaded, request, encode=encode)
        started = time.perf_counter_ns()
        try:
            inputs = bind_inputs(request, served.signature)
            check_batch_size(inputs, model, served.config.max_batch_size)
            names = select_outputs(request, served.signature)
            bound = time.perf_counter_ns()
            with (
                request_ids((request.id,)),  # for model code's failure log
                request_deadline(served.config, (request.parameters,)),
                parent_of((request,)),
                passing_sequence(request.parameters),
                executing(self._executions, served, (request.parameters,)) as held,
            ):
                outputs = classify(request, served, _run_one(served, loaded, inputs, names))
            ran = time.perf_counter_ns()
            computed((request,), (started, bound, ran, time.perf_counter_ns()), (outputs,))
            encoded = encode(served, outputs)
        except LambdaServeError as exc:
            self.stats.record_failure(model, served.version, time.perf_counter_ns() - started, exc)
            raise
        done = time.perf_counter_ns()
        self.stats.record_success(
            model,
            served.version,
            Execution(
                1,
                _batch_size(inputs, served),
                held.waited_ns,  # waiting for the instance or slot is queue time
                bound - started,
                ran - bound - held.waited_ns,
                done - ran,
            ),
        )
        if lookup is not None:
            self.cache_store(served, lookup, outputs)
        return encoded

    def cache_lookup(self, served: ServedVersion, request: InferRequest) -> Lookup | None:
        """The response cache's answer to ``request`` (None: ``served`` does not cache; a
        sequence model never does: a step's answer depends on its sequence's state)."""
        if self.response_cache is None or served.config.sequence_batching is not None:
            return None
        if sequence_parameters(request.parameters):
            return None  # an ensemble's step of a sequence: its answer depends on the state
        return self.response_cache.lookup(served, request, self.stats)

    def cache_store(
        self, served: ServedVersion, lookup: Lookup, outputs: Mapping[str, np.ndarray[Any, Any]]
    ) -> None:
        if self.response_cache is not None:
            self.response_cache.store(served, lookup, outputs, self.stats)

    def infer_batch(self, items: Sequence[BatchItem]) -> list[BatchResult]:
        """N requests in, N results out, in order; an error stays with its own item.

        Requests for the same model and version run together in batches.
        """
        groups: dict[tuple[str, int | None], list[int]] = {}
        for index, item in enumerate(items):
            groups.setdefault((item.model, item.version), []).append(index)
        results: list[BatchResult | None] = [None] * len(items)
        for (model, version), indexes in groups.items():
            outcomes = self.infer_many(model, version, [items[i].request for i in indexes])
            for index, outcome in zip(indexes, outcomes, strict=True):
                results[index] = outcome
        done = [r for r in results if r is not None]
        check_invariant(len(items), done)
        return done

    def infer_many(
        self,
        model: str,
        version: int | None,
        requests: Sequence[InferRequest],
        queued_ns: Sequence[int] | None = None,
        *,
        cached: bool = True,
    ) -> list[BatchResult]:
        """Requests for one model version: each validated, run in batches, split back;
        with ``cached``, those the response cache answers skip the model."""
        results: list[BatchResult | None] = [None] * len(requests)
        lookups: dict[int, Lookup] = {}
        try:
            served = self.resolver.resolve(model, version)
            if served.config.sequence_batching is not None or _passes_sequences(served, requests):
                return self._steps(served, model, version, requests)
            for index, request in enumerate(requests):
                lookup = self.cache_lookup(served, request) if cached else None
                if lookup is not None and lookup.outputs is not None:
                    results[index] = BatchResult(outputs=lookup.outputs, version=served.version)
                elif lookup is not None:
                    lookups[index] = lookup
            if all(r is not None for r in results):
                return [r for r in results if r is not None]
            loaded = self.load(served)
        except LambdaServeError as exc:
            return [r or BatchResult(error=exc) for r in results]
        valid = []
        for index, request in enumerate(requests):
            if results[index] is not None:
                continue
            try:
                inputs = bind_inputs(request, served.signature)
                check_batch_size(inputs, model, served.config.max_batch_size)
                select_outputs(request, served.signature)
                valid.append(index)
            except LambdaServeError as exc:
                results[index] = BatchResult(error=exc)
                self.stats.record_failure(model, served.version, 0, exc)
        limit = batch_limit(served, self._default_max_batch_size)
        preferred = (
            served.config.dynamic_batching.preferred_batch_size
            if (served.config.dynamic_batching)
            else ()
        )
        ragged = served.config.ragged_batching
        for batch in assemble(
            [requests[i] for i in valid], limit, preferred, ragged.ragged if ragged else ()
        ):
            members = [valid[j] for j in batch.members]
            waited = max((queued_ns or [0] * len(requests))[i] for i in members)
            outcomes = run_batch(
                self.stats,
                served,
                loaded,
                [requests[i] for i in members],
                batch=batch,
                queued_ns=waited,
                limiter=self._executions,
            )
            for index, outcome in zip(members, outcomes, strict=True):
                results[index] = outcome
                if index in lookups and outcome.outputs is not None:
                    self.cache_store(served, lookups[index], outcome.outputs)
        done = [r for r in results if r is not None]
        check_invariant(len(requests), done)
        return done

    def _steps(
        self,
        served: ServedVersion,
        model: str,
        version: int | None,
        requests: Sequence[InferRequest],
    ) -> list[BatchResult]:
        """Steps of sequences: with ``oldest``, different sequences' steps in one execution;
        with ``direct`` (and an ensemble's requests, which pass their sequences on to its
        steps), each alone, in order."""
        sequences = served.config.sequence_batching
        oldest = sequences is not None and sequences.strategy == "oldest"
        if oldest and served.config.max_batch_size > 1 and requests[1:]:
            return run_oldest(
                self.sequences,
                self.stats,
                served,
                self.load(served),
                requests,
                alone=lambda request: self._one(model, version, request),
            )
        return [self._one(model, version, request) for request in requests]

    def _one(self, model: str, version: int | None, request: InferRequest) -> BatchResult:
        try:
            return self.infer(
                model, version, request, lambda s, out: BatchResult(outputs=out, version=s.version)
            )
        except LambdaServeError as exc:
            return BatchResult(error=exc)

    def is_loaded(self, model: str, version: int | None) -> bool:
        """True when serving this request needs no catalog read, download or load."""
        served = self._served_in_memory(model, version)
        return served if isinstance(served, bool) else _key(served) in self._loaded

    def answers_inline(self, model: str, version: int | None) -> bool:
        """True when running this request may hold the caller's thread (the event loop):
        loaded, and run in this process. A version whose code runs in worker processes is
        waited for from a thread, so a slow or hung model never holds the loop, and other
        models' requests (and health checks) go on while its workers run; so is a step of
        a sequence, which reads and writes the sequence's record."""
        served = self._served_in_memory(model, version)
        if isinstance(served, bool):
            return served
        if served.config.sequence_batching is not None:
            return False  # a step reads and writes its sequence's record: I/O
        loaded = self._loaded.get(_key(served))
        return loaded is not None and _worker_count(loaded) == 0

    def _served_in_memory(self, model: str, version: int | None) -> ServedVersion | bool:
        """The version this request would use, found without I/O; else False (the catalog
        must be read first), or True (the answer, an error, is already known)."""
        if not self.resolver.is_fresh(model):
            return False
        try:
            return self.resolver.resolve(model, version)
        except LambdaServeError:
            return True  # the answer (an error) is already known without I/O

    def code_workers(self, served: ServedVersion) -> int:
        """How many worker processes run this loaded version's code; 0 when it runs in this
        process or is not loaded."""
        loaded = self._loaded.get((served.model, served.version, served.record.fingerprint))
        return _worker_count(loaded)

    def executions_at_once(self, served: ServedVersion) -> int:
        """How many executions of the version may run at once: its worker processes or its
        instances where it is loaded, else what its config's instance_group asks."""
        loaded = self._loaded.get(_key(served))
        if loaded is None or served.record.runtime == TENSORFLOW_RUNTIME:
            return served.config.instance_count  # a SavedModel: one session, N runs at once
        count = _worker_count(loaded) or getattr(loaded, "instance_count", 1)
        return count if isinstance(count, int) and count > 0 else 1

    def loaded_versions(self) -> list[tuple[str, int]]:
        return [(model, version) for (model, version, _), _loaded in self._loaded.items()]

    def loaded_models(self) -> list[tuple[str, int, LoadedModel]]:
        """Every loaded version with its model (worker pools are described from these)."""
        return [(model, version, loaded) for (model, version, _), loaded in self._loaded.items()]

    def adopt_loaded(self, other: ModelServer) -> None:
        """Serve ``other``'s loaded models (a SnapStart restore renews clients, not models)."""
        self._loaded.adopt(other._loaded)

    def prefetch(self, served: ServedVersion) -> bool:
        """Download ``served``'s files into the local cache; True when it fetched any."""
        before = self._cache.downloads
        self._cache.materialize(version_files(served))
        return self._cache.downloads > before

    def load(self, served: ServedVersion) -> LoadedModel:
        """The loaded model for ``served``: from memory, or cache + runtime + warm-up."""
        key = (served.model, served.version, served.record.fingerprint)
        try:
            return self._loaded.load(
                key,
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

    def _forget_scales(self, model: str, gone: Callable[[int], bool]) -> None:
        for key in [k for k in self._scales if k[0] == model and gone(k[1])]:
            self._scales.pop(key, None)

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

    def _load(self, served: ServedVersion) -> LoadedModel:
        try:
            loaded = load_version(
                served,
                self._cache,
                replace(self._options, version=served.version),
                self.workers,
                lambda reason: self._report_broken(served, reason),
            )
            self._limit(served, loaded)
        except ModelCodeFailed as exc:
            self._report_load_failure(served, exc)
            raise
        self.stats.record_loaded(served.model, served.version)
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
        if self.rate_limiter is not None and not served.config.is_ensemble:
            limits = served.config.rate_limits  # an ensemble's steps are limited as theirs
            self.rate_limiter.register_loaded(_key(served), loaded, limits, scaled)

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


def batch_limit(served: ServedVersion, default: int) -> int:
    """How many rows one execution may take: the config's max_batch_size, or for a model
    whose every input has a dynamic first dimension, ``default`` (Triton's auto-complete)."""
    if served.config.max_batch_size > 0:
        return served.config.max_batch_size
    inputs = served.signature.inputs
    if inputs and all(spec.shape[:1] == (-1,) for spec in inputs):
        return default
    return 0


def _batch_size(inputs: Mapping[str, np.ndarray[Any, Any]], served: ServedVersion) -> int:
    """The batch dimension's size, for models whose first dimension is the batch."""
    first = next(iter(inputs.values()), None)
    batched = served.config.max_batch_size > 0 or (
        bool(served.signature.inputs) and served.signature.inputs[0].shape[:1] == (-1,)
    )
    if batched and first is not None and first.ndim:
        return int(first.shape[0])
    return 1


def _run_one(
    served: ServedVersion,
    loaded: LoadedModel,
    inputs: dict[str, np.ndarray[Any, Any]],
    names: list[str],
) -> dict[str, np.ndarray[Any, Any]]:
    """One request through the model: as a ragged batch of one where the config batches
    ragged (the model takes its ragged inputs 1-D, and the batch inputs)."""
    ragged = served.config.ragged_batching
    if ragged is None:
        return loaded.run(inputs, names)
    rows = [_batch_size(inputs, served)]
    return member_outputs(
        ragged, loaded.run(model_inputs(ragged, [inputs]), names), [inputs], rows
    )[0]


def _key(served: ServedVersion) -> Key:
    return (served.model, served.version, served.record.fingerprint)


def _worker_count(loaded: LoadedModel | None) -> int:
    # a worker pool's count (workers.worker_model, not imported here: the Lambda cold path)
    count = getattr(loaded, "worker_count", 0)
    return count if isinstance(count, int) else 0


def _passes_sequences(served: ServedVersion, requests: Sequence[InferRequest]) -> bool:
    """An ensemble's requests that are steps of sequences: each runs alone, so that each
    passes its own sequence on to the ensemble's steps."""
    return served.config.is_ensemble and any(sequence_parameters(r.parameters) for r in requests)
