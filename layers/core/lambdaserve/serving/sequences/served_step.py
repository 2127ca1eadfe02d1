"""A step of a sequence as the model server runs it: one execution of one row, timed and
counted in the version's statistics as Triton counts a sequence's executions."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np

from lambdaserve.errors import LambdaServeError
from lambdaserve.metrics.stats import Execution, StatsRegistry
from lambdaserve.protocol.v2 import InferRequest
from lambdaserve.runtimes.base import LoadedModel
from lambdaserve.runtimes.sequence_requests import in_sequences
from lambdaserve.serving.binding import bind_inputs, select_outputs
from lambdaserve.serving.execution import execution_scope
from lambdaserve.serving.fleet_slots.gate import FleetSlots
from lambdaserve.serving.sequences.controls import request_flags, with_sequence_tensors
from lambdaserve.serving.sequences.steps import SequenceSteps
from lambdaserve.serving.version_resolver import ServedVersion
from lambdaserve.tracing.request_trace import computed

if TYPE_CHECKING:
    from lambdaserve.serving.rate_limiter import RateLimiter

T = TypeVar("T")


def served_step(
    steps: SequenceSteps,
    stats: StatsRegistry,
    served: ServedVersion,
    loaded: LoadedModel,
    request: InferRequest,
    *,
    encode: Callable[[ServedVersion, dict[str, np.ndarray[Any, Any]]], T],
    limiter: RateLimiter | FleetSlots | None = None,
) -> T:
    """``request`` as one step of its sequence, its outputs shaped by ``encode``; its
    execution in the scope every execution has (``serving.execution``)."""
    config = served.config
    assert config.sequence_batching is not None
    batched = config.max_batch_size > 0
    signature = with_sequence_tensors(served.signature, config.sequence_batching, batched)
    started = time.perf_counter_ns()
    bound = ran = started
    waited = 0

    def execute(step: InferRequest) -> dict[str, np.ndarray[Any, Any]]:
        nonlocal bound, ran, waited
        inputs, names = bind_inputs(step, signature), select_outputs(step, signature)
        bound = time.perf_counter_ns()
        with (
            execution_scope(limiter, served, (request,)) as held,  # the traced request
            in_sequences([request_flags(served.model, step.parameters)]),
        ):
            outputs = loaded.run(inputs, names)
        ran = time.perf_counter_ns()
        waited = held.waited_ns
        return dict(outputs)

    try:
        outputs = steps.run(
            served.model,
            served.version,
            request,
            execute,
            batching=config.sequence_batching,
            declared_outputs=frozenset(t.name for t in config.outputs),
            batched=batched,
            initial=served.initial_states,
        )
        encoded = encode(served, outputs)
    except LambdaServeError as exc:
        stats.record_failure(served.model, served.version, time.perf_counter_ns() - started, exc)
        raise
    done = time.perf_counter_ns()
    computed((request,), (started, bound, ran, done))
    # compute_input: the record read and the inputs bound; compute_output: the record
    # written and the outputs encoded (a step that lost a race counts its retries' time)
    stats.record_success(
        served.model,
        served.version,
        Execution(1, 1, waited, bound - started, ran - bound - waited, done - ran),
    )
    return encoded
