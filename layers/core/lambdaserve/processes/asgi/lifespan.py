"""An ASGI app's lifespan as steps: what starts with the server, what stops with it.

uvicorn drives it: startup runs each start step in order (a failure fails startup with its
reason, and uvicorn exits); shutdown runs each stop step in reverse order, every one of them
even when another fails.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence

from starlette.types import ASGIApp, Receive, Scope, Send

logger = logging.getLogger(__name__)
Step = Callable[[], Awaitable[None]]


class Lifespan:
    def __init__(self, app: ASGIApp, start: Sequence[Step] = (), stop: Sequence[Step] = ()):
        self._app = app
        self._start = list(start)
        self._stop = list(stop)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "lifespan":
            await self._app(scope, receive, send)
            return
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                try:
                    for step in self._start:
                        await step()
                except Exception as exc:
                    await send({"type": "lifespan.startup.failed", "message": str(exc)})
                    return
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                for step in reversed(self._stop):
                    try:
                        await step()
                    except Exception:
                        logger.exception("a shutdown step failed")
                await send({"type": "lifespan.shutdown.complete"})
                return
