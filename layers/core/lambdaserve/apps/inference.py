"""Inference API: KServe v2 with Triton's extensions, and TorchServe-style predictions."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any, TypeVar

from fastapi import FastAPI, Request, Response
from fastapi.responses import JSONResponse
from starlette.concurrency import run_in_threadpool

from lambdaserve.apps.docs_page import install_docs
from lambdaserve.apps.door_context import DoorContext
from lambdaserve.apps.errors import install_error_handlers
from lambdaserve.apps.generate import install_generate
from lambdaserve.apps.metrics_route import install_metrics, queued_in
from lambdaserve.apps.openapi import document_api, inference_bodies, inference_paths
from lambdaserve.apps.paddle_pipeline import install_paddle_pipeline
from lambdaserve.apps.predictions import install_predictions
from lambdaserve.apps.tfserving import install_tfserving
from lambdaserve.apps.torchserve_management import install_api_description
from lambdaserve.apps.trace_settings import install_trace_settings
from lambdaserve.apps.triton_extras import install_triton_extras
from lambdaserve.apps.v2_calls import answer_v2, read_v2_call, too_large
from lambdaserve.errors import InvalidInput
from lambdaserve.protocol.content_encoding import decode_body
from lambdaserve.protocol.limits import header_int
from lambdaserve.protocol.v2 import (
    HEADER_LENGTH,
)
from lambdaserve.queued.submit import AsyncSubmitter
from lambdaserve.serving.data_plane import InferenceDataPlane
from lambdaserve.serving.worker_board import worker_memory

T = TypeVar("T")


def create_inference_app(
    plane: InferenceDataPlane,
    max_request_bytes: Callable[[], int],
    submitter: Callable[[], AsyncSubmitter] | None = None,
) -> FastAPI:
    """Build the app over ``plane``, the process's one (``wiring``): its server is looked up
    per request so models load lazily, in the cache; its batchers (long-running servers
    only) batch these routes' requests with the other doors' ones."""
    app = FastAPI(title="lambdaserve inference API", version="2", docs_url=None, redoc_url=None)
    install_error_handlers(app)
    app.add_middleware(DoorContext)  # headers in, the answering version out
    install_docs(app)
    install_api_description(app)
    install_triton_extras(app, plane.shared_memory)
    install_trace_settings(app, plane)
    server, batcher, readiness = plane.server, plane.batcher, plane.readiness
    install_metrics(
        app,
        lambda: server().stats,
        queued_in(batcher, plane) if batcher else None,
        lambda: worker_memory(server()),
        plane.capture.snapshot if plane.capture is not None else None,
    )

    @app.get("/v2/health/live")
    async def live() -> dict[str, bool]:
        return {"live": True}

    @app.get("/v2/health/ready", response_model=None)
    async def ready() -> dict[str, bool] | JSONResponse:
        if await plane.ready():
            return {"ready": True}
        # not ready yet (warming up) or any more (draining): a load balancer's probe fails
        why = readiness.view.reason if readiness is not None else ""
        return JSONResponse({"ready": False, "reason": why}, status_code=503)

    @app.get("/v2")
    async def metadata() -> dict[str, Any]:
        return plane.server_metadata()

    @app.get("/ping")
    async def ping() -> dict[str, str]:
        server()
        return {"status": "Healthy"}

    _install_request_status(app, submitter)

    @app.get("/v2/models/stats")
    async def all_stats() -> dict[str, Any]:
        return await plane.model_stats(None, None)

    @app.get("/v2/models/{model}")
    @app.get("/v2/models/{model}/versions/{version}")
    async def model_metadata(model: str, version: str | None = None) -> dict[str, Any]:
        return await plane.model_metadata(model, version)

    @app.get("/v2/models/{model}/ready")
    @app.get("/v2/models/{model}/versions/{version}/ready")
    async def model_ready(model: str, version: str | None = None) -> dict[str, Any]:
        served, was_loaded = await plane.model_ready(model, version)
        # loaded: this instance had it in memory before the probe (false: the probe loaded it)
        return {"name": model, "version": str(served.version), "ready": True, "loaded": was_loaded}

    @app.get("/v2/models/{model}/config")
    @app.get("/v2/models/{model}/versions/{version}/config")
    async def model_config(model: str, version: str | None = None) -> dict[str, Any]:
        return await plane.model_config(model, version)

    @app.get("/v2/models/{model}/stats")
    @app.get("/v2/models/{model}/versions/{version}/stats")
    async def model_stats(model: str, version: str | None = None) -> dict[str, Any]:
        return await plane.model_stats(model, version)

    app.state.plane = plane  # the ASGI front door answers v2 infer through the same plane

    async def infer(request: Request) -> Response:
        headers = request.headers
        body = await read_raw_body(request, max_request_bytes())
        call = read_v2_call(
            request.path_params["model"],
            request.path_params.get("version"),
            headers,
            body,
            max_request_bytes(),
        )
        if "respond-async" in headers.get("prefer", ""):
            number = await plane.version_number(call.model, call.version_text)
            return await _submit(submitter, call.model, number, call.body, call.header_length)
        encoded = await answer_v2(plane, call)
        return Response(encoded.body, headers=encoded.headers)

    # The hot routes are plain Starlette routes: FastAPI's dependency solving for two path
    # parameters cost more than running a small model.
    for path in ("/v2/models/{model}/infer", "/v2/models/{model}/versions/{version}/infer"):
        app.add_route(path, infer, methods=["POST"])
    for install in (
        install_predictions,
        install_tfserving,
        install_paddle_pipeline,
        install_generate,
    ):
        install(app, plane, lambda r: read_limited_body(r, max_request_bytes()))

    document_api(app, inference_paths(), inference_bodies())
    return app


async def _submit(
    submitter: Callable[[], AsyncSubmitter] | None,
    model: str,
    version: int | None,
    body: bytes,
    header_length: int | None,
) -> Response:
    """``Prefer: respond-async``: 202 with the id and where to poll."""
    if submitter is None:
        raise InvalidInput("async requests are not configured on this server")
    request_id = await run_in_threadpool(submitter().submit, model, version, body, header_length)
    status_url = f"/v2/requests/{request_id}"
    return JSONResponse(
        {"id": request_id, "status_url": status_url},
        status_code=202,
        headers={"location": status_url},
    )


def _install_request_status(app: FastAPI, submitter: Callable[[], AsyncSubmitter] | None) -> None:
    """``GET /v2/requests/{id}``: 202 while pending, the response or the error when done."""

    @app.get("/v2/requests/{request_id}")
    async def request_status(request_id: str) -> Response:
        if submitter is None:
            raise InvalidInput("async requests are not configured on this server")
        record = await run_in_threadpool(submitter().result, request_id)
        if record.status == "PENDING":
            return JSONResponse({"id": request_id, "status": "PENDING"}, status_code=202)
        if record.status == "SUCCESS" and record.body is not None:
            if record.header_length is not None:  # binary tensors after the JSON header
                return Response(
                    record.body,
                    media_type="application/octet-stream",
                    headers={HEADER_LENGTH: str(record.header_length)},
                )
            return Response(record.body, media_type="application/json")
        return JSONResponse(
            {"error": record.error, "id": request_id, "status": record.status},
            status_code=record.http_status,
        )


async def read_limited_body(request: Request, limit: int) -> bytes:
    """The body (decompressed), or 413 before reading more than ``limit`` bytes."""
    return decode_body(
        await read_raw_body(request, limit), request.headers.get("content-encoding"), limit
    )


async def read_raw_body(request: Request, limit: int) -> bytes:
    """The body as sent (still encoded), or 413 before reading more than ``limit`` bytes."""
    return await read_limited(request.stream(), request.headers.get("content-length"), limit)


async def read_limited(chunks: AsyncIterator[bytes], declared: str | None, limit: int) -> bytes:
    """A body from its chunks and declared Content-Length; 413 before going over ``limit``."""
    size_declared = header_int("Content-Length", declared)
    if size_declared is not None and size_declared > limit:
        raise too_large(size_declared, limit)
    parts, size = [], 0
    async for chunk in chunks:
        size += len(chunk)
        if size > limit:
            raise too_large(size, limit)
        parts.append(chunk)
    return b"".join(parts)
