"""The dynamic batcher wired to a ``ModelServer``: each lane's policy read from its
version's config, batches run by the server, refusals counted in its statistics; and its
twin for TorchServe handlers' raw requests, batched as the archive's model-config.yaml asks.

Used by the long-running servers, ``lambdaserve serve`` and ``lambdaserve dev``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from lambdaserve.batching.assembly import BatchResult
from lambdaserve.batching.dynamic_batcher import DynamicBatcher, TensorBatcher
from lambdaserve.batching.plan import BatchPolicy
from lambdaserve.errors import LambdaServeError
from lambdaserve.protocol.v2 import InferRequest
from lambdaserve.runtimes.model_calls import running
from lambdaserve.runtimes.torchserve.context import Answer
from lambdaserve.serving.batch_runs import batch_limit
from lambdaserve.serving.model_server import ModelServer
from lambdaserve.serving.raw_predictions import RawRequest, handler_batching, predict_raw_many

RawBatcher = DynamicBatcher[RawRequest, "Answer | LambdaServeError"]


def server_batcher(server: Callable[[], ModelServer], default_max_batch_size: int) -> TensorBatcher:
    """A batcher for ``server`` (looked up per call: tests and ``dev`` swap it)."""

    def execute(
        model: str, version: int | None, requests: list[InferRequest], queued_ns: list[int]
    ) -> list[BatchResult]:
        # the data plane asked the response cache before these queued (and stores them)
        with running(model):
            return server().infer_many(model, version, requests, queued_ns, cached=False)

    def policy(model: str, version: int | None) -> BatchPolicy:
        current = server()
        served = current.resolver.resolve(model, version)
        limit = batch_limit(served, default_max_batch_size)
        batching = served.config.dynamic_batching
        parallel = max(1, current.residency.executions_at_once(served))
        if batching is None:
            return BatchPolicy(max_batch_size=limit, parallel=parallel)
        return BatchPolicy(
            max_batch_size=limit,
            max_queue_delay_s=batching.max_queue_delay_microseconds / 1e6,
            preferred_sizes=batching.preferred_batch_size,
            queue=batching.queue_policy,
            parallel=parallel,
            batching=batching,
        )

    def execute_one(model: str, version: int | None, request: InferRequest) -> BatchResult:
        try:
            with running(model):
                return server().infer(
                    model,
                    version,
                    request,
                    lambda s, o: BatchResult(outputs=o, version=s.version, served=s),
                    cached=False,
                )
        except LambdaServeError as exc:
            return BatchResult(error=exc)

    def rejected(model: str, version: int | None, error: LambdaServeError) -> None:
        served = server().resolver.resolve(model, version)
        server().stats.record_failure(model, served.version, 0, error)

    return DynamicBatcher(
        execute,
        policy,
        asyncio.to_thread,
        execute_one=execute_one,
        ready=lambda model, version: server().answers_inline(model, version),
        rejected=rejected,
    )


def handler_batcher(server: Callable[[], ModelServer]) -> RawBatcher:
    """Raw requests (``curl -T``, multipart) for a handler whose archive sets ``batchSize``:
    up to that many per call, waiting up to ``maxBatchDelay`` for them, as TorchServe's
    frontend batches."""

    def execute(
        model: str, version: int | None, requests: list[RawRequest], queued_ns: list[int]
    ) -> list[Answer | LambdaServeError]:
        return predict_raw_many(server(), model, version, requests, queued_ns)

    def policy(model: str, version: int | None) -> BatchPolicy:
        current = server()
        served = current.resolver.resolve(model, version)
        batching = handler_batching(current, served)  # loads the version
        return BatchPolicy(
            max_batch_size=max(1, batching.batch_size),
            max_queue_delay_s=batching.max_delay_s,
            parallel=max(1, current.residency.code_workers(served)),
        )

    return DynamicBatcher(
        execute,
        policy,
        asyncio.to_thread,
        ready=lambda model, version: server().answers_inline(model, version),
        rows=lambda request: 1,
    )
