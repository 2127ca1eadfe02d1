"""Every response to one request, as the model sends them: a decoupled model's many
(gRPC ModelStreamInfer, ``generate_stream``, BLS ``exec(decoupled=True)``), any other
model's one. Decoupled requests never batch: each has its own response sender."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import numpy as np

from lambdaserve.errors import LambdaServeError
from lambdaserve.metrics.stats import Execution
from lambdaserve.protocol.v2 import InferRequest
from lambdaserve.serving.binding import bind_inputs, check_batch_size, select_outputs
from lambdaserve.serving.model_server import ModelServer
from lambdaserve.serving.response_cache.lookups import Lookup
from lambdaserve.serving.version_resolver import ServedVersion

Outputs = dict[str, np.ndarray[Any, Any]]


def is_decoupled(server: ModelServer, model: str, version: int | None) -> bool:
    return server.resolver.resolve(model, version).config.decoupled


def stream(
    server: ModelServer, model: str, version: int | None, request: InferRequest
) -> tuple[ServedVersion, Iterator[Outputs]]:
    """The version that answers, and its responses (bad input raises before the first)."""
    served = server.resolver.resolve(model, version)
    if not served.config.decoupled:
        outputs = server.infer(model, version, request, lambda _, produced: produced)
        return served, iter([outputs])
    cache = server.response_cache
    lookup = cache.lookup(served, request, server.stats) if cache is not None else None
    if lookup is not None and lookup.responses is not None:
        return served, iter(lookup.responses)  # the whole sequence, as the model sent it
    loaded = server.load(served)
    inputs = bind_inputs(request, served.signature)
    check_batch_size(inputs, model, served.config.max_batch_size)
    names = select_outputs(request, served.signature)
    responses = _counted(server, served, loaded.stream(inputs, names))  # type: ignore[attr-defined]
    if cache is not None and lookup is not None:
        responses = _remembered(server, served, lookup, responses)
    return served, responses


def _remembered(
    server: ModelServer, served: ServedVersion, lookup: Lookup, responses: Iterator[Outputs]
) -> Iterator[Outputs]:
    """The responses as they come; the sequence is cached once the model has sent them all
    (a failure or a client gone mid-stream stores nothing)."""
    sent = []
    for outputs in responses:
        sent.append(outputs)
        yield outputs
    if server.response_cache is not None:
        server.response_cache.store_sequence(served, lookup, sent, server.stats)


def _counted(
    server: ModelServer, served: ServedVersion, responses: Iterator[Any]
) -> Iterator[Outputs]:
    started = time.perf_counter_ns()
    try:
        yield from responses
    except LambdaServeError as exc:
        elapsed = time.perf_counter_ns() - started
        server.stats.record_failure(served.model, served.version, elapsed, exc)
        raise
    elapsed = time.perf_counter_ns() - started
    server.stats.record_success(served.model, served.version, Execution(1, 1, 0, 0, elapsed, 0))
