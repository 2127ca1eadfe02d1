"""Management API: TorchServe-style model routes and Triton's repository extension."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from fastapi import FastAPI, Query, Request
from fastapi.responses import JSONResponse

from lambdaserve.apps.docs_page import install_docs
from lambdaserve.apps.errors import install_error_handlers
from lambdaserve.apps.json_body import json_object
from lambdaserve.apps.openapi import document_api, management_bodies
from lambdaserve.apps.rollout_routes import install_rollout_routes, rollouts_of
from lambdaserve.apps.torchserve_management import (
    install_api_description,
    install_torchserve_management,
    refuse_scaling,
    unregistered,
)
from lambdaserve.apps.worker_scaling import scaled, worker_fields
from lambdaserve.apps.workflows import install_workflow_management
from lambdaserve.catalog.label_weights import parse_label_weights
from lambdaserve.catalog.store import VersionRecord
from lambdaserve.config.runtime_names import (
    ENSEMBLE_RUNTIME,
    HANDLER_RUNTIME,
    ONNX_RUNTIME,
    PIPELINE_RUNTIME,
    PYTHON_RUNTIME,
    TORCHSCRIPT_RUNTIME,
)
from lambdaserve.errors import InvalidInput, ModelNotFound
from lambdaserve.metrics.cold_starts import summary
from lambdaserve.protocol.limits import json_document
from lambdaserve.protocol.names import check_model_name, parse_version
from lambdaserve.publishing.management import (
    DEFAULT_PAGE,
    MAX_PAGE,
    IndexEntry,
    ModelManager,
    ModelView,
)

if TYPE_CHECKING:  # the management function imports no serving code
    from lambdaserve.rollouts.service import Rollouts
    from lambdaserve.serving.model_server import ModelServer


def create_management_app(
    manager: Callable[[], ModelManager],
    server: Callable[[], ModelServer | None] = lambda: None,
    rollouts: Callable[[], Rollouts] | None = None,
) -> FastAPI:
    """Build the app; ``manager`` is called per request so the domain loads lazily;
    ``server``, where this process also serves, is the one whose workers describe lists and
    scaling changes (None: no workers here); ``rollouts``: the rollout routes, and describe
    shows each version's rollouts (None: neither)."""
    app = FastAPI(title="lambdaserve management API", version="1", docs_url=None, redoc_url=None)
    install_error_handlers(app)
    install_docs(app)
    install_api_description(app)
    install_torchserve_management(app, manager, server)
    install_workflow_management(app, manager)
    if rollouts is not None:  # before describe's /models/{m}/{version}
        install_rollout_routes(app, rollouts)

    def moving(name: str) -> list[dict[str, Any]] | None:
        return rollouts().of_model(check_model_name(name)) if rollouts is not None else None

    @app.get("/models")
    def list_models(
        limit: str | None = Query(None), next_page_token: str | None = Query(None)
    ) -> dict[str, Any]:
        names, token = manager().list_models(_limit(limit), next_page_token or None)
        body: dict[str, Any] = {
            "models": [
                {"modelName": name, "modelUrl": manager().repository.url(name)} for name in names
            ]
        }
        if token:
            body["nextPageToken"] = token
        return body

    @app.get("/models/{model}")
    @app.get("/models/{model}/all")
    def describe_model(model: str, customized: bool = Query(False)) -> list[dict[str, Any]]:
        return describe_answer(manager(), model, None, customized, server(), rollouts=moving(model))

    @app.get("/models/{model}/{version:version}")
    def describe_version(
        model: str, version: str, customized: bool = Query(False)
    ) -> list[dict[str, Any]]:
        return describe_answer(
            manager(), model, version, customized, server(), rollouts=moving(model)
        )

    @app.put("/models/{model}/labels/{label}")
    async def set_label(
        model: str, label: str, request: Request, version: str | None = Query(None)
    ) -> dict[str, Any]:
        body = await json_object(request, required=False)
        return _labelled(manager(), check_model_name(model), label, version, body)

    @app.delete("/models/{model}/labels/{label}")
    def remove_label(model: str, label: str) -> dict[str, str]:
        manager().remove_label(check_model_name(model), label)
        return {"status": f'Label "{label}" of model "{model}" removed'}

    @app.put("/models/{model}/{version:version}/set-default")
    def set_default(model: str, version: str) -> dict[str, str]:
        name = check_model_name(model)
        number = manager().version_number(name, version)
        manager().set_default(name, number)
        return {"status": set_default_status(manager(), name, number)}

    @app.delete("/models/{model}/{version:version}")
    def delete_version(model: str, version: str) -> JSONResponse:
        name = check_model_name(model)
        number = manager().version_number(name, version)
        deleted = manager().delete_version(name, number)
        # TorchServe's answer (its users' scripts check it): the objects are gone when it
        # answers; the catalog follows through the repository's events
        return JSONResponse(status_code=200, content=unregistered(name, number, deleted))

    @app.put("/models/{model}")
    async def update_model(model: str, request: Request) -> Any:
        query = dict(request.query_params)
        done = await asyncio.to_thread(scaled, server(), model, None, query)
        if done is not None:
            return JSONResponse(status_code=done[0], content=done[1])
        refuse_scaling(model, request.query_params, manager())
        fields = await json_object(request)
        config = manager().update_config(check_model_name(model), fields)
        return config.to_triton_json()

    @app.post("/v2/repository/index")
    async def repository_index(request: Request) -> list[dict[str, Any]]:
        body = await json_object(request, required=False)
        ready = body.get("ready", False)
        if not isinstance(ready, bool):
            raise InvalidInput('"ready" must be true or false')
        return [_index_entry(e) for e in manager().index(ready_only=ready)]

    @app.post("/v2/repository/models/{model}/load")
    async def load(model: str, request: Request) -> dict[str, Any]:
        body = await json_object(request, required=False)
        load_model(manager(), check_model_name(model), body)
        return {}

    @app.post("/v2/repository/models/{model}/unload")
    async def unload(model: str, request: Request) -> dict[str, Any]:
        await json_object(request, required=False)
        manager().unload(check_model_name(model))
        return {}

    document_api(app, bodies=management_bodies())
    return app


