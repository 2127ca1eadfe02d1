"""The sequence each request of a call belongs to, for model code that asks (a Python
model's ``request.correlation_id()`` and ``request.flags()``): set around the call by the
serving side (``serving.sequences``), carried to worker processes with the call. And the
sequence parameters of the request an ensemble runs (``passed_sequence``), which it passes
on to each composing model's request, as Triton's ensemble scheduler does."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

# Triton's request flags (TRITONSERVER_REQUEST_FLAG_SEQUENCE_START / _END)
SEQUENCE_START = 1
SEQUENCE_END = 2
# (correlation id, flags) per request of the call; none outside a sequence
SequenceOf = tuple[int | str, int]
_SEQUENCES: ContextVar[tuple[SequenceOf, ...]] = ContextVar("sequence_requests", default=())
# KServe v2's sequence parameters, as a request carries them
SEQUENCE_PARAMETERS = ("sequence_id", "sequence_start", "sequence_end")
_PASSED: ContextVar[tuple[tuple[str, Any], ...]] = ContextVar("passed_sequence", default=())


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


def call_sequences() -> tuple[SequenceOf, ...]:
    """The (correlation id, flags) of each request of the call being run; () outside one."""
    return _SEQUENCES.get()


def sequence_parameters(parameters: Mapping[str, Any]) -> dict[str, Any]:
    """A request's sequence parameters (none where it is no sequence's step)."""
    return {k: parameters[k] for k in SEQUENCE_PARAMETERS if k in parameters}


@contextmanager
def passing_sequence(parameters: Mapping[str, Any]) -> Iterator[None]:
    """The request about to run (an ensemble's) carries these parameters: its steps'
    requests carry its sequence parameters too."""
    token = _PASSED.set(tuple(sequence_parameters(parameters).items()))
    try:
        yield
    finally:
        _PASSED.reset(token)


def is_passing_sequence() -> bool:
    """Whether the request being run passes a sequence's parameters to its steps."""
    return bool(_PASSED.get())


def passed_sequence() -> dict[str, Any]:
    """The sequence parameters of the request being run; {} where it carries none."""
    return dict(_PASSED.get())
