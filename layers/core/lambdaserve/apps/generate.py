"""Triton's generate extension on the inference port: ``POST /v2/models/{m}[/versions/{v}]/
generate`` (one answer) and ``.../generate_stream`` (server-sent events, one ``data:`` line per
response: a decoupled model's every response as it sends it).

Through the HTTP API's Lambda (the request arrives as an API Gateway event, which answers
once), ``generate`` answers a decoupled model's every response at once, as a JSON list, and
``generate_stream`` is a 400 saying where streams run: ``serve`` and ``dev``."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import orjson
from fastapi import FastAPI, Request, Response
from fastapi.responses import StreamingResponse

from lambdaserve.errors import InferenceError, InvalidInput, LambdaServeError
from lambdaserve.protocol.generate import encode_generate, parse_generate
from lambdaserve.protocol.limits import json_document
from lambdaserve.protocol.names import check_model_name
from lambdaserve.protocol.v2 import InferRequest
from lambdaserve.serving.capture.capture_offers import JSON, offer
from lambdaserve.serving.data_plane import InferenceDataPlane

EVENTS = "text/event-stream"


def install_generate(
    app: FastAPI, plane: InferenceDataPlane, read_body: Callable[[Request], Awaitable[bytes]]
) -> None:
    async def decoded(request: Request) -> tuple[str, int | None, InferRequest, bytes]:
        model = check_model_name(request.path_params["model"])
        number = await plane.version_number(model, request.path_params.get("version"))
        served = await plane.served(model, number)
        sent = await read_body(request)
        return model, number, parse_generate(json_document(sent), served.signature), sent

    async def generate(request: Request) -> Response:
        model, number, infer_request, sent = await decoded(request)
        answers = [a async for a in plane.stream(model, number, infer_request)]
        if len(answers) != 1 and _through_lambda(request):
            documents = [encode_generate(model, a.version, a.outputs) for a in answers]
            body = _json(documents)
        elif len(answers) != 1:
            raise InferenceError(
                f"the model sent {len(answers)} responses: ask .../generate_stream for them"
            )
        else:
            [answer] = answers
            body = _json(encode_generate(model, answer.version, answer.outputs))
        if plane.capture is not None and answers:
            first = answers[0]
            await offer(
                plane, model, first.version, (sent, JSON), (body, JSON), served=first.served
            )
        return Response(body, 200, media_type=JSON)

    async def generate_stream(request: Request) -> Response:
        if _through_lambda(request):
            raise InvalidInput(
                "the HTTP API answers once (API Gateway buffers a Lambda's answer): streams "
                "run on `lambdaserve serve` (server mode) and `lambdaserve dev`; here, POST "
                ".../generate answers with every response at once, as a JSON list"
            )
        # bad input: 4xx before streaming
        model, number, infer_request, sent = await decoded(request)

        async def events() -> AsyncIterator[bytes]:
            kept: list[bytes] = []  # the whole stream, for payload capture once it ends
            version = None
            try:
                async for answer in plane.stream(model, number, infer_request):
                    event = _event(encode_generate(model, answer.version, answer.outputs))
                    version = answer.version
                    if plane.capture is not None:
                        kept.append(event)
                    yield event
            except LambdaServeError as exc:  # after the first byte, errors travel in-band
                yield _event({"error": exc.message})
                return
            if plane.capture is not None and version is not None:
                await offer(plane, model, version, (sent, JSON), (b"".join(kept), EVENTS))

        return StreamingResponse(events(), media_type=EVENTS)

    for suffix, route in (("generate", generate), ("generate_stream", generate_stream)):
        for prefix in ("/v2/models/{model}", "/v2/models/{model}/versions/{version}"):
            app.add_route(f"{prefix}/{suffix}", route, methods=["POST"])


def _json(body: dict[str, Any] | list[dict[str, Any]]) -> bytes:
    return orjson.dumps(body, option=orjson.OPT_SERIALIZE_NUMPY)


def _event(body: dict[str, Any]) -> bytes:
    """One server-sent event, as Triton's generate_stream writes it."""
    return b"data: " + _json(body) + b"\n\n"


def _through_lambda(request: Request) -> bool:
    """Mangum puts the Lambda event in the scope: the answer goes back whole."""
    return "aws.event" in request.scope
