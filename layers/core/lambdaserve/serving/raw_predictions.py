"""TorchServe-style predictions with real payloads: a raw body (``curl -T kitten.jpg``,
``--data-binary``) or multipart fields (``-F data=@kitten.jpg``).

Handlers get TorchServe's ``data`` rows; a model whose one input is BYTES (a Python model,
an ensemble that starts with one) gets one element per field. Tensor models take JSON, as
before: raw bytes cannot name their tensors.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from lambdaserve.config.runtime_names import HANDLER_RUNTIME
from lambdaserve.errors import InferenceError, InvalidInput, LambdaServeError
from lambdaserve.metrics.stats import Execution
from lambdaserve.protocol.torchserve import encode_prediction
from lambdaserve.protocol.v2 import InferInput, InferRequest
from lambdaserve.runtimes.torchserve.context import SEQUENCE_END_HEADER, SEQUENCE_ID_HEADER, Answer
from lambdaserve.runtimes.torchserve.handler import HandlerModel
from lambdaserve.runtimes.torchserve.manifest import FrontendBatching
from lambdaserve.serving.model_server import ModelServer
from lambdaserve.serving.version_resolver import ServedVersion
from lambdaserve.workers.worker_model import WorkerModel


@dataclass(frozen=True)
class RawRequest:
    """One request's fields in order: ``("body", raw)`` for a raw body, else one per
    multipart field; values are bytes, or parsed JSON for a JSON body."""

    fields: tuple[tuple[str, Any], ...]
    headers: Mapping[str, str]


def takes_raw(served: ServedVersion) -> bool:
    """Whether non-JSON payloads can reach this version (a handler, or one BYTES input)."""
    inputs = served.signature.inputs
    return served.record.runtime == HANDLER_RUNTIME or (
        len(inputs) == 1 and inputs[0].datatype == "BYTES"
    )


def predict_raw(
    server: ModelServer, model: str, version: int | None, request: RawRequest
) -> Answer:
    """One raw request through a handler, or as BYTES elements through any model."""
    served = server.resolver.resolve(model, version)
    if served.record.runtime == HANDLER_RUNTIME:
        [answer] = _handle(server, served, [request])
        return answer
    if not takes_raw(served):
        raise InvalidInput(
            f"model {model!r} takes tensors {[s.name for s in served.signature.inputs]}: send "
            "JSON (a nested list, or an object keyed by input name); raw bytes and multipart "
            "reach TorchServe handlers and models with one BYTES input"
        )
    spec = served.signature.inputs[0]
    values = [v if isinstance(v, bytes | bytearray) else str(v).encode() for _, v in request.fields]
    elements = np.array([bytes(v) for v in values], dtype=object)
    shape = _shape_for(spec.shape, len(elements), spec.name)
    tensor = InferInput(spec.name, "BYTES", shape, elements.reshape(shape))
    single = len(shape) == 2
    return server.infer(
        model,
        served.version,
        InferRequest(inputs=(tensor,)),
        lambda _, outputs: Answer(encode_prediction(outputs, single), "application/json"),
    )


def explain_raw(
    server: ModelServer, model: str, version: int | None, request: RawRequest
) -> Answer:
    """TorchServe's explanations: the request reaches the handler with its ``explain``
    header set, and the handler's ``explain_handle`` answers."""
    served = server.resolver.resolve(model, version)
    if served.record.runtime != HANDLER_RUNTIME:
        raise InvalidInput(
            f"model {model!r} is a {served.record.runtime} model: explanations reach "
            "TorchServe handlers (their explain_handle); ask /predictions for an answer"
        )
    try:
        [answer] = _handle(server, served, [request])
        return answer
    except InferenceError as exc:
        cause = exc.__cause__
        if isinstance(cause, ModuleNotFoundError) and cause.name == "captum":
            raise InvalidInput(
                "this handler explains with Captum, which is not installed where it serves: "
                "install captum beside lambdaserve[torchserve]"
            ) from None
        if isinstance(cause, AttributeError) and "get_insights" in str(cause):
            raise InvalidInput(
                f"the handler of {model!r} does not explain: define get_insights(tensor, "
                "data, target) (BaseHandler's explain_handle calls it), or explain_handle"
            ) from None
        raise


