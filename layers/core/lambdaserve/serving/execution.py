"""What surrounds every execution of a model, whichever path runs it (a lone request, a
tensor batch, model code's requests, a sequence's step): the requests' ids (model code's
``request_id()`` and its failure log), their parameters as model code reads them, their
deadline, the trace their model's own calls are children of, the sequence parameters an
ensemble passes on to its steps, and the rate limiter's resource or fleet slot, whose wait
is queue time.

Built in one place so no path applies a subset. Where none of them applies (the hot path:
no ids, no timeout, not traced, no sequence, no limiter) the scope is one constant no-op:
nothing is entered per request.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, ExitStack, contextmanager, nullcontext
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from lambdaserve.protocol.v2 import InferRequest
from lambdaserve.runtimes.code_errors import known_request_ids, request_ids
from lambdaserve.runtimes.request_parameters import request_parameters
from lambdaserve.runtimes.sequence_requests import (
    is_passing_sequence,
    passing_sequence,
    sequence_parameters,
)
from lambdaserve.serving.fleet_slots.gate import FleetSlots
from lambdaserve.tracing.request_trace import following, parent_of
from lambdaserve.workers.deadline import request_deadline

if TYPE_CHECKING:
    from lambdaserve.serving.rate_limiter import RateLimiter
    from lambdaserve.serving.version_resolver import ServedVersion


@dataclass
class Held:
    """How long an execution waited for its instance or slot: queue time, as Triton counts
    a request queued until an instance is allocated, never compute time."""

    waited_ns: int = 0


_NOT_HELD = Held()  # read only: an execution with no limiter waited for nothing
_NO_SCOPE: AbstractContextManager[Held] = nullcontext(_NOT_HELD)
# request parameters that change nothing around an execution (the answer's encoding, the
# queue's order): a request with only these is the hot path's
_PASSIVE_PARAMETERS = frozenset({"binary_data_output", "priority"})


def execution_scope(
    limiter: RateLimiter | FleetSlots | None,
    served: ServedVersion,
    members: Sequence[InferRequest],
    queued_ns: int = 0,
) -> AbstractContextManager[Held]:
    """Around one execution of ``served`` for ``members`` (queued ``queued_ns`` before it:
    a deadline counts from arrival). Entering it returns how long the limiter held it."""
    if (  # the hot path: plain requests (a lone one, or a batch of them)
        limiter is None
        and all(map(_plain, members))
        and not known_request_ids()
        and not following()
        and not is_passing_sequence()
    ):
        return _NO_SCOPE
    around: list[AbstractContextManager[Any]] = []
    ids = [member.id or "" for member in members]
    if any(ids) or known_request_ids():  # set, or a caller's to be replaced (BLS)
        around.append(request_ids(ids))
    if any(member.parameters for member in members):  # model code reads them (Triton's)
        around.append(request_parameters([member.parameters for member in members]))
    deadline = request_deadline(served.config, (m.parameters for m in members), queued_ns / 1e9)
    if not isinstance(deadline, nullcontext):
        around.append(deadline)
    parent = parent_of(members)  # the models it calls are traced as its children
    if not isinstance(parent, nullcontext):
        around.append(parent)
    # one request's sequence parameters reach an ensemble's steps (a batch's members may
    # belong to different sequences: a batch passes none)
    if len(members) == 1 and (sequence_parameters(members[0].parameters) or is_passing_sequence()):
        around.append(passing_sequence(members[0].parameters))
    if limiter is not None:
        around.append(_executing(limiter, served, (m.parameters for m in members)))
    if not around:
        return _NO_SCOPE
    return _entered(around)


def _plain(member: InferRequest) -> bool:
    """No id, and no parameter that changes the scope."""
    given = member.parameters
    return not member.id and (not given or _PASSIVE_PARAMETERS.issuperset(given))


@contextmanager
def _entered(around: list[AbstractContextManager[Any]]) -> Iterator[Held]:
    held = _NOT_HELD
    with ExitStack() as stack:
        for manager in around:
            value = stack.enter_context(manager)
            if isinstance(value, Held):
                held = value
        yield held


@contextmanager
def _executing(
    limiter: RateLimiter | FleetSlots,
    served: ServedVersion,
    parameters: Iterable[Mapping[str, Any]],
) -> Iterator[Held]:
    """One execution under the rate limiter (``serve``), or holding one of the version's
    slots fleet-wide (the Lambda path)."""
    held = Held()
    began = time.perf_counter_ns()
    if isinstance(limiter, FleetSlots):
        execution = limiter.execution(served.model, served.version, served.config, parameters)
    else:
        execution = limiter.execution((served.model, served.version, served.record.fingerprint))
    with execution:
        held.waited_ns = time.perf_counter_ns() - began
        yield held
