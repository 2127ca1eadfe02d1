"""The trace context of each HTTP request, made the caller's trace context of what the data
plane traces for it (``--trace-config mode=opentelemetry``: its spans become children of the
caller's span): its W3C ``traceparent``, else X-Ray's ``X-Amzn-Trace-Id`` (a load balancer's,
API Gateway's, or the infer function's when it forwards), as a traceparent. Wrapped around
``serve``'s app in that mode only."""

from __future__ import annotations

from starlette.types import ASGIApp, Receive, Scope, Send

from lambdaserve.tracing.otel import CALLER
from lambdaserve.tracing.propagation import from_traceparent, from_xray


class TraceContext:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            caller = _caller(scope["headers"])
            if caller is not None:
                token = CALLER.set(caller)
                try:
                    await self.app(scope, receive, send)
                finally:
                    CALLER.reset(token)
                return
        await self.app(scope, receive, send)


def _caller(headers: list[tuple[bytes, bytes]]) -> str | None:
    traceparent = xray = None
    for key, value in headers:
        if key == b"traceparent":
            traceparent = from_traceparent(value.decode("latin-1"))
        elif key == b"x-amzn-trace-id":
            xray = from_xray(value.decode("latin-1"))
    context = traceparent or xray
    return None if context is None else context.traceparent
