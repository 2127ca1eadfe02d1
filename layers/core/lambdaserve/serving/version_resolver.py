"""Which READY version serves a request: the catalog view of a model, read with a short TTL
(re-read in the background by long-running servers), and the served versions it yields."""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from lambdaserve.catalog import version_policy
from lambdaserve.catalog.configs import effective_config
from lambdaserve.catalog.label_weights import label_weights_from
from lambdaserve.catalog.store import Catalog, ModelRecord, VersionRecord
from lambdaserve.config.model_config import ModelConfig
from lambdaserve.config.model_files import OPENVINO_PLATFORMS
from lambdaserve.config.ragged_batching import client_view
from lambdaserve.config.runtime_names import (
    OPENVINO_RUNTIME,
    PADDLE_INFERENCE_RUNTIME,
    PYTHON_RUNTIME,
    TENSORFLOW_RUNTIME,
    TORCHSCRIPT_RUNTIME,
)
from lambdaserve.errors import ModelNotFound, ModelNotReady
from lambdaserve.protocol.names import parse_version_ref
from lambdaserve.protocol.request_headers import header, shadow_drawn
from lambdaserve.tensors.signature import Signature

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class ServedVersion:
    """A READY version with everything needed to load and run it."""

    model: str
    version: int
    config: ModelConfig
    record: VersionRecord
    signature: Signature
    class_labels: Mapping[str, Sequence[str]] = field(default_factory=dict)
    # a sequence model's initial states from their data files (base64, by state input)
    initial_states: Mapping[str, str] = field(default_factory=dict)

    @property
    def platform(self) -> str:
        if self.config.platform:
            return self.config.platform
        if self.record.runtime == OPENVINO_RUNTIME:  # a backend without a platform: its name
            return OPENVINO_PLATFORMS.get(self.record.model_file, "openvino")
        if self.record.runtime == PADDLE_INFERENCE_RUNTIME:
            return "paddle"
        if self.record.runtime == TENSORFLOW_RUNTIME:
            return "tensorflow_savedmodel"
        if self.record.runtime == PYTHON_RUNTIME:  # Triton: no platform, so the backend's name
            return "python"
        return (
            "pytorch_libtorch" if self.record.runtime == TORCHSCRIPT_RUNTIME else "onnxruntime_onnx"
        )


# a refusal from a view older than this is checked against the catalog before it is final
_RECHECK_S = 0.05


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
        # bumped by forget: a read that began before it must not store what it read after
        self._generations: dict[str, int] = {}
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
        """The READY version asked for (or the default), else ModelNotFound/ModelNotReady.

        A refusal read from a cached view is checked against the catalog once more: READY
        means it answers, and a view cached while the version was loading would otherwise
        refuse it for a TTL after the index said READY (the error path pays the read)."""
        view = self._view(model)
        try:
            return self._resolve_in(view, model, version)
        except (ModelNotReady, ModelNotFound):
            if self._clock() - view.read_at < _RECHECK_S:
                raise
        return self._resolve_in(self._read(model), model, version)

    def _resolve_in(self, view: _ModelView, model: str, version: int | None) -> ServedVersion:
        number = version if version is not None else view.default_version
        if number is None:
            reasons = "; ".join(f"{v}: {r.reason}" for v, r in sorted(view.versions.items()))
            raise ModelNotReady(f"model {model!r} has no READY version ({reasons or 'none'})")
        record = view.versions.get(number)
        if record is None or not record.present:
            raise ModelNotFound(f"model {model!r} has no version {number}")
        if record.state != version_policy.READY:
            raise ModelNotReady(f"version {number} of {model!r} is {record.state}: {record.reason}")
        served = view.served.get(number)
        if served is None:
            served = view.served[number] = ServedVersion(
                model,
                number,
                view.config,
                record,
                # the config's optional inputs: a request may leave them out
                client_view(
                    Signature.from_json(record.signature),
                    view.config.ragged_batching,
                    {spec.name: spec for spec in view.config.inputs},
                ).with_optional(view.config.optional_inputs),
                view.record.class_labels,
                view.record.initial_states,
            )
        return served

    def number(self, model: str, text: str | None) -> int | None:
        """The integer version a URL segment names: a number, or a version label."""
        if text is None:
            return None
        ref = parse_version_ref(text)
        if isinstance(ref, int):
            return ref
        record = self._view(model).record
        labels = record.version_labels
        if ref in labels:
            return labels[ref]
        weighted = record.label_weights.get(ref)
        if weighted is not None:  # several versions, each for its share of the requests
            weights = label_weights_from(weighted)
            if weights.shadow is not None and random.random() * 100 < weights.shadow.percent:
                shadow_drawn(model, weights.shadow.version)  # run after the answer
            return weights.pick(header(weights.sticky) if weights.sticky else None)
        named = sorted({*labels, *record.label_weights})
        raise ModelNotFound(
            f"model {model!r} has no version label {ref!r}"
            + (f" (labels: {', '.join(named)})" if named else "")
            + f"; set one with PUT /models/{model}/labels/{ref} on the management API"
        )

    @property
    def catalog(self) -> Catalog:
        return self._catalog

    def forget(self, model: str) -> None:
        """Drop the cached view of ``model``: the next request reads the catalog."""
        with self._lock:
            self._views.pop(model, None)
            self._generations[model] = self._generations.get(model, 0) + 1

    def versions(self, model: str) -> dict[int, VersionRecord]:
        return self._view(model).versions

    def config(self, model: str) -> ModelConfig:
        return self._view(model).config

    def weighed(self, model: str) -> bool:
        """Whether ``model``'s cached view has a weighted label (its versions' requests are
        tallied for a rollout's analysis); never reads the catalog."""
        view = self._views.get(model)
        return view is not None and bool(view.record.label_weights)

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
        generation = self._generations.get(model, 0)
        record = self._catalog.get_model(model)
        if record is None:
            # Triton's words first: clients match on them
            raise ModelNotFound(
                f"Request for unknown model: '{model}' is not found; publish it under "
                f"models/{model}/ in the model bucket"
            )
        versions = {v.version: v for v in self._catalog.versions(model)}
        ready = [v.version for v in versions.values() if v.state == version_policy.READY]
        view = _ModelView(
            record=record,
            config=effective_config(record, model).config,
            versions=versions,
            default_version=version_policy.default_version(record.default_version, ready),
            read_at=self._clock(),
        )
        with self._lock:
            if self._generations.get(model, 0) == generation:  # not forgotten meanwhile
                self._views[model] = view
        return view
