"""Execute requests for READY versions: resolve, load (``serving.residency``), bind, run.

The warm path reads nothing remote: the catalog view is cached for a short TTL and loaded
versions stay resident (``serving.residency.residency``) across invocations; the process
keeps one ``ModelServer``, built by its composition root.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any, TypeVar

import numpy as np

from lambdaserve.batching.assembly import BatchResult, assemble, check_invariant
from lambdaserve.errors import LambdaServeError
from lambdaserve.metrics.stats import Execution, StatsRegistry
from lambdaserve.protocol.v2 import InferRequest
from lambdaserve.runtimes.base import LoadedModel
from lambdaserve.runtimes.sequence_requests import sequence_parameters
from lambdaserve.serving.batch_runs import batch_limit, batch_size, run_batch, run_one
from lambdaserve.serving.binding import bind_inputs, check_batch_size, select_outputs
from lambdaserve.serving.classification import classify
from lambdaserve.serving.execution import execution_scope
from lambdaserve.serving.fleet_slots.gate import FleetSlots
from lambdaserve.serving.rate_limiter import RateLimiter
from lambdaserve.serving.residency.residency import Residency, worker_count
from lambdaserve.serving.response_cache.lookups import Lookup, ResponseCache
from lambdaserve.serving.sequences.memory_store import MemorySequenceStore
from lambdaserve.serving.sequences.oldest import passes_sequences, run_steps
from lambdaserve.serving.sequences.served_step import served_step
from lambdaserve.serving.sequences.steps import SequenceSteps
from lambdaserve.serving.version_resolver import ServedVersion, VersionResolver
from lambdaserve.tracing.request_trace import computed

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
        residency: Residency,
        stats: StatsRegistry,
        *,
        default_max_batch_size: int = 8,
        response_cache: ResponseCache | None = None,
        sequences: SequenceSteps | None = None,
        rate_limiter: RateLimiter | None = None,
        fleet_slots: FleetSlots | None = None,
    ) -> None:
        self.resolver = resolver
        self.residency = residency  # the loaded versions: loaded, scaled, unloaded there
        # Triton's sequence batcher: records in a store every instance shares (wiring's)
        self.sequences = sequences or SequenceSteps(MemorySequenceStore())
        self.workers = residency.workers
        self.rate_limiter = rate_limiter  # `serve --rate-limit execution_count`; None: off
        # the Lambda path: stated instance counts bound executions fleet-wide (never with
        # the rate limiter, which is serve's)
        self.fleet_slots = fleet_slots
        self.stats = stats
        self.response_cache = response_cache
        self._default_max_batch_size = default_max_batch_size

    @property
    def executions(self) -> RateLimiter | FleetSlots | None:
        """What each execution holds: an instance (serve's rate limiter) or a fleet slot."""
        return self.rate_limiter or self.fleet_slots

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
            return served_step(
                self.sequences,
                self.stats,
                served,
                loaded,
                request,
                encode=encode,
                limiter=self.executions,
            )
        started = time.perf_counter_ns()
        try:
            inputs = bind_inputs(request, served.signature)
            check_batch_size(inputs, model, served.config.max_batch_size)
            names = select_outputs(request, served.signature)
            bound = time.perf_counter_ns()
            with execution_scope(self.executions, served, (request,)) as held:
                outputs = classify(request, served, run_one(served, loaded, inputs, names))
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
                batch_size(inputs, served),
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
            if served.config.sequence_batching is not None or passes_sequences(served, requests):
                alone = partial(self._one, model, version)
                return run_steps(
                    self.sequences, self.stats, served, requests, load=self.load, alone=alone
                )
            for index, request in enumerate(requests):
                lookup = self.cache_lookup(served, request) if cached else None
                if lookup is not None and lookup.outputs is not None:
                    results[index] = BatchResult(
                        outputs=lookup.outputs, version=served.version, served=served
                    )
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
                limiter=self.executions,
            )
            for index, outcome in zip(members, outcomes, strict=True):
                results[index] = outcome
                if index in lookups and outcome.outputs is not None:
                    self.cache_store(served, lookups[index], outcome.outputs)
        done = [r for r in results if r is not None]
        check_invariant(len(requests), done)
        return done

    def _one(self, model: str, version: int | None, request: InferRequest) -> BatchResult:
        try:
            return self.infer(
                model,
                version,
                request,
                lambda s, out: BatchResult(outputs=out, version=s.version, served=s),
            )
        except LambdaServeError as exc:
            return BatchResult(error=exc)

    def is_loaded(self, model: str, version: int | None) -> bool:
        """True when serving this request needs no catalog read, download or load."""
        served = self._served_in_memory(model, version)
        return served if isinstance(served, bool) else self.residency.get(served) is not None

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
        loaded = self.residency.get(served)
        return loaded is not None and worker_count(loaded) == 0

    def served_now(self, model: str, version: int | None) -> ServedVersion | None:
        """The version a request for ``model`` runs on, where knowing it needs no catalog
        read; None otherwise (or where it fails: resolving again says why)."""
        served = self._served_in_memory(model, version)
        return None if isinstance(served, bool) else served

    def _served_in_memory(self, model: str, version: int | None) -> ServedVersion | bool:
        """The version this request would use, found without I/O; else False (the catalog
        must be read first), or True (the answer, an error, is already known)."""
        if not self.resolver.is_fresh(model):
            return False
        try:
            return self.resolver.resolve(model, version)
        except LambdaServeError:
            return True  # the answer (an error) is already known without I/O

    def load(self, served: ServedVersion) -> LoadedModel:
        """The loaded model for ``served`` (``residency``'s: from memory, or loaded now)."""
        return self.residency.load(served)
