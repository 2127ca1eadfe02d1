"""Each request's own parameters as model code reads them: Triton's ``request.parameters()``
(the client's own parameters: Triton's reserved ones are not among them) and
``request.timeout()`` (the request's ``timeout``, microseconds). The execution scope sets
them around a call, as it sets the requests' ids; a worker process gets them with the call.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from lambdaserve.runtimes.sequence_requests import SEQUENCE_PARAMETERS

# the v2 protocol's reserved parameters (its "parameters" extension): the server's own to
# read, never passed to model code as the client's
RESERVED = frozenset(
    {
        *SEQUENCE_PARAMETERS,
        "priority",
        "timeout",
        "headers",
        "binary_data_output",
        "binary_data",
        "binary_data_size",
        "classification",
        "shared_memory_region",
        "shared_memory_offset",
        "shared_memory_byte_size",
    }
)
_PARAMETERS: ContextVar[tuple[Mapping[str, Any], ...]] = ContextVar(
    "model_code_request_parameters", default=()
)


@contextmanager
def request_parameters(each: Sequence[Mapping[str, Any]]) -> Iterator[None]:
    """The parameters of each request the code is about to be called with, in order."""
    token = _PARAMETERS.set(tuple(each))
    try:
        yield
    finally:
        _PARAMETERS.reset(token)


def known_request_parameters() -> tuple[Mapping[str, Any], ...]:
    """As set around this call; empty where no request had any."""
    return _PARAMETERS.get()


def parameters_of(index: int) -> Mapping[str, Any]:
    """The ``index``-th request's parameters ({} where none were set)."""
    known = _PARAMETERS.get()
    return known[index] if index < len(known) else {}


def clients_own(parameters: Mapping[str, Any]) -> dict[str, Any]:
    """The parameters model code is given as the client's: the reserved ones left out."""
    return {k: v for k, v in parameters.items() if k not in RESERVED}


def timeout_us(parameters: Mapping[str, Any]) -> int:
    """The request's own ``timeout`` in microseconds (0: none)."""
    value = parameters.get("timeout")
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        return 0
    return value
