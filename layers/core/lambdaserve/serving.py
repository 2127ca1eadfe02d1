"""Resolve a version, load it through the cache, warm it up, execute requests.

The warm path reads nothing remote: the catalog view is cached for a short TTL and
loaded models stay in a module-scope LRU across invocations.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar

import numpy as np

from lambdaserve import policy
from lambdaserve.batch_runs import BatchResult, run_batch
from lambdaserve.batching import assemble, check_invariant
from lambdaserve.binding import bind_inputs, select_outputs
from lambdaserve.cache import ArtifactCache
from lambdaserve.catalog import Catalog, ModelRecord, VersionRecord
from lambdaserve.classification import classify
from lambdaserve.errors import LambdaServeError, ModelNotFound, ModelNotReady
from lambdaserve.model_configs import effective_config
from lambdaserve.model_loading import load_version, version_files
from lambdaserve.modelconfig import ModelConfig
from lambdaserve.protocol.v2 import InferRequest
from lambdaserve.repository import parse_version_ref
from lambdaserve.runtimes import OPENVINO_PLATFORMS, LoadedModel, LoadOptions, Signature
from lambdaserve.stats import Execution, StatsRegistry

logger = logging.getLogger(__name__)
T = TypeVar("T")
__all__ = ["BatchResult", "ModelServer", "ServedVersion", "VersionResolver", "batch_limit"]


@dataclass(frozen=True)
class ServedVersion:
    """A READY version with everything needed to load and run it."""

    model: str
    version: int
    config: ModelConfig
    record: VersionRecord
    signature: Signature
    class_labels: Mapping[str, Sequence[str]] = field(default_factory=dict)

    @property
    def platform(self) -> str:
        if self.config.platform:
            return self.config.platform
        if self.record.runtime == "openvino":  # a backend without a platform: its name
            return OPENVINO_PLATFORMS.get(self.record.model_file, "openvino")
        return "pytorch_libtorch" if self.record.runtime == "torchscript" else "onnxruntime_onnx"


@dataclass(frozen=True)
class _ModelView:
    record: ModelRecord
    config: ModelConfig
    versions: dict[int, VersionRecord]
    default_version: int | None
    read_at: float
    # ServedVersion per version, built once per view: resolve runs several times a request
    served: dict[int, ServedVersion] = field(default_factory=dict)


class VersionResolver:
    """Catalog lookups with a short TTL so the warm path does not read DynamoDB per request."""

    def __init__(
        self, catalog: Catalog, ttl_s: float, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._catalog = catalog
        self._ttl_s = ttl_s
        self._clock = clock
        self._views: dict[str, _ModelView] = {}
        self._refresh: Callable[[Callable[[], None]], Any] | None = None
        self._refreshing: set[str] = set()
        self._lock = threading.Lock()

    def refresh_in_background(self, submit: Callable[[Callable[[], None]], Any]) -> None:
        """Serve a stale view at once and re-read it with ``submit`` (long-running servers).

        Every TTL, one request would otherwise wait for the catalog read, and with it every
        request batched behind it (p99). Not for Lambda: a frozen sandbox stops the thread.
        """
        self._refresh = submit

    def resolve(self, model: str, version: int | None = None) -> ServedVersion:
        """The READY version asked for (or the default), else ModelNotFound/ModelNotReady."""
        view = self._view(model)
        number = version if version is not None else view.default_version
        if number is None:
            reasons = "; ".join(f"{v}: {r.reason}" for v, r in sorted(view.versions.items()))
            raise ModelNotReady(f"model {model!r} has no READY version ({reasons or 'none'})")
        record = view.versions.get(number)
        if record is None or not record.present:
            raise ModelNotFound(f"model {model!r} has no version {number}")
        if record.state != policy.READY:
            raise ModelNotReady(f"version {number} of {model!r} is {record.state}: {record.reason}")
        served = view.served.get(number)
        if served is None:
            served = view.served[number] = ServedVersion(
                model,
                number,
                view.config,
                record,
                Signature.from_json(record.signature),
                view.record.class_labels,
            )
        return served

    def number(self, model: str, text: str | None) -> int | None:
        """The integer version a URL segment names: a number, or a version label."""
        if text is None:
            return None
        ref = parse_version_ref(text)
        if isinstance(ref, int):
            return ref
        labels = self._view(model).record.version_labels
        if ref not in labels:
            raise ModelNotFound(
                f"model {model!r} has no version label {ref!r}"
                + (f" (labels: {', '.join(sorted(labels))})" if labels else "")
                + f"; set one with PUT /models/{model}/labels/{ref} on the management API"
            )
        return labels[ref]

    @property
    def catalog(self) -> Catalog:
        return self._catalog

    def forget(self, model: str) -> None:
        """Drop the cached view of ``model``: the next request reads the catalog."""
        with self._lock:
            self._views.pop(model, None)

    def versions(self, model: str) -> dict[int, VersionRecord]:
        return self._view(model).versions

    def config(self, model: str) -> ModelConfig:
        return self._view(model).config

    def is_fresh(self, model: str) -> bool:
        """True when resolving ``model`` now needs no catalog read."""
        view = self._views.get(model)
        if view is None:
            return False
        return self._refresh is not None or self._clock() - view.read_at < self._ttl_s

    def _view(self, model: str) -> _ModelView:
        view = self._views.get(model)
        if view is not None and self._clock() - view.read_at < self._ttl_s:
            return view
        if view is not None and self._refresh is not None:
            self._refresh_later(model)
            return view
        return self._read(model)

    def _refresh_later(self, model: str) -> None:
        with self._lock:
            if model in self._refreshing or self._refresh is None:
                return
            self._refreshing.add(model)

        def refresh() -> None:
            try:
                self._read(model)
            except ModelNotFound:
                self._views.pop(model, None)  # gone: the next request hears it at once
            except Exception:
                logger.warning("catalog refresh of %s failed; serving the last view", model)
            finally:
                with self._lock:
                    self._refreshing.discard(model)

        self._refresh(refresh)

    def _read(self, model: str) -> _ModelView:
        record = self._catalog.get_model(model)
        if record is None:
            # Triton's words first: clients match on them
            raise ModelNotFound(
                f"Request for unknown model: '{model}' is not found; publish it under "
                f"models/{model}/ in the model bucket"
            )
        versions = {v.version: v for v in self._catalog.versions(model)}
        ready = [v.version for v in versions.values() if v.state == policy.READY]
        view = _ModelView(
            record=record,
            config=effective_config(record, model).config,
            versions=versions,
            default_version=policy.default_version(record.default_version, ready),
            read_at=self._clock(),
        )
        self._views[model] = view
        return view


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
    ) -> None:
        self.resolver = resolver
        self.stats = stats
        self._default_max_batch_size = default_max_batch_size
        self._cache = cache
        self._options = options
        self._max_loaded = max(1, max_loaded)
        self._loaded: OrderedDict[tuple[str, int, str], LoadedModel] = OrderedDict()
        self._lock = threading.Lock()
        self._loading: dict[tuple[str, int, str], threading.Lock] = {}

    def infer(
        self,
        model: str,
        version: int | None,
        request: InferRequest,
        encode: Callable[[ServedVersion, dict[str, np.ndarray[Any, Any]]], T],
    ) -> T:
        """Run one request; ``encode`` shapes the outputs (timed as compute_output)."""
        served = self.resolver.resolve(model, version)
        loaded = self.load(served)  # a cold load is not inference time, as in Triton's stats
        started = time.perf_counter_ns()
        try:
            inputs = bind_inputs(request, served.signature)
            names = select_outputs(request, served.signature)
            bound = time.perf_counter_ns()
            outputs = classify(request, served, loaded.run(inputs, names))
            ran = time.perf_counter_ns()
            encoded = encode(served, outputs)
        except LambdaServeError as exc:
            self.stats.record_failure(model, served.version, time.perf_counter_ns() - started, exc)
            raise
        done = time.perf_counter_ns()
        self.stats.record_success(
            model,
            served.version,
            Execution(1, _batch_size(inputs, served), 0, bound - started, ran - bound, done - ran),
        )
        return encoded

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
    ) -> list[BatchResult]:
        """Requests for one model version: each validated, run in batches, split back."""
        try:
            served = self.resolver.resolve(model, version)
            loaded = self.load(served)
        except LambdaServeError as exc:
            return [BatchResult(error=exc) for _ in requests]
        results: list[BatchResult | None] = [None] * len(requests)
        valid = []
        for index, request in enumerate(requests):
            try:
                bind_inputs(request, served.signature)
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
        for batch in assemble([requests[i] for i in valid], limit, preferred):
            members = [valid[j] for j in batch.members]
            waited = max((queued_ns or [0] * len(requests))[i] for i in members)
            outcomes = run_batch(
                self.stats,
                served,
                loaded,
                [requests[i] for i in members],
                batch=batch,
                queued_ns=waited,
            )
            for index, outcome in zip(members, outcomes, strict=True):
                results[index] = outcome
        done = [r for r in results if r is not None]
        check_invariant(len(requests), done)
        return done

    def is_loaded(self, model: str, version: int | None) -> bool:
        """True when serving this request needs no catalog read, download or load."""
        if not self.resolver.is_fresh(model):
            return False
        try:
            served = self.resolver.resolve(model, version)
        except LambdaServeError:
            return True  # the answer (an error) is already known without I/O
        return (served.model, served.version, served.record.fingerprint) in self._loaded

    def loaded_versions(self) -> list[tuple[str, int]]:
        with self._lock:
            return [(model, version) for model, version, _ in self._loaded]

    def adopt_loaded(self, other: ModelServer) -> None:
        """Serve ``other``'s loaded models (a SnapStart restore renews clients, not models)."""
        with other._lock:
            taken = list(other._loaded.items())
        with self._lock:
            self._loaded.update(taken)

    def prefetch(self, served: ServedVersion) -> bool:
        """Download ``served``'s files into the local cache; True when it fetched any."""
        before = self._cache.downloads
        self._cache.materialize(version_files(served))
        return self._cache.downloads > before

    def load(self, served: ServedVersion) -> LoadedModel:
        """The loaded model for ``served``: from memory, or cache + runtime + warm-up."""
        key = (served.model, served.version, served.record.fingerprint)
        with self._lock:
            if key in self._loaded:
                self._loaded.move_to_end(key)
                return self._loaded[key]
            loading = self._loading.setdefault(key, threading.Lock())
        with loading:
            with self._lock:
                if key in self._loaded:
                    return self._loaded[key]
            loaded = self._load(served)
            with self._lock:
                self._loaded[key] = loaded
                self._loading.pop(key, None)
                while len(self._loaded) > self._max_loaded:
                    evicted, _ = self._loaded.popitem(last=False)
                    logger.info("unloaded %s version %s (LRU)", evicted[0], evicted[1])
        return loaded

    def _load(self, served: ServedVersion) -> LoadedModel:
        return load_version(served, self._cache, replace(self._options, version=served.version))


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