def _limit(text: str | None) -> int:
    """``limit``: empty or absent is the default (TorchServe's ``limit=``), else an integer."""
    if not text:
        return DEFAULT_PAGE
    # digits only: int() would take " 5", "+5" and "1_0" too, which the document refuses
    if not re.fullmatch("-?[0-9]{1,18}", text):
        raise InvalidInput(f"limit must be an integer (1-{MAX_PAGE}), got {text!r}")
    return int(text)


def load_model(manager: ModelManager, name: str, body: dict[str, Any]) -> None:
    """Triton's load; every refusal starts "failed to load '<m>'" as Triton's clients expect."""
    try:
        manager.load(name, _config_parameter(body))
    except (InvalidInput, ModelNotFound) as exc:
        if exc.message.startswith("failed to load"):
            raise
        raise type(exc)(f"failed to load '{name}': {exc.message}") from None


def _config_parameter(body: dict[str, Any]) -> dict[str, Any] | None:
    """Triton's load takes ``{"parameters": {"config": "<model config JSON string>"}}``."""
    parameters = body.get("parameters") or {}
    if not isinstance(parameters, dict):
        raise InvalidInput(
            '"parameters" must be an object, e.g. {"parameters": {"config": "{...}"}}'
        )
    files = sorted(k for k in parameters if isinstance(k, str) and k.startswith("file:"))
    if files:
        shown = files[0] if len(files[0]) <= 60 else files[0][:60] + "..."
        raise InvalidInput(
            f"Triton's file override ({shown!r}) is not supported: models are published by "
            "uploading their files to the model bucket (models/<model>/<version>/...)"
        )
    raw = parameters.get("config")
    if raw is None:
        return None
    fields = json_document(raw.encode(), "parameters.config") if isinstance(raw, str) else raw
    if not isinstance(fields, dict):
        raise InvalidInput("parameters.config must be a JSON object in Triton's config form")
    return fields


