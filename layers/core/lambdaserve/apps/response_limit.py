"""Answers over the synchronous limit become a 413 that says what to do, as the deployed
Lambda path answers them, instead of the invocation failing (``make dev`` enforces it too)."""

from __future__ import annotations

import orjson
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from lambdaserve.protocol.limits import response_too_large


class ResponseLimit:
    """Refuses responses whose declared length is over ``limit`` bytes (0: no limit)."""

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app = app
        self.limit = limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not self.limit:
            await self.app(scope, receive, send)
            return
        refused = False

        async def limited(message: Message) -> None:
            nonlocal refused
            if message["type"] == "http.response.start":
                size = _length(message)
                if size is not None and size > self.limit:
                    refused = True
                    body = orjson.dumps({"error": response_too_large(size, self.limit).message})
                    await send(
                        {
                            "type": "http.response.start",
                            "status": 413,
                            "headers": [
                                (b"content-type", b"application/json"),
                                (b"content-length", str(len(body)).encode()),
                            ],
                        }
                    )
                    await send({"type": "http.response.body", "body": body})
                    return
            if not refused:
                await send(message)

        await self.app(scope, receive, limited)


def _length(message: Message) -> int | None:
    for name, value in message.get("headers", []):
        if name.lower() == b"content-length":
            return int(value)
    return None
