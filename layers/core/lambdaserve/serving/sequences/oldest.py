"""Triton's ``oldest`` strategy in a long-running server: the steps of different sequences
that meet in the version's batcher lane run as one execution, their rows merged along the
batch dimension (up to ``max_candidate_sequences`` and ``max_batch_size``, preferring
``preferred_batch_size``). Two steps of one sequence never share an execution: a later
step of a sequence already in the batch runs after it, alone, as does a step whose write
lost a race (it runs again on the state the winner left).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace

from lambdaserve.batching.assembly import BatchResult, assemble
from lambdaserve.errors import InferenceError, LambdaServeError
from lambdaserve.metrics.stats import StatsRegistry
from lambdaserve.protocol.v2 import InferRequest
from lambdaserve.runtimes.base import LoadedModel
from lambdaserve.runtimes.sequence_requests import in_sequences, sequence_parameters
from lambdaserve.serving.batch_runs import run_batch
from lambdaserve.serving.sequences.controls import (
    flags_of,
    request_flags,
    with_sequence_tensors,
)
from lambdaserve.serving.sequences.records import SequenceConflict, SequenceKey
from lambdaserve.serving.sequences.steps import PreparedStep, SequenceSteps, visible
from lambdaserve.serving.version_resolver import ServedVersion


def run_steps(
    steps: SequenceSteps,
    stats: StatsRegistry,
    served: ServedVersion,
    requests: Sequence[InferRequest],
    *,
    load: Callable[[ServedVersion], LoadedModel],
    alone: Callable[[InferRequest], BatchResult],
) -> list[BatchResult]:
    """Steps of sequences: with ``oldest``, different sequences' steps in one execution;
    with ``direct`` (and an ensemble's requests, which pass their sequences on to its
    steps), each alone, in order."""
    sequences = served.config.sequence_batching
    oldest = sequences is not None and sequences.strategy == "oldest"
    if oldest and served.config.max_batch_size > 1 and requests[1:]:
        return run_oldest(steps, stats, served, load(served), requests, alone=alone)
    return [alone(request) for request in requests]


def passes_sequences(served: ServedVersion, requests: Sequence[InferRequest]) -> bool:
    """An ensemble's requests that are steps of sequences: each runs alone, so that each
    passes its own sequence on to the ensemble's steps."""
    return served.config.is_ensemble and any(sequence_parameters(r.parameters) for r in requests)


def run_oldest(
    steps: SequenceSteps,
    stats: StatsRegistry,
    served: ServedVersion,
    loaded: LoadedModel,
    requests: Sequence[InferRequest],
    *,
    alone: Callable[[InferRequest], BatchResult],
) -> list[BatchResult]:
    """N steps in, N results out, in order; ``alone`` runs one step by itself."""
    config = served.config
    batching = config.sequence_batching
    assert batching is not None
    # the model's own tensors and the ones the sequence batcher fills (a Python model's
    # signature lists only its config's)
    served = replace(served, signature=with_sequence_tensors(served.signature, batching, True))
    results: list[BatchResult | None] = [None] * len(requests)
    prepared: dict[int, PreparedStep] = {}
    later: list[int] = []
    seen: set[SequenceKey] = set()
    for index, request in enumerate(requests):
        try:
            key = SequenceKey(
                served.model, served.version, flags_of(served.model, request.parameters).sequence_id
            )
        except LambdaServeError:
            later.append(index)  # its error is given by the step alone, in order
            continue
        if key in seen:
            later.append(index)
            continue
        seen.add(key)
        try:
            prepared[index] = steps.prepare(
                served.model,
                served.version,
                request,
                batching=batching,
                batched=True,
                initial=served.initial_states,
                declared_outputs=frozenset(t.name for t in config.outputs),
            )
        except LambdaServeError as exc:
            stats.record_failure(served.model, served.version, 0, exc)
            results[index] = BatchResult(error=exc)
    order = list(prepared)
    limit = min(config.max_batch_size, batching.max_candidate_sequences or config.max_batch_size)
    model_requests = [prepared[i].request for i in order]
    for batch in assemble(model_requests, limit, batching.preferred_batch_size):
        members = [order[j] for j in batch.members]
        steps_of = [prepared[i].request for i in members]
        with in_sequences([request_flags(served.model, s.parameters) for s in steps_of]):
            outcomes = run_batch(stats, served, loaded, steps_of, batch=batch, queued_ns=0)
        for index, outcome in zip(members, outcomes, strict=True):
            results[index] = _finished(
                steps, prepared[index], requests[index], outcome, served=served, alone=alone
            )
    for index in later:
        results[index] = alone(requests[index])
    return [r if r is not None else BatchResult(error=_lost()) for r in results]


def _finished(
    steps: SequenceSteps,
    step: PreparedStep,
    request: InferRequest,
    outcome: BatchResult,
    *,
    served: ServedVersion,
    alone: Callable[[InferRequest], BatchResult],
) -> BatchResult:
    batching = served.config.sequence_batching
    assert batching is not None
    if outcome.outputs is None:
        return outcome
    try:
        steps.finish(step, outcome.outputs, batching=batching)
    except SequenceConflict:
        return alone(request)
    except LambdaServeError as exc:
        return BatchResult(error=exc)
    declared = frozenset(t.name for t in served.config.outputs)
    return BatchResult(
        outputs=visible(request, outcome.outputs, batching, declared), version=served.version
    )


def _lost() -> LambdaServeError:
    return InferenceError("the step was not run")
