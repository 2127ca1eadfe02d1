"""TorchServe's management calls that have a different answer here, answered clearly
instead of 404/405: registration from a URL, scaling workers, unregistering a model, and
``OPTIONS /`` (the API description)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from starlette.convertors import StringConvertor, register_url_convertor

from lambdaserve.apps.worker_scaling import scaled
from lambdaserve.errors import InvalidInput, ModelNotReady
from lambdaserve.protocol.names import RESERVED_LABELS, check_model_name
from lambdaserve.publishing.management import ModelManager

if TYPE_CHECKING:  # the management function imports no serving code
    from lambdaserve.serving.model_server import ModelServer


class VersionSegment(StringConvertor):
    """``{version:version}`` in /models/{m}/{version}...: any segment but ``all``, which is
    TorchServe's GET /models/{m}/all; so PUT or DELETE there is a 405 that allows GET, not a
    call on a version called "all"."""

    regex = "".join(f"(?!{label}(?:/|$))" for label in sorted(RESERVED_LABELS)) + "[^/]+"


register_url_convertor("version", VersionSegment())

# Query parameters of TorchServe's `PUT /models/{m}` (scale workers).
SCALING = frozenset({"min_worker", "max_worker", "number_gpu", "synchronous", "timeout"})


def install_api_description(app: FastAPI) -> None:
    """TorchServe's ``OPTIONS /``: the API description (here the OpenAPI document)."""

    async def describe(request: Request) -> JSONResponse:
        return JSONResponse(app.openapi())

    app.add_route("/", describe, methods=["OPTIONS"], include_in_schema=False)
    # TorchServe's other door to the same description, on both of its APIs
    app.add_route("/api-description", describe, methods=["GET"], include_in_schema=False)


def install_torchserve_management(
    app: FastAPI,
    manager: Callable[[], ModelManager],
    server: Callable[[], ModelServer | None] = lambda: None,
) -> None:
    @app.post("/models", status_code=400)
    async def register(request: Request) -> None:
        raise registration_refusal(request.query_params.get("url", ""))

    @app.put("/models/{model}/{version:version}", status_code=400)
    def scale_version(model: str, version: str, request: Request) -> JSONResponse:
        """TorchServe's per-version scaling (its only use of this route)."""
        done = scaled(server(), model, version, dict(request.query_params))
        if done is not None:
            return JSONResponse(status_code=done[0], content=done[1])
        refuse_scaling(model, request.query_params, manager(), version)
        raise InvalidInput("there are no workers to scale")  # refuse_scaling always raises

    @app.delete("/models/{model}", status_code=200)
    def unregister(model: str) -> JSONResponse:
        """TorchServe unregisters the default version: its objects are deleted here. 200 as
        TorchServe answers it: the objects are gone when it answers (the catalog follows)."""
        name = check_model_name(model)
        default = manager().view(name).default_version
        if default is None:
            raise ModelNotReady(f"model {name!r} has no default (READY) version to delete")
        deleted = manager().delete_version(name, default)
        return JSONResponse(status_code=200, content=unregistered(name, default, deleted))


_ARCHIVES = (".mar", ".war", ".tar.gz", ".tgz")


def registration_refusal(url: str = "") -> InvalidInput:
    """Why ``POST /models?url=...`` registers nothing, and how to publish ``url`` instead."""
    name = url.rsplit("/", 1)[-1]
    if name.lower().endswith(_ARCHIVES) and "://" not in url:
        # TorchServe's model-store habit: the archive by its file name
        return InvalidInput(
            f"the model bucket has no archive {name!r} to register: models load only from "
            "the bucket, and an archive there publishes itself (its manifest's modelVersion "
            f"becomes a version label). Upload the archive: `aws s3 cp {name} "
            f"s3://<ModelBucketName>/models/{name}` (with `lambdaserve dev "
            "--model-repository DIR`, put it in DIR), then GET /models/<name> shows it READY"
        )
    if name.lower().endswith(_ARCHIVES):
        return InvalidInput(
            f"registering {url!r} is not supported: lambdaserve loads models only from its own "
            f"bucket. Download the archive and upload it: `aws s3 cp {name} "
            f"s3://<ModelBucketName>/models/{name}`; it publishes itself there"
        )
    return InvalidInput(
        "registering a model from a URL is not supported: lambdaserve loads models only "
        "from its own bucket. Publish by upload instead, e.g. "
        "`aws s3 cp model.onnx s3://<ModelBucketName>/models/<name>/1/model.onnx` "
        "(Triton's repository layout); the version serves once it is READY"
    )


def refuse_scaling(
    model: str, query: Any, manager: ModelManager, version: str | None = None
) -> None:
    """TorchServe's `PUT /models/{m}[/{v}]?min_worker=..`: no workers to scale here; say what
    is. An unknown model or version is a 404 first, as TorchServe answers it."""
    asked = sorted(SCALING & set(query))
    if not asked and version is None:
        return
    name = check_model_name(model)
    if version is None:
        manager.view(name)
    else:
        manager.version(name, manager.version_number(name, version))
    raise InvalidInput(
        f"{', '.join(asked) or 'scaling a version'}: there are no workers to scale for "
        f"{model!r}. Deployed, the infer function scales per request (set reserved or "
        "provisioned concurrency on InferFunction for a floor or a ceiling); with "
        "`lambdaserve serve`, use --workers. PUT /models/{m} here takes model-config fields "
        "as JSON"
    )


def unregistered(model: str, version: int, deleted: int) -> dict[str, Any]:
    """TorchServe's answer to an unregister, with what was removed beside it."""
    return {
        "status": f'Model "{model}" unregistered',
        "detail": f"version {version}: {deleted} objects removed; the catalog follows through "
        "repository events",
        "deletedObjects": deleted,
    }
