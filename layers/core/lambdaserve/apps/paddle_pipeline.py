"""Paddle Serving's pipeline HTTP API on the inference port: ``POST /{name}/prediction``,
answered by the model (or ensemble) of that name's default version."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import orjson
from fastapi import FastAPI, Request, Response
from fastapi.responses import JSONResponse

from lambdaserve.errors import LambdaServeError
from lambdaserve.protocol import paddle_pipeline
from lambdaserve.protocol.limits import json_document
from lambdaserve.protocol.names import check_model_name
from lambdaserve.serving.capture.capture_offers import JSON, offer
from lambdaserve.serving.data_plane import InferenceDataPlane


def install_paddle_pipeline(
    app: FastAPI, plane: InferenceDataPlane, read_body: Callable[[Request], Awaitable[bytes]]
) -> None:
    @app.post("/{name}/prediction")
    async def prediction(name: str, request: Request) -> Response:
        try:
            model = check_model_name(name)
            sent = await read_body(request)
            document = json_document(sent)
            served = await plane.served(model, None)
            parsed = paddle_pipeline.parse_request(document, served.signature)
            inferred = await plane.infer(model, None, parsed)
            encoded = orjson.dumps(paddle_pipeline.encode_response(inferred.outputs))
            if plane.capture is not None:
                await offer(
                    plane,
                    model,
                    inferred.version,
                    (sent, JSON),
                    (encoded, JSON),
                    served=inferred.served,
                )
            return Response(encoded, media_type=JSON)
        except LambdaServeError as exc:  # Paddle's gateway answers 200 with err_no
            return JSONResponse(paddle_pipeline.error_response(exc))