_ENGINES = {
    ONNX_RUNTIME: "OnnxRuntime",
    TORCHSCRIPT_RUNTIME: "Torch",
    PYTHON_RUNTIME: "Python",
    HANDLER_RUNTIME: "Python",
    PIPELINE_RUNTIME: "Python",
    ENSEMBLE_RUNTIME: "Ensemble",
}


def describe_answer(
    manager: ModelManager,
    model: str,
    version: str | None,
    customized: bool = False,
    server: ModelServer | None = None,
    *,
    rollouts: list[dict[str, Any]] | None = None,
) -> list[dict[str, Any]]:
    """TorchServe's describe: every version (``version`` None), or one by number or label;
    with the versions' live workers where ``server`` runs them, and the model's
    ``rollouts`` that move each version."""
    refuse_customized(customized)
    name = check_model_name(model)
    if version is None:
        view = manager.view(name)
        records = _described(view, manager)
    else:
        view, record = manager.version(name, manager.version_number(name, version))
        records = (record,)
    described = [
        describe_version_record(view, r, manager) | worker_fields(server, name, r.version)
        for r in records
    ]
    if rollouts is not None:
        for entry, record in zip(described, records, strict=True):
            entry["rollouts"] = rollouts_of(rollouts, record.version)
    return described


def refuse_customized(customized: bool) -> None:
    """TorchServe's ``customized=true`` runs the handler's ``describe_handle``: model code,
    which runs only where models serve, never beside the management API."""
    if customized:
        raise InvalidInput(
            "customized=true runs the handler's describe_handle, and model code runs only "
            "where models serve, not in the management API: describe without it (the "
            "archive's modelVersion, handler and batch settings are in the answer)"
        )


def _labelled(
    manager: ModelManager, model: str, label: str, version: str | None, body: dict[str, Any]
) -> dict[str, Any]:
    """``PUT /models/{m}/labels/{l}``: one version (``?version=2`` or ``{"version": 2}``), or
    weights (``{"versions": {"1": 90, "2": 10}}``: they replace the label's)."""
    if version is None and "versions" in body:
        return _weigh(manager, model, label, body)
    raw = version if version is not None else body.get("version")
    if raw is None:
        raise InvalidInput(
            f"say which version: PUT /models/{model}/labels/{label}?version=2, a body "
            '{"version": 2}, or weights {"versions": {"1": 90, "2": 10}}'
        )
    number = parse_version(str(raw))
    manager.set_label(model, label, number)
    return {"status": f'Label "{label}" of model "{model}" now points at version {number}'}


def _weigh(manager: ModelManager, model: str, label: str, body: dict[str, Any]) -> dict[str, Any]:
    """A weighted label set from its PUT body (catalog/label_weights.py says how it routes)."""
    weights = parse_label_weights(body)
    manager.set_label_weights(model, label, weights)
    shares = ", ".join(f"version {v}: {w}" for v, w in weights.versions)
    sticky = f", sticky on {weights.sticky}" if weights.sticky else ""
    return {"status": f'Label "{label}" of model "{model}" now weighs {shares}{sticky}'}


def _described(view: ModelView, manager: ModelManager) -> tuple[VersionRecord, ...]:
    """The versions describe lists; a config alone is a 404 saying where versions go."""
    if not view.versions:
        raise ModelNotFound(
            f"model {view.record.name!r} has a config but no versions: upload a version "
            f"directory, e.g. {manager.repository.url(view.record.name, 1)}model.onnx"
        )
    return view.versions


