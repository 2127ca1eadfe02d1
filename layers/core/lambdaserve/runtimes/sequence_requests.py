"""The sequence each request of a call belongs to, for model code that asks (a Python
model's ``request.correlation_id()`` and ``request.flags()``): set around the call by the
serving side (``serving.sequences``), carried to worker processes with the call."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar

# Triton's request flags (TRITONSERVER_REQUEST_FLAG_SEQUENCE_START / _END)
SEQUENCE_START = 1
SEQUENCE_END = 2
# (correlation id, flags) per request of the call; none outside a sequence
SequenceOf = tuple[int | str, int]
_SEQUENCES: ContextVar[tuple[SequenceOf, ...]] = ContextVar("sequence_requests", default=())


@contextmanager
def in_sequences(sequences: Sequence[SequenceOf]) -> Iterator[None]:
    """The requests about to be run are these sequences' steps, in order."""
    token = _SEQUENCES.set(tuple((c, int(f)) for c, f in sequences))
    try:
        yield
    finally:
        _SEQUENCES.reset(token)


def current_sequences(count: int) -> tuple[SequenceOf, ...]:
    """One (correlation id, flags) per request of a call of ``count``: (0, 0) outside one."""
    found = _SEQUENCES.get()
    return found if len(found) == count else ((0, 0),) * count
