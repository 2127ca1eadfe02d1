"""Each HTTP request's context shared with the data plane, on every HTTP door: its headers
(read only where a setting names one: a weighted label's ``sticky`` header), and, on the
way out, the version that answered it in ``lambdaserve-model-version`` (a v2 answer carries
it from its codec; every other door's answer gets it here)."""

from __future__ import annotations

from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from lambdaserve.protocol.request_headers import VERSION_HEADER, answered_version, forget, receive

_VERSION = VERSION_HEADER.encode("latin-1")


def with_version(headers: list[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
    """``headers`` saying the version that answered, where one did and they do not yet."""
    version = answered_version()
    if version is None or any(k == _VERSION for k, _ in headers):
        return headers
    return [*headers, (_VERSION, str(version).encode("latin-1"))]


def said_version(response: Response) -> Response:
    """``response`` saying the version that answered (a door that builds its own answer)."""
    version = answered_version()
    if version is not None and VERSION_HEADER not in response.headers:
        response.headers[VERSION_HEADER] = str(version)
    return response


class DoorContext:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive_: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive_, send)
            return

        async def sending(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = message.get("headers") or []
                said = with_version(headers)
                if said is not headers:
                    message = {**message, "headers": said}
            await send(message)

        token = receive(scope["headers"])
        try:
            await self.app(scope, receive_, sending)
        finally:
            forget(token)
