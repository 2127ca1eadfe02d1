"""Each HTTP request's context shared with the data plane, on every HTTP door: its headers
(read only where a setting names one: a weighted label's ``sticky`` header), and, on the
way out, the version that answered it in ``lambdaserve-model-version`` (a v2 answer carries
it from its codec; every other door's answer gets it here)."""

from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from lambdaserve.protocol.request_headers import VERSION_HEADER, answered_version, forget, receive

_VERSION = VERSION_HEADER.encode("latin-1")
_SHARED = "lambdaserve_door_context"  # set in the scope by the outermost DoorContext


class DoorContext:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive_: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope.get(_SHARED):
            await self.app(scope, receive_, send)  # not HTTP, or an outer door already did
            return
        scope[_SHARED] = True  # serve's front door wraps the app, which has its own

        async def sending(message: Message) -> None:
            if message["type"] == "http.response.start":
                version = answered_version()
                headers = message.get("headers") or []
                if version is not None and not any(k == _VERSION for k, _ in headers):
                    headers = [*headers, (_VERSION, str(version).encode("latin-1"))]
                    message = {**message, "headers": headers}
            await send(message)

        token = receive(scope["headers"])
        try:
            await self.app(scope, receive_, sending)
        finally:
            forget(token)