def describe_version_record(
    view: ModelView, record: VersionRecord, manager: ModelManager
) -> dict[str, Any]:
    """One version as TorchServe's describe-model answer lists it (and lambdaserve's facts)."""
    batching = view.config.dynamic_batching
    labels = sorted(k for k, v in view.record.version_labels.items() if v == record.version)
    return {
        "modelName": view.record.name,
        # a TorchServe archive's modelVersion ("1.0") is a label on its version
        "modelVersion": version_string(view, record.version),
        "modelUrl": manager.repository.url(view.record.name, record.version),
        "runtime": record.runtime,
        # TorchServe's describe fields: serverless, so no standing workers (min 0, and the
        # ceiling is the function's concurrency, not a worker count)
        "engine": _ENGINES.get(record.runtime, record.runtime),
        "minWorkers": 0,
        "maxWorkers": 0,
        "loadedAtStartup": False,
        # One entry while the version serves, as a TorchServe script reads readiness
        # (workers[0].status == "READY"): the serving side loads it on demand, wherever it runs
        "workers": _workers(record),
        "state": record.state,
        "reason": record.reason,
        "isDefault": record.version == view.default_version,
        "labels": labels,
        # weighted labels naming this version, each with every version's weight
        "weightedLabels": {
            label: weights
            for label, weights in sorted(view.record.label_weights.items())
            if str(record.version) in weights["versions"]
        },
        # p50/p99 of its cold starts' phases, wherever it loaded ({} before its first load)
        "coldStart": summary(manager.cold_starts(view.record.name, record.version)),
        "signature": record.signature,
        "sha256": record.sha256,
        "size": record.size,
        "files": list(record.files),
        # The Python environment its requirements file built ({}: none)
        "environment": record.environment,
        "createdAt": record.created_at,
        "updatedAt": record.updated_at,
        "validatedAt": record.validated_at,
        "versionPolicy": view.config.version_policy.to_triton_json(),
        "loaded": not view.record.unloaded,
        # TorchServe's queue of a model's jobs: this API sees no queue (each request is
        # queued where it serves, by the dynamic batcher of `serve` or the function's own
        # concurrency), so nothing is pending here and the capacity is the config's bound
        "jobQueueStatus": {
            "remainingCapacity": _queue_capacity(view),
            "pendingRequests": 0,
        },
        "batchSize": max(view.config.max_batch_size, 1),
        "maxBatchDelay": (batching.max_queue_delay_microseconds / 1000) if batching else 0,
        "configSource": view.record.config_source,
        "configError": view.config_error,
        "configRejected": view.record.rejected_config,
        "configWarnings": list(view.record.config_warnings),
        "preload": view.record.preload,
        "notes": record.notes,
    }


_VERSION_STRING = re.compile(r"^[0-9]+(\.[0-9]+)*$")
# TorchServe's default job_queue_size: the capacity shown where the config sets no bound
_TORCHSERVE_QUEUE = 100


def _queue_capacity(view: ModelView) -> int:
    batching = view.config.dynamic_batching
    bound = batching.queue_policy.max_queue_size if batching else 0
    return bound or _TORCHSERVE_QUEUE


def version_string(view: ModelView, number: int) -> str:
    """The version as TorchServe names it: the archive's ``modelVersion`` label ("1.0") on
    ``number`` where there is one, else the number."""
    labels = sorted(k for k, v in view.record.version_labels.items() if v == number)
    return next((k for k in labels if _VERSION_STRING.match(k)), str(number))


def set_default_status(manager: ModelManager, name: str, number: int) -> str:
    """TorchServe's answer to set-default, with its version string."""
    shown = version_string(manager.view(name), number)
    return f'Default version successfully updated for model "{name}" to "{shown}"'


def _workers(record: VersionRecord) -> list[dict[str, Any]]:
    if record.state != "READY":
        return []
    return [
        {
            "id": "on-demand",
            "startTime": record.validated_at,
            "status": "READY",
            "memoryUsage": 0,
            "pid": 0,
            "gpu": False,
            "gpuUsage": "N/A",
        }
    ]


def _index_entry(entry: IndexEntry) -> dict[str, Any]:
    """Triton's four keys, and the config fields a READY version does not apply."""
    shaped: dict[str, Any] = {
        "name": entry.name,
        "version": str(entry.version),
        "state": entry.state,
        "reason": entry.reason,
    }
    if entry.warnings:
        shaped["warnings"] = list(entry.warnings)
    return shaped
