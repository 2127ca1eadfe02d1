"""When the invocation running in this context must have answered: the Lambda door (its
handlers) sets it from Lambda's remaining time, around one invocation; whatever waits on the
fleet's behalf (``serving.fleet_slots``) reads it, so a wait gives up while there is still
time to answer. Kept apart from the fleet slots so a handler's import pays for a context
variable, not for the model config the slots read."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

# epoch seconds; None outside an invocation, where FALLBACK_S bounds a wait and a lease
DEADLINE: ContextVar[float | None] = ContextVar("lambdaserve_invocation_deadline", default=None)
FALLBACK_S = 60.0


@contextmanager
def invocation_deadline(remaining_ms: int | None) -> Iterator[None]:
    """Around one invocation: it must answer within ``remaining_ms`` (Lambda's context;
    None: unknown, FALLBACK_S)."""
    token = DEADLINE.set(None if remaining_ms is None else time.time() + remaining_ms / 1000)
    try:
        yield
    finally:
        DEADLINE.reset(token)
