"""An ASGI front door for the hot routes of long-running servers.

``POST /v2/models/{m}[/versions/{v}]/infer`` and TorchServe's ``/predictions/{m}[/{v}]`` are
answered here, before the framework's middleware stack and router (measured under load: they
took a fifth of the server's time, more than parsing the request); every other request, and
async submissions, go to the app. The answers are the app's own (``app.state.
answer_v2_infer``, ``app.state.answer_prediction``), so both doors agree.
"""

from __future__ import annotations

import logging
import re
from collections.abc import AsyncIterator, Awaitable, Callable

import orjson
from fastapi import FastAPI, Response
from starlette.types import Receive, Scope, Send

from lambdaserve.apps.inference import read_limited
from lambdaserve.apps.v2_calls import V2_INFER, header_length_value
from lambdaserve.catalog.repository import check_model_name, parse_version
from lambdaserve.errors import LambdaServeError
from lambdaserve.protocol.content_encoding import decode_body
from lambdaserve.protocol.http_status import status_for
from lambdaserve.protocol.torchserve_errors import error_document
from lambdaserve.protocol.v2 import HEADER_LENGTH, EncodedResponse

Answer = Callable[[str, int | None, bytes, int | None], Awaitable[EncodedResponse]]
AnswerPrediction = Callable[[str, str | None, bytes, dict[str, str]], Awaitable[Response]]
PREDICTIONS = re.compile(r"^/predictions/([^/]+)(?:/([^/]+))?$")

logger = logging.getLogger(__name__)


class FrontDoor:
    """Wraps the inference app; answers v2 infer itself."""

    def __init__(self, app: FastAPI, max_request_bytes: Callable[[], int]) -> None:
        self.app = app
        self._answer: Answer = app.state.answer_v2_infer
        self._answer_prediction: AnswerPrediction | None = getattr(
            app.state, "answer_prediction", None
        )
        self._max_request_bytes = max_request_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] in ("POST", "PUT"):
            prediction = PREDICTIONS.match(scope["path"])
            if prediction is not None and self._answer_prediction is not None:
                response = await self._predict(prediction, scope, receive)
                await response(scope, receive, send)
                return
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

    async def _predict(self, match: re.Match[str], scope: Scope, receive: Receive) -> Response:
        assert self._answer_prediction is not None
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        try:
            limit = self._max_request_bytes()
            body = await read_limited(_chunks(receive), headers.get("content-length"), limit)
            body = decode_body(body, headers.get("content-encoding"), limit)
            return await self._answer_prediction(match.group(1), match.group(2), body, headers)
        except LambdaServeError as exc:
            status = status_for(exc)
            error = error_document(match.group(0), status, exc.message)
            return Response(orjson.dumps(error), status, media_type="application/json")
        except Exception:
            logger.exception("unhandled error on %s %s", scope["method"], match.group(0))
            message = "internal error; the server log has the details"
            error = error_document(match.group(0), 500, message)
            return Response(orjson.dumps(error), 500, media_type="application/json")


async def _chunks(receive: Receive) -> AsyncIterator[bytes]:
    """The request body's chunks from ASGI messages."""
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return
        yield message.get("body", b"")
        if not message.get("more_body", False):
            return
