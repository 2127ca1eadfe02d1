"""Triton's trace extension on the inference port and over gRPC: ``GET/POST
/v2/trace/setting`` and ``/v2/models/{m}/trace/setting`` (gRPC ``TraceSetting``), answered
from the data plane's tracer as Triton answers them. The infer function has no tracer (a
Lambda instance keeps no trace file): there the settings read OFF and turning them on is a
400 that says where tracing runs."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fastapi import FastAPI, Request

from lambdaserve.apps.json_body import json_object
from lambdaserve.errors import InvalidInput, ModelNotFound, ModelNotReady
from lambdaserve.serving.data_plane import InferenceDataPlane
from lambdaserve.tracing.wire import rendered, setting_update

TRACE_OFF: dict[str, str | list[str]] = {
    "trace_level": ["OFF"],
    "trace_rate": "1000",
    "trace_count": "-1",
    "log_frequency": "0",
    "trace_file": "",
    "trace_mode": "triton",
}


def install_trace_settings(app: FastAPI, plane: InferenceDataPlane) -> None:
    @app.get("/v2/trace/setting", include_in_schema=False)
    @app.get("/v2/models/{model}/trace/setting", include_in_schema=False)
    async def trace_settings(model: str | None = None) -> dict[str, Any]:
        return await trace_setting_answer(plane, model, None)

    @app.post("/v2/trace/setting", include_in_schema=False)
    @app.post("/v2/models/{model}/trace/setting", include_in_schema=False)
    async def update_trace_settings(request: Request, model: str | None = None) -> dict[str, Any]:
        body = await json_object(request, required=False)
        return await trace_setting_answer(plane, model, body)


async def trace_setting_answer(
    plane: InferenceDataPlane,
    model: str | None,
    body: Mapping[str, Any] | None,
    grpc: bool = False,
) -> dict[str, str | list[str]]:
    """The settings of ``model`` (None or "": the global ones) after ``body``'s update
    (None: a read; gRPC bodies hold lists of strings)."""
    if model:
        try:
            await plane.resolve(model, None)
        except (ModelNotFound, ModelNotReady, InvalidInput):
            raise InvalidInput(f"Request for unknown model : {model}") from None
    tracer = plane.tracer
    if tracer is None:
        if body and body.get("trace_level") not in (None, ["OFF"], []):
            raise InvalidInput(
                "tracing runs in `lambdaserve serve` and `lambdaserve dev` "
                "(--trace-config triton,file=<path>), not in the infer function; per-model "
                "timings are in /v2/models/{m}/stats"
            )
        return TRACE_OFF
    if body is not None:
        tracer.update(model or None, setting_update(body, grpc))
    return rendered(tracer.scopes.setting(model or None))
