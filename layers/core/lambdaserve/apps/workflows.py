"""TorchServe's workflow APIs: ``POST /wfpredict/{w}`` on the inference port, and
``GET /workflows``, ``GET|DELETE /workflows/{w}`` on the management port. A workflow is
published by uploading its ``.war`` (``models/<w>.war``), so ``POST /workflows?url=`` is
refused as model registration is, saying how to publish."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from fastapi import FastAPI, Request, Response
from fastapi.responses import JSONResponse

from lambdaserve.config.model_files import WORKFLOW_MANIFEST_FILE
from lambdaserve.errors import InvalidInput, ModelNotFound
from lambdaserve.protocol.names import check_model_name
from lambdaserve.publishing.management import ModelManager, ModelView
from lambdaserve.serving.capture.capture_offers import offer_served
from lambdaserve.serving.data_plane import InferenceDataPlane
from lambdaserve.serving.raw_predictions import RawRequest, predict_raw


def install_workflow_predictions(
    app: FastAPI,
    plane: InferenceDataPlane,
    read_body: Callable[[Request], Awaitable[bytes]],
    fields_of: Callable[[Request, bytes], Awaitable[tuple[tuple[str, Any], ...]]],
) -> None:
    async def wfpredict(request: Request) -> Response:
        name = check_model_name(request.path_params["workflow"])
        body = await read_body(request)
        fields = await fields_of(request, body)
        headers = {k.lower(): v for k, v in request.headers.items()}

        def run() -> Response:
            served = plane.resolve_now(name, None)
            if served.record.model_file != WORKFLOW_MANIFEST_FILE:
                raise ModelNotFound(
                    f"{name!r} is a model, not a workflow: ask /predictions/{name}, or "
                    f"publish a workflow with `aws s3 cp {name}.war s3://<bucket>/models/`"
                )
            answer = predict_raw(plane.server(), name, served.version, RawRequest(fields, headers))
            if answer.status < 300:
                sent = request.headers.get("content-type") or "application/octet-stream"
                response = (answer.body, answer.content_type)
                offer_served(plane.capture, served, (body, sent), response)
            return Response(answer.body, answer.status, media_type=answer.content_type)

        result: Response = await plane.call(name, None, run)
        return result

    app.add_route("/wfpredict/{workflow}", wfpredict, methods=["POST", "PUT"])


def install_workflow_management(app: FastAPI, manager: Callable[[], ModelManager]) -> None:
    @app.get("/workflows")
    def list_workflows() -> dict[str, Any]:
        return {
            "workflows": [
                {"workflowName": view.record.name, "workflowUrl": _url(view, manager())}
                for view in _workflows(manager())
            ]
        }

    @app.get("/workflows/{workflow}")
    def describe_workflow(workflow: str) -> list[dict[str, Any]]:
        view = _workflow(manager(), workflow)
        return [
            {
                "workflowName": view.record.name,
                "workflowUrl": _url(view, manager()),
                "minWorkers": 0,
                "maxWorkers": 0,
                "batchSize": 1,
                "maxBatchDelay": 0,
                "state": [v.state for v in view.versions if v.version == view.default_version]
                or ["UNAVAILABLE"],
                "versions": [
                    {"version": v.version, "state": v.state, "reason": v.reason}
                    for v in view.versions
                ],
            }
        ]

    @app.delete("/workflows/{workflow}")
    def unregister_workflow(workflow: str) -> JSONResponse:
        view = _workflow(manager(), workflow)
        deleted = sum(manager().delete_version(view.record.name, v.version) for v in view.versions)
        return JSONResponse(
            {
                "status": f'Workflow "{view.record.name}" unregistered: {deleted} objects '
                "removed; the catalog follows through repository events"
            }
        )

    @app.post("/workflows", status_code=400)
    def register_workflow() -> None:
        raise InvalidInput(
            "registering a workflow from a URL is not supported: lambdaserve loads only from "
            "its own bucket. Publish by upload instead: `aws s3 cp pipeline.war "
            "s3://<ModelBucketName>/models/` (and each model its spec names, e.g. "
            "`aws s3 cp m1.mar s3://<ModelBucketName>/models/`)"
        )


def _workflows(manager: ModelManager) -> list[ModelView]:
    views = []
    for name in manager.all_model_names():
        view = manager.view(name)
        if any(v.model_file == WORKFLOW_MANIFEST_FILE for v in view.versions):
            views.append(view)
    return views


def _workflow(manager: ModelManager, name: str) -> ModelView:
    view = manager.view(check_model_name(name))
    if not any(v.model_file == WORKFLOW_MANIFEST_FILE for v in view.versions):
        raise ModelNotFound(f"{name!r} is a model, not a workflow")
    return view


def _url(view: ModelView, manager: ModelManager) -> str:
    return manager.repository.url(view.record.name, view.default_version)
