"""Deadlines for clients that send slowly: headers and bodies must arrive in time.

uvicorn arms no timer while a request's headers trickle in, and an ASGI app waits for a
body as long as the connection stays open, so one client sending a byte a minute would
hold a connection (and its memory) forever. Headers get ``header_timeout_s`` from the
connection (or the previous response); a body gets ``client_timeout_s`` from its first read
and then answers 408.
"""

from __future__ import annotations

import asyncio
from asyncio import TimerHandle
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from lambdaserve.errors import RequestTimeout
from lambdaserve.processes.asgi.coalesced_writes import CoalescedWrites
from lambdaserve.settings import get_settings

# How long an idle kept-alive connection stays open. Longer than the load balancer's idle
# timeout (template.yaml: 60 s), as AWS asks of an ALB's targets: a target that closes first
# races the balancer's next request on that connection, which then fails with a 502 (and a
# client pooling connections for uvicorn's default 5 s races it the same way).
KEEP_ALIVE_S = 75


class BodyTimeout:
    """ASGI middleware: the request body must be complete within ``timeout_s``."""

    def __init__(self, app: ASGIApp, timeout_s: float) -> None:
        self.app = app
        self.timeout_s = timeout_s

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        deadline: float | None = None
        complete = False
        # uvicorn's request cycle, where receive() is its method: once it has read the whole
        # body (most requests: it came with the headers), receive() does not wait
        cycle = getattr(receive, "__self__", None)

        async def timed_receive() -> Message:
            nonlocal deadline, complete
            if complete or getattr(cycle, "more_body", True) is False:
                return await receive()  # the body is here, or only a disconnect is left
            if deadline is None:
                deadline = asyncio.get_running_loop().time() + self.timeout_s
            try:
                async with asyncio.timeout_at(deadline):  # no extra task, unlike wait_for
                    message = await receive()
            except TimeoutError:
                raise RequestTimeout(
                    f"the request body did not arrive within {self.timeout_s:g} s; send the "
                    "whole body at once (LAMBDASERVE_CLIENT_TIMEOUT_S)"
                ) from None
            if message["type"] != "http.request" or not message.get("more_body", False):
                complete = True
            return message

        await self.app(scope, timed_receive, send)


class HeaderTimeoutHttp(HttpToolsProtocol):
    """uvicorn's httptools protocol with a deadline on each request's headers, reading a
    body framed by both Transfer-Encoding: chunked and Content-Length as Triton does, and
    each response's writes sent together (``coalesced_writes``)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.header_timeout_s = get_settings().client_timeout_s
        self._header_timer: TimerHandle | None = None
        # when the headers being read are due (None: none are being read). One timer per
        # connection checks it, re-armed only when it fires early: a request on a kept-alive
        # connection costs no timer of its own.
        self._headers_due: float | None = None
        # A body chunk-encoded by hand and sent with `requests` carries both headers (it adds
        # Content-Length): Triton's qa/L0_http sends one, and Triton answers it. llhttp
        # refuses the pair unless told; the chunked framing then decides (RFC 9112 6.3) and
        # the connection closes after the answer (6.1), so no request can hide behind it.
        self.parser.set_dangerous_leniencies(lenient_chunked_length=True)

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm_header_timer()

    def shutdown(self) -> None:
        """The server's graceful shutdown closes an idle connection at once: a response
        completed in this loop step is sent first."""
        transport = getattr(self.cycle, "transport", None)
        if isinstance(transport, CoalescedWrites):
            transport.flush()
        super().shutdown()

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_header_timer()
        super().connection_lost(exc)

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._arm_header_timer()

    def on_headers_complete(self) -> None:
        self._headers_due = None
        names = dict(self.headers)  # built in C: every request passes here
        framed_twice = b"transfer-encoding" in names and b"content-length" in names
        if framed_twice:  # the app must not read a length the body does not have
            self.headers[:] = [(n, v) for n, v in self.headers if n != b"content-length"]
        super().on_headers_complete()
        if self.cycle is not None:
            # the cycle just made: its status line, headers and body leave in one send
            self.cycle.transport = CoalescedWrites(self.transport, self.loop)  # type: ignore[assignment]
            if framed_twice:
                self.cycle.keep_alive = False

    def _arm_header_timer(self) -> None:
        self._headers_due = self.loop.time() + self.header_timeout_s
        if self._header_timer is None:
            self._header_timer = self.loop.call_at(self._headers_due, self._check_headers)

    def _cancel_header_timer(self) -> None:
        self._headers_due = None
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None

    def _check_headers(self) -> None:
        self._header_timer = None
        due = self._headers_due
        if due is None:
            return  # read in time; the next request's first byte arms the timer again
        if self.loop.time() < due:  # the headers of a later request: wait for those
            self._header_timer = self.loop.call_at(due, self._check_headers)
            return
        self._headers_late()

    def _headers_late(self) -> None:
        if self.transport.is_closing():
            return
        if self.cycle is None or self.cycle.response_complete:
            # Idle or mid-headers: nothing is owed to this client.
            self.transport.close()