def handler_batching(server: ModelServer, served: ServedVersion) -> FrontendBatching:
    """How this version's archive asks TorchServe's frontend to batch (batchSize 0: alone);
    loads the version (a thread's work when it is not loaded)."""
    if served.record.runtime != HANDLER_RUNTIME:
        return FrontendBatching()
    loaded = server.load(served)
    batching = getattr(loaded, "batching", None)  # a handler, here or in its workers
    return batching if isinstance(batching, FrontendBatching) else FrontendBatching()


def handler_sequence(
    server: ModelServer, served: ServedVersion, headers: Mapping[str, str]
) -> str | None:
    """The ``ts_request_sequence_id`` a request to a ``sequenceBatching`` handler runs under:
    the client's, or a fresh ``ts-seq-<uuid>`` (TorchServe's frontend mints one for a first
    request that has none); None for other versions. ``headers``: lower-case names."""
    if not handler_batching(server, served).sequences:
        return None
    return headers.get(SEQUENCE_ID_HEADER) or f"ts-seq-{uuid.uuid4()}"


def handler_step(
    served: ServedVersion, raw: RawRequest, asks: FrontendBatching
) -> tuple[str, int, str, FrontendBatching, bool] | None:
    """A sequenceBatching handler's request as its sequence's step: (model, version,
    ts_request_sequence_id, the archive's limits, whether its ts_request_sequence_end closes
    the sequence); None for other requests."""
    sequence_id = raw.headers.get(SEQUENCE_ID_HEADER)
    if not asks.sequences or not sequence_id:
        return None
    end = raw.headers.get(SEQUENCE_END_HEADER)
    ends = end is not None and end.strip().lower() not in ("", "false", "0")
    return served.model, served.version, sequence_id, asks, ends


def predict_raw_many(
    server: ModelServer,
    model: str,
    version: int | None,
    requests: Sequence[RawRequest],
    queued_ns: Sequence[int] | None = None,
) -> list[Answer | LambdaServeError]:
    """N raw requests for one handler version in one call (TorchServe's batch): N answers,
    or the error each request gets (a handler that raises fails its whole batch, as in
    TorchServe)."""
    try:
        served = server.resolver.resolve(model, version)
        # as tensor batches count it: the longest wait
        return list(_handle(server, served, requests, max(queued_ns or [0])))
    except LambdaServeError as exc:
        return [exc for _ in requests]


def _handle(
    server: ModelServer, served: ServedVersion, requests: Sequence[RawRequest], queued_ns: int = 0
) -> list[Answer]:
    """The handler's one call for ``requests``, counted in the version's statistics."""
    loaded = server.load(served)
    if not isinstance(loaded, HandlerModel | WorkerModel):
        raise InvalidInput(f"version {served.version} of {served.model!r} is not a handler")
    started = time.perf_counter_ns()
    try:
        answers = loaded.handle_rows(
            [dict(r.fields) for r in requests], [r.headers for r in requests]
        )
    except LambdaServeError as exc:
        ran = time.perf_counter_ns() - started
        for _ in requests:
            server.stats.record_failure(served.model, served.version, ran, exc)
        raise
    ran = time.perf_counter_ns() - started
    size = len(requests)
    server.stats.record_success(
        served.model, served.version, Execution(size, size, queued_ns, 0, ran, 0)
    )
    return answers


def _shape_for(shape: Sequence[int], count: int, name: str) -> tuple[int, ...]:
    """One element per field: ``[n]``, or ``[1, n]`` for one instance of a batched input."""
    if len(shape) == 1 and shape[0] in (-1, count):
        return (count,)
    if len(shape) == 2 and shape[0] == -1 and shape[1] in (-1, count):
        return (1, count)
    raise InvalidInput(
        f"input {name!r} has shape {list(shape)}: {count} field(s) do not fit it; send as "
        "many fields as its dims say, or JSON"
    )
