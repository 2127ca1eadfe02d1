"""The W3C ``traceparent`` of each HTTP request, made the caller's trace context of what
the data plane traces for it (``--trace-config mode=opentelemetry``: its spans become
children of the caller's span). Wrapped around ``serve``'s app in that mode only."""

from __future__ import annotations

from starlette.types import ASGIApp, Receive, Scope, Send

from lambdaserve.tracing.otel import CALLER


class TraceContext:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            for key, value in scope["headers"]:
                if key == b"traceparent":
                    token = CALLER.set(value.decode("latin-1"))
                    try:
                        await self.app(scope, receive, send)
                    finally:
                        CALLER.reset(token)
                    return
        await self.app(scope, receive, send)
