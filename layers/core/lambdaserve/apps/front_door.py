"""An ASGI front door for the hot route of long-running servers.

``POST /v2/models/{m}[/versions/{v}]/infer`` is answered here, before the framework's
middleware stack and router (measured under load: they took a fifth of the server's time,
more than parsing the request); every other request, and async submissions, go to the app.
The answer is the app's own (``app.state.answer_v2_infer``), so both doors agree.
"""

from __future__ import annotations

import logging
import re
from collections.abc import AsyncIterator, Awaitable, Callable

import orjson
from fastapi import FastAPI
from starlette.types import Receive, Scope, Send

from lambdaserve.apps.inference import read_limited
from lambdaserve.apps.v2_calls import V2_INFER, header_length_value
from lambdaserve.catalog.repository import check_model_name, parse_version
from lambdaserve.errors import LambdaServeError
from lambdaserve.protocol.content_encoding import decode_body
from lambdaserve.protocol.http_status import status_for
from lambdaserve.protocol.v2 import HEADER_LENGTH, EncodedResponse

Answer = Callable[[str, int | None, bytes, int | None], Awaitable[EncodedResponse]]

logger = logging.getLogger(__name__)


class FrontDoor:
    """Wraps the inference app; answers v2 infer itself."""

    def __init__(self, app: FastAPI, max_request_bytes: Callable[[], int]) -> None:
        self.app = app
        self._answer: Answer = app.state.answer_v2_infer
        self._max_request_bytes = max_request_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        match = (
            V2_INFER.match(scope["path"])
            if scope["type"] == "http" and scope["method"] == "POST"
            else None
        )
        if match is None or not (match.group(2) or "1").isdigit():
            await self.app(scope, receive, send)  # version labels resolve in the app
            return
        headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}
        if "respond-async" in headers.get("prefer", ""):
            await self.app(scope, receive, send)
            return
        status, body, response_headers = await self._infer(match, headers, receive)
        response_headers["content-length"] = str(len(body))
        await send(
            {
                "type": "http.response.start",
                "status": status,
                "headers": [
                    (k.encode("latin-1"), v.encode("latin-1")) for k, v in response_headers.items()
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})

    async def _infer(
        self, match: re.Match[str], headers: dict[str, str], receive: Receive
    ) -> tuple[int, bytes, dict[str, str]]:
        json_only = {"content-type": "application/json"}
        try:
            model = check_model_name(match.group(1))
            version = parse_version(match.group(2)) if match.group(2) else None
            limit = self._max_request_bytes()
            body = await read_limited(_chunks(receive), headers.get("content-length"), limit)
            body = decode_body(body, headers.get("content-encoding"), limit)
            header_length = header_length_value(headers.get(HEADER_LENGTH.lower()))
            encoded = await self._answer(model, version, body, header_length)
        except LambdaServeError as exc:
            return status_for(exc), orjson.dumps({"error": exc.message}), json_only
        except Exception:
            logger.exception("unhandled error on POST %s", match.group(0))
            error = {"error": "internal error; the server log has the details"}
            return 500, orjson.dumps(error), json_only
        return (
            200,
            encoded.body,
            {**json_only, **{k.lower(): v for k, v in encoded.headers.items()}},
        )


async def _chunks(receive: Receive) -> AsyncIterator[bytes]:
    """The request body's chunks from ASGI messages."""
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return
        yield message.get("body", b"")
        if not message.get("more_body", False):
            return
