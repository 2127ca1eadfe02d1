"""One step of a sequence, wherever it runs: read the sequence's record, check Triton's
rules, run the model with the control and state inputs filled, and write the record back
conditionally (delete it at END). A write that loses a race re-reads the record and runs
the step again on the state the winner left, so no step is applied twice and none is lost.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from lambdaserve.config.sequence_batching import SequenceBatching
from lambdaserve.errors import InvalidInput
from lambdaserve.protocol.v2 import InferRequest
from lambdaserve.serving.response_cache.codec import decode_outputs, encode_outputs
from lambdaserve.serving.sequences.controls import (
    SequenceFlags,
    flags_of,
    initial_states,
    model_request,
)
from lambdaserve.serving.sequences.records import (
    SequenceConflict,
    SequenceKey,
    SequenceRecord,
    SequenceStore,
)

logger = logging.getLogger(__name__)
ATTEMPTS = 3  # a step that keeps losing its race is refused with the conflict
Outputs = dict[str, np.ndarray[Any, Any]]


@dataclass(frozen=True)
class PreparedStep:
    """A step read and checked, ready to run: ``request`` is the model's (controls and
    state filled); ``stored`` is the record the write is conditional on."""

    key: SequenceKey
    flags: SequenceFlags
    stored: SequenceRecord | None
    live: SequenceRecord | None
    now_us: int
    request: InferRequest


class SequenceSteps:
    """Runs steps against ``store``; ``clock_us``: wall-clock microseconds (tests pass
    their own, to expire a sequence without waiting)."""

    def __init__(self, store: SequenceStore, clock_us: Callable[[], int] | None = None) -> None:
        self.store = store
        self._clock_us = clock_us or (lambda: time.time_ns() // 1000)

    def run(
        self,
        model: str,
        version: int,
        request: InferRequest,
        execute: Callable[[InferRequest], Outputs],
        *,
        batching: SequenceBatching,
        declared_outputs: frozenset[str],
        batched: bool,
        initial: Mapping[str, str] | None = None,
    ) -> Outputs:
        """The step's outputs as the client sees them: a state output only where the
        config also lists it under ``output`` (or the request names it)."""
        for attempt in range(1, ATTEMPTS + 1):
            step = self.prepare(
                model,
                version,
                request,
                batching=batching,
                batched=batched,
                initial=initial,
                declared_outputs=declared_outputs,
            )
            try:
                outputs = execute(step.request)
                self.finish(step, outputs, batching=batching)
            except SequenceConflict:
                if attempt == ATTEMPTS:
                    raise
                logger.info("sequence %s of %s: lost a race, step again", step.key.text, model)
                continue
            return visible(request, outputs, batching, declared_outputs)
        raise AssertionError("unreachable")

    def prepare(
        self,
        model: str,
        version: int,
        request: InferRequest,
        *,
        batching: SequenceBatching,
        batched: bool,
        initial: Mapping[str, str] | None = None,
        declared_outputs: frozenset[str] = frozenset(),
    ) -> PreparedStep:
        """Read the sequence's record and apply Triton's rules: the model's request.
        ``initial``: the states' data files (base64), where the config names them;
        ``declared_outputs``: the config's outputs (a state output the client may ask for)."""
        flags = flags_of(model, request.parameters)
        _check_batch_size(model, request, batched)
        _check_requested_outputs(model, request, batching, declared_outputs)
        key = SequenceKey(model, version, flags.sequence_id)
        now = self._clock_us()
        stored = self.store.read(key)
        live = (
            stored
            if stored is not None
            and not stored.ended
            and now - stored.last_seen_us <= batching.max_sequence_idle_us
            else None
        )
        if live is None and not flags.start:
            raise InvalidInput(
                f"inference request for sequence {key.sequence_id} to model '{key.model}' "
                "must specify the START flag on the first request of the sequence"
            )
        if live is not None and flags.start:
            logger.warning(
                "sequence %s for model '%s' has a conflict. The previous sequence did not end "
                "before this sequence start. Previous sequence will be terminated early.",
                *(key.sequence_id, key.model),
            )
        states: Mapping[str, np.ndarray[Any, Any]]
        if flags.start or live is None:
            states = initial_states(batching, batched, initial)
        else:
            states = decode_outputs(live.state) if live.state else {}
        step = model_request(request, batching, flags, states, batched)
        return PreparedStep(key, flags, stored, live, now, step)

    def finish(self, step: PreparedStep, outputs: Outputs, *, batching: SequenceBatching) -> None:
        """Write the record the step leaves (delete it at END), conditional on the one it
        read; SequenceConflict when that one moved on meanwhile."""
        if step.flags.end:
            self.store.delete(step.key, step.stored)
            return
        kept = {s.input_name: outputs[s.output_name] for s in batching.states}
        started = step.flags.start or step.live is None
        self.store.write(
            step.key,
            SequenceRecord(
                step=1 if started or step.live is None else step.live.step + 1,
                last_seen_us=step.now_us,
                state=encode_outputs(kept) if kept else b"",
                token=uuid.uuid4().hex,
            ),
            step.stored,
        )


def visible(
    request: InferRequest,
    outputs: Outputs,
    batching: SequenceBatching,
    declared_outputs: frozenset[str],
) -> Outputs:
    """What the client gets: the outputs it named, else all but undeclared state outputs."""
    hidden = {s.output_name for s in batching.states} - declared_outputs
    asked = {o.name for o in request.outputs}
    return {
        name: value
        for name, value in outputs.items()
        if (name in asked if asked else name not in hidden)
    }


def _check_requested_outputs(
    model: str, request: InferRequest, batching: SequenceBatching, declared: frozenset[str]
) -> None:
    """A state output is the client's only where the config lists it under ``output``
    (Triton's qa/L0_implicit_state: test_request_output_not_allowed)."""
    hidden = {s.output_name for s in batching.states} - declared
    for output in request.outputs:
        if output.name in hidden:
            raise InvalidInput(
                f"unexpected inference output '{output.name}' for model '{model}': it is the "
                "model's implicit state; list it under the config's output to return it"
            )


def _check_batch_size(model: str, request: InferRequest, batched: bool) -> None:
    first = request.inputs[0] if request.inputs else None
    if batched and first is not None and first.shape and first.shape[0] > 1:
        raise InvalidInput(
            f"inference request to model '{model}' must specify batch-size 1 due to "
            "requirements of sequence batcher"
        )
