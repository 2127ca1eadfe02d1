"""A response's writes in one loop step leave in one send.

uvicorn writes a response's status line and headers, then its body, each at once: two
``send`` calls and two TCP segments (asyncio sets TCP_NODELAY) for an answer that fits in
one. The request cycle's transport is wrapped so what it writes in one event-loop step is
sent together at the end of that step (``call_soon``); a large body goes out as it comes,
and nothing waits past the step it was written in.
"""

from __future__ import annotations

import asyncio
from typing import Any

# past this, a body is sent as written: joining it to the headers would copy it
_JOIN_BELOW = 64 * 1024


class CoalescedWrites:
    """``transport`` for one request cycle: ``write`` holds data until the loop's next
    turn; ``close`` sends what is held first; everything else is the transport's."""

    __slots__ = ("_held", "_loop", "_transport")

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        self._transport = transport
        self._loop = loop
        self._held: list[bytes] = []

    def write(self, data: bytes) -> None:
        if len(data) >= _JOIN_BELOW:
            self.flush()
            self._transport.write(data)
            return
        if not self._held:
            self._loop.call_soon(self.flush)
        self._held.append(data)

    def flush(self) -> None:
        if not self._held:
            return
        data = self._held[0] if len(self._held) == 1 else b"".join(self._held)
        self._held = []
        # even on a closing transport: asyncio sends what is written before the close
        # takes effect, and drops it (counted) once the connection is gone
        self._transport.write(data)

    def close(self) -> None:
        self.flush()
        self._transport.close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)
