"""A request's own deadline in its model's worker: Triton's ``timeout`` request parameter
(microseconds; ``tritonclient``'s ``infer(timeout=)``, over HTTP and gRPC alike).

Triton applies that parameter only where the model's ``dynamic_batching``
``default_queue_policy`` has ``allow_timeout_override: true``, and only while the request
waits in the queue (it cannot stop a running execution). lambdaserve's queue does the same
(``config.dynamic_batching``). Model code in a worker can be stopped, so there the same
parameter, under the same condition, also bounds the run: a call still running once every
request in it is past its own timeout (counted from when the oldest reached the queue) is
answered with Triton's "Request timeout expired", and its worker killed and restarted as a
``responseTimeout`` does. The serving side sets the deadline around the call (a context
variable: the call runs in the thread that set it); the worker pool reads it.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterable, Iterator, Mapping
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

from lambdaserve.config.model_config import ModelConfig
from lambdaserve.errors import QueueRejected
from lambdaserve.runtimes.request_parameters import timeout_us


@dataclass(frozen=True)
class Deadline:
    at: float  # time.monotonic() by which the call must have answered
    timeout_us: int  # the longest of the requests' own timeouts, for the message


class RequestTimeoutExpired(QueueRejected):
    """The request's own ``timeout`` ran out while its model's code ran in a worker: the
    same answer (503 / UNAVAILABLE, a REJECTED failure) as a request that waited
    past it in the queue."""


_DEADLINE: ContextVar[Deadline | None] = ContextVar("lambdaserve_request_deadline", default=None)
_NONE: contextlib.AbstractContextManager[None] = contextlib.nullcontext()


def request_deadline(
    config: ModelConfig, parameters: Iterable[Mapping[str, Any]], waited_s: float = 0.0
) -> contextlib.AbstractContextManager[None]:
    """Hold the worker call made inside to the requests' own timeouts, where the model's
    queue policy lets a request set one; a no-op otherwise (the hot path's common case)."""
    batching = config.dynamic_batching
    if batching is None or not batching.queue_policy.allow_timeout_override:
        return _NONE
    longest = 0
    for given in parameters:
        timeout = timeout_us(given)
        if not timeout:
            return _NONE  # a request without a timeout of its own: the call is not cut short
        longest = max(longest, timeout)
    if not longest:
        return _NONE
    return _held(Deadline(time.monotonic() - waited_s + longest / 1e6, longest))


@contextlib.contextmanager
def _held(deadline: Deadline) -> Iterator[None]:
    token = _DEADLINE.set(deadline)
    try:
        yield
    finally:
        _DEADLINE.reset(token)


def current_deadline() -> Deadline | None:
    return _DEADLINE.get()


def expired(model: str, deadline: Deadline, ran: bool) -> RequestTimeoutExpired:
    where = (
        "its code was still running in its worker, which was killed and is restarted"
        if ran
        else "it ran out before its code could run"
    )
    return RequestTimeoutExpired(
        f"Request timeout expired: the request's timeout of {deadline.timeout_us} "
        f"microseconds (its timeout parameter) passed for model '{model}': {where}"
    )
