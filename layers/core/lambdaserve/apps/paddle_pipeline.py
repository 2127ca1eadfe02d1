"""Paddle Serving's pipeline HTTP API on the inference port: ``POST /{name}/prediction``,
answered by the model (or ensemble) of that name's default version."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from lambdaserve.errors import LambdaServeError
from lambdaserve.protocol import paddle_pipeline
from lambdaserve.protocol.limits import json_document
from lambdaserve.protocol.names import check_model_name
from lambdaserve.serving.data_plane import InferenceDataPlane


def install_paddle_pipeline(
    app: FastAPI, plane: InferenceDataPlane, read_body: Callable[[Request], Awaitable[bytes]]
) -> None:
    @app.post("/{name}/prediction")
    async def prediction(name: str, request: Request) -> JSONResponse:
        try:
            model = check_model_name(name)
            document = json_document(await read_body(request))

            served = await plane.served(model, None)
            parsed = paddle_pipeline.parse_request(document, served.signature)
            inferred = await plane.infer(model, None, parsed)
            return JSONResponse(paddle_pipeline.encode_response(inferred.outputs))
        except LambdaServeError as exc:  # Paddle's gateway answers 200 with err_no
            return JSONResponse(paddle_pipeline.error_response(exc))
