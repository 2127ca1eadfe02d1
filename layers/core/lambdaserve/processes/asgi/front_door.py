"""An ASGI front door for the hot routes of long-running servers.

``POST /v2/models/{m}[/versions/{v}]/infer``, TorchServe's ``/predictions/{m}[/{v}]`` and TF
Serving's ``POST /v1/models/...`` (``:predict``) are answered here, before the framework's
middleware stack and router (measured under load: they took a fifth of the server's time,
more than parsing the request; for TF Serving's ``:predict``, half its CPU per request: see
docs/benchmarks.md); every other request, and async submissions, go to the app. The
request's headers and the answering version are shared as the app's ``DoorContext`` shares
them (without its wrapper around ``send``: measured, it cost the v2 door 2% of its CPU).
v2 infer is answered by the one v2 door (``apps.v2_calls``) over the app's data plane,
predictions and TF Serving by the app's own ``app.state.answer_prediction`` and
``app.state.answer_tfserving``, so both doors agree.
"""

from __future__ import annotations

import re
import time
from collections.abc import AsyncIterator, Awaitable, Callable

from fastapi import FastAPI, Response
from starlette.types import Receive, Scope, Send

from lambdaserve.apps.door_context import said_version
from lambdaserve.apps.inference import read_limited
from lambdaserve.apps.v2_calls import (
    JSON,
    V2_INFER,
    HttpAnswer,
    answer_v2,
    encoded_answer,
    error_answer,
    read_v2_call,
)
from lambdaserve.protocol.content_encoding import decode_body
from lambdaserve.protocol.request_headers import forget
from lambdaserve.protocol.request_headers import receive as received
from lambdaserve.serving.data_plane import InferenceDataPlane
from lambdaserve.tracing.frontend import FRONTEND, Frontend

AnswerPrediction = Callable[[str, str | None, bytes, dict[str, str]], Awaitable[Response]]
AnswerTfServing = Callable[[str, Callable[[], Awaitable[bytes]]], Awaitable[Response]]
PREDICTIONS = re.compile(r"^/predictions/([^/]+)(?:/([^/]+))?$")
TFSERVING = re.compile(r"^/v1/models/(.*)$")  # the app's POST /v1/models/{target:path}


class FrontDoor:
    """Wraps the inference app; answers v2 infer itself."""

    def __init__(self, app: FastAPI, max_request_bytes: Callable[[], int]) -> None:
        self.app = app
        self._plane: InferenceDataPlane = app.state.plane
        self._answer_prediction: AnswerPrediction | None = getattr(
            app.state, "answer_prediction", None
        )
        self._answer_tfserving: AnswerTfServing | None = getattr(
            app.state, "answer_tfserving", None
        )
        self._max_request_bytes = max_request_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] not in ("POST", "PUT"):
            await self.app(scope, receive, send)
            return
        token = received(scope["headers"])  # the app's DoorContext, for this door's routes
        try:
            await self._answer(scope, receive, send)
        finally:
            forget(token)

    async def _answer(self, scope: Scope, receive: Receive, send: Send) -> None:
        prediction = PREDICTIONS.match(scope["path"])
        if prediction is not None and self._answer_prediction is not None:
            response = await self._predict(prediction, scope, receive)
            await said_version(response)(scope, receive, send)
            return
        tfserving = TFSERVING.match(scope["path"]) if scope["method"] == "POST" else None
        if tfserving is not None and self._answer_tfserving is not None:
            response = await self._tfserving(tfserving, scope, receive)
            await said_version(response)(scope, receive, send)
            return
        match = V2_INFER.match(scope["path"]) if scope["method"] == "POST" else None
        if match is None:
            await self.app(scope, receive, send)
            return
        headers = _headers(scope)
        if "respond-async" in headers.get("prefer", ""):
            await self.app(scope, receive, send)
            return
        tracer = self._plane.tracer
        door = tracer.opened("HTTP") if tracer is not None else None  # Triton's HTTP stamps
        answer = await self._infer(match, headers, receive, door)  # its codec says the version
        response_headers = {**answer.headers, "content-length": str(len(answer.body))}
        sending = time.perf_counter_ns()
        await send(
            {
                "type": "http.response.start",
                "status": answer.status,
                "headers": [
                    (k.encode("latin-1"), v.encode("latin-1")) for k, v in response_headers.items()
                ],
            }
        )
        await send({"type": "http.response.body", "body": answer.body})
        if door is not None and tracer is not None:
            tracer.sent(door, sending)

    async def _infer(
        self, match: re.Match[str], headers: dict[str, str], receive: Receive, door: Frontend | None
    ) -> HttpAnswer:
        try:
            limit = self._max_request_bytes()
            body = await read_limited(_chunks(receive), headers.get("content-length"), limit)
            token = door.read() if door is not None else None
            try:
                call = read_v2_call(match.group(1), match.group(2), headers, body, limit)
                return encoded_answer(await answer_v2(self._plane, call))
            finally:
                if token is not None:
                    FRONTEND.reset(token)
        except Exception as exc:
            return error_answer(exc, "POST", match.group(0))

    async def _predict(self, match: re.Match[str], scope: Scope, receive: Receive) -> Response:
        assert self._answer_prediction is not None
        headers = _headers(scope)
        try:
            limit = self._max_request_bytes()
            body = await read_limited(_chunks(receive), headers.get("content-length"), limit)
            body = decode_body(body, headers.get("content-encoding"), limit)
            return await self._answer_prediction(match.group(1), match.group(2), body, headers)
        except Exception as exc:
            answer = error_answer(exc, scope["method"], match.group(0))
            return Response(answer.body, answer.status, answer.headers, media_type=JSON)

    async def _tfserving(self, match: re.Match[str], scope: Scope, receive: Receive) -> Response:
        assert self._answer_tfserving is not None
        headers = _headers(scope)

        async def body() -> bytes:
            limit = self._max_request_bytes()
            raw = await read_limited(_chunks(receive), headers.get("content-length"), limit)
            return decode_body(raw, headers.get("content-encoding"), limit)

        try:
            return await self._answer_tfserving(match.group(1), body)
        except Exception as exc:
            answer = error_answer(exc, "POST", match.group(0))
            return Response(answer.body, answer.status, answer.headers, media_type=JSON)


async def _chunks(receive: Receive) -> AsyncIterator[bytes]:
    """The request body's chunks from ASGI messages."""
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return
        yield message.get("body", b"")
        if not message.get("more_body", False):
            return


def _headers(scope: Scope) -> dict[str, str]:
    """The request's headers by name (ASGI's names are lower-case already)."""
    return {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}
