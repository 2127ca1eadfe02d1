"""Paddle Serving's pipeline HTTP API on the inference port: ``POST /{name}/prediction``,
answered by the model (or ensemble) of that name's default version."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from lambdaserve.apps.predictions import Call
from lambdaserve.catalog.repository import check_model_name
from lambdaserve.errors import LambdaServeError
from lambdaserve.protocol import paddle_pipeline
from lambdaserve.protocol.limits import json_document
from lambdaserve.serving.model_server import ModelServer


def install_paddle_pipeline(
    app: FastAPI,
    server: Callable[[], ModelServer],
    read_body: Callable[[Request], Awaitable[bytes]],
    call: Call,
    number_of: Callable[[str, str | None], Awaitable[int | None]],
) -> None:
    @app.post("/{name}/prediction")
    async def prediction(name: str, request: Request) -> JSONResponse:
        try:
            model = check_model_name(name)
            document = json_document(await read_body(request))

            def run() -> dict[str, Any]:
                served = server().resolver.resolve(model, None)
                parsed = paddle_pipeline.parse_request(document, served.signature)
                return server().infer(
                    model,
                    served.version,
                    parsed,
                    lambda _, outputs: paddle_pipeline.encode_response(outputs),
                )

            return JSONResponse(await call(model, None, run))
        except LambdaServeError as exc:  # Paddle's gateway answers 200 with err_no
            return JSONResponse(paddle_pipeline.error_response(exc))
