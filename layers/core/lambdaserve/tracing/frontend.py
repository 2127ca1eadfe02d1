"""A door's own timestamps of a traced request, as Triton's HTTP and gRPC frontends add
them: ``HTTP_RECV_START``/``_END`` and ``HTTP_SEND_START``/``_END`` (gRPC:
``GRPC_WAITREAD_START``/``_END``, ``GRPC_SEND_START``/``_END``). The door opens a
``Frontend`` when its tracer may trace anything, the data plane's trace takes the receive
stamps from it, and the trace is written once the door has sent the answer. Triton's
``trace_summary.py`` reads a root trace only when it has its frontend's stamps."""

from __future__ import annotations

import time
from contextvars import ContextVar, Token
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from lambdaserve.tracing.request_trace import RequestTrace

FRONTEND: ContextVar[Frontend | None] = ContextVar("lambdaserve_trace_frontend", default=None)
_NAMES = {
    "HTTP": ("HTTP_RECV_START", "HTTP_RECV_END", "HTTP_SEND_START", "HTTP_SEND_END"),
    "GRPC": ("GRPC_WAITREAD_START", "GRPC_WAITREAD_END", "GRPC_SEND_START", "GRPC_SEND_END"),
}


class Frontend:
    __slots__ = ("names", "received", "started", "trace")

    def __init__(self, kind: str) -> None:
        self.names = _NAMES[kind]
        self.started = time.perf_counter_ns()
        self.received = self.started
        self.trace: RequestTrace | None = None  # set when the data plane traces the request

    def read(self) -> Token[Frontend | None]:
        """The request is read: the data plane's trace (if any) will take the receive stamps
        (the door resets the token once answered)."""
        self.received = time.perf_counter_ns()
        return FRONTEND.set(self)

    def stamp_receive(self, trace: RequestTrace) -> None:
        trace.stamp(self.names[0], self.started)
        trace.stamp(self.names[1], self.received)
        self.trace = trace

    def sent(self, send_start: int) -> RequestTrace | None:
        """The answer is sent: the trace (None when the request was not traced) with the
        send stamps, ready to be written."""
        trace = self.trace
        if trace is not None:
            trace.stamp(self.names[2], send_start)
            trace.stamp(self.names[3])
        return trace
