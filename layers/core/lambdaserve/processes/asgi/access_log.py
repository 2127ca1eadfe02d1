"""One access-log line per request: method, path, status, latency, model and version.

``POST /v2/models/mlp/infer 200 0.41 ms model=mlp version=1`` (and ``cache=hit`` or
``cache=miss`` for a model with the response cache). The version is the one that
answered (a v2 response names it first thing), else the one the path asked for.
"""

from __future__ import annotations

import logging
import re
import time

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from lambdaserve.serving.response_cache.lookups import outcome_note

logger = logging.getLogger("lambdaserve.access")
_TARGET = re.compile(
    r"^/(?:v2/models|predictions|models|v2/repository/models)/([^/]+)(?:/(?:versions/)?(\d+))?"
)
_ANSWERED = re.compile(rb'"model_version":"(\d+)"')


class AccessLog:
    """ASGI middleware; the latency is from the request's start to its last body byte."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        cache_outcomes: list[str] = []
        outcome_note.set(cache_outcomes)  # the response cache says hit or miss here
        status = 500
        answered: str | None = None

        async def logged_send(message: Message) -> None:
            nonlocal status, answered
            if message["type"] == "http.response.start":
                status = int(message["status"])
            elif message["type"] == "http.response.body" and answered is None:
                found = _ANSWERED.search(bytes(message.get("body", b""))[:256])
                answered = found.group(1).decode() if found else ""
            await send(message)

        try:
            await self.app(scope, receive, logged_send)
        finally:
            path = scope["path"]
            line = (
                f"{scope['method']} {path} {status} {(time.perf_counter() - started) * 1000:.2f} ms"
            )
            target = _TARGET.match(path)
            if target:
                line += f" model={target.group(1)}"
                version = answered or target.group(2)
                if version:
                    line += f" version={version}"
            if cache_outcomes:
                line += f" cache={cache_outcomes[0]}"
            logger.info(line)
