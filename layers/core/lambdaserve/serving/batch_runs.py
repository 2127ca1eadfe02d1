"""One assembled batch through a loaded model, and its requests' results.

Tensor models take the members merged along the batch dimension in one run. Models whose
contract is several requests per call (Triton's Python backend: ``execute(requests)``)
take them as they came, in one call, each answered (or failed) alone.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from lambdaserve.batching.assembly import Batch, BatchResult, concatenate, split
from lambdaserve.batching.ragged import member_outputs, model_inputs
from lambdaserve.errors import LambdaServeError
from lambdaserve.metrics.stats import Execution, StatsRegistry
from lambdaserve.protocol.v2 import InferRequest
from lambdaserve.runtimes.base import LoadedModel, RequestsModel
from lambdaserve.serving.binding import bind_inputs, select_outputs
from lambdaserve.serving.classification import classify
from lambdaserve.serving.execution import execution_scope
from lambdaserve.serving.fleet_slots.gate import FleetSlots, SlotRefused
from lambdaserve.tracing.request_trace import computed

if TYPE_CHECKING:
    from lambdaserve.serving.rate_limiter import RateLimiter
    from lambdaserve.serving.version_resolver import ServedVersion


def run_batch(
    stats: StatsRegistry,
    served: ServedVersion,
    loaded: LoadedModel,
    members: list[InferRequest],
    *,
    batch: Batch,
    queued_ns: int,
    limiter: RateLimiter | FleetSlots | None = None,
) -> list[BatchResult]:
    """Run ``members`` as one execution; N requests in, N results out. Under the rate
    limiter the execution waits for one of the version's instances and its resources."""
    if isinstance(loaded, RequestsModel):
        return _run_requests(
            stats, served, loaded, members, batch=batch, queued_ns=queued_ns, limiter=limiter
        )
    started = time.perf_counter_ns()
    ragged = served.config.ragged_batching
    try:
        if ragged is None:
            merged = concatenate(members)
            inputs = bind_inputs(merged, served.signature)
        else:  # Triton's ragged batch: inputs joined in 1-D, and the batch inputs
            bound_members = [bind_inputs(m, served.signature) for m in members]
            merged, inputs = members[0], model_inputs(ragged, bound_members)
        names = select_outputs(merged, served.signature)
        bound = time.perf_counter_ns()
        with execution_scope(limiter, served, members, queued_ns) as held:
            outputs = loaded.run(inputs, names)
        ran = time.perf_counter_ns()
        if ragged is not None:
            parts = member_outputs(ragged, outputs, bound_members, batch.sizes)
        else:
            parts = split(outputs, batch.sizes) if len(members) > 1 else [outputs]
        computed(members, (started, bound, ran, time.perf_counter_ns()), parts)
    except LambdaServeError as exc:
        # find the member that fails; the others still succeed (a refused slot: no member
        # failed, each alone would wait again)
        if len(members) > 1 and not isinstance(exc, SlotRefused):
            return [
                run_batch(
                    stats,
                    served,
                    loaded,
                    [m],
                    batch=Batch((0,), (size,)),
                    queued_ns=queued_ns,
                    limiter=limiter,
                )[0]
                for m, size in zip(members, batch.sizes, strict=True)
            ]
        stats.record_failure(served.model, served.version, time.perf_counter_ns() - started, exc)
        return [BatchResult(error=exc)] * len(members)
    stats.record_success(
        served.model,
        served.version,
        Execution(
            len(members),
            batch.size,
            queued_ns + held.waited_ns,
            bound - started,
            ran - bound - held.waited_ns,
            time.perf_counter_ns() - ran,
        ),
    )
    return [
        _result(_classified(m, served, part), served)
        for m, part in zip(members, parts, strict=True)
    ]


def batch_limit(served: ServedVersion, default: int) -> int:
    """How many rows one execution may take: the config's max_batch_size, or for a model
    whose every input has a dynamic first dimension, ``default`` (Triton's auto-complete)."""
    if served.config.max_batch_size > 0:
        return served.config.max_batch_size
    inputs = served.signature.inputs
    if inputs and all(spec.shape[:1] == (-1,) for spec in inputs):
        return default
    return 0


def batch_size(inputs: Mapping[str, np.ndarray[Any, Any]], served: ServedVersion) -> int:
    """The batch dimension's size, for models whose first dimension is the batch."""
    first = next(iter(inputs.values()), None)
    batched = served.config.max_batch_size > 0 or (
        bool(served.signature.inputs) and served.signature.inputs[0].shape[:1] == (-1,)
    )
    if batched and first is not None and first.ndim:
        return int(first.shape[0])
    return 1


def run_one(
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
    rows = [batch_size(inputs, served)]
    return member_outputs(
        ragged, loaded.run(model_inputs(ragged, [inputs]), names), [inputs], rows
    )[0]


def _result(
    answer: dict[str, np.ndarray[Any, Any]] | LambdaServeError, served: ServedVersion
) -> BatchResult:
    if isinstance(answer, LambdaServeError):
        return BatchResult(error=answer)
    return BatchResult(outputs=answer, version=served.version, served=served)


def _classified(
    member: InferRequest, served: ServedVersion, outputs: dict[str, np.ndarray[Any, Any]]
) -> dict[str, np.ndarray[Any, Any]] | LambdaServeError:
    try:
        return classify(member, served, outputs)
    except LambdaServeError as exc:
        return exc


def _run_requests(
    stats: StatsRegistry,
    served: ServedVersion,
    loaded: RequestsModel,
    members: list[InferRequest],
    *,
    batch: Batch,
    queued_ns: int,
    limiter: RateLimiter | FleetSlots | None,
) -> list[BatchResult]:
    started = time.perf_counter_ns()
    calls = []
    for member in members:  # already validated one by one when the batch was assembled
        calls.append(
            (bind_inputs(member, served.signature), select_outputs(member, served.signature))
        )
    bound = time.perf_counter_ns()
    try:
        with execution_scope(limiter, served, members, queued_ns) as held:
            answers = loaded.run_requests(calls)
    except SlotRefused as exc:  # no slot on the Lambda path: every member hears why
        stats.record_failure(served.model, served.version, time.perf_counter_ns() - started, exc)
        return [BatchResult(error=exc)] * len(members)
    ran = time.perf_counter_ns()
    computed(members, (started, bound, ran, time.perf_counter_ns()))
    results = []
    for member, answer in zip(members, answers, strict=True):
        result = _result(
            answer if isinstance(answer, LambdaServeError) else _classified(member, served, answer),
            served,
        )
        if result.error is not None:
            stats.record_failure(served.model, served.version, ran - started, result.error)
        results.append(result)
    answered = [size for r, size in zip(results, batch.sizes, strict=True) if r.error is None]
    if answered:
        stats.record_success(
            served.model,
            served.version,
            Execution(
                len(answered),
                sum(answered),
                queued_ns + held.waited_ns,
                bound - started,
                ran - bound - held.waited_ns,
                0,
            ),
        )
    return results
