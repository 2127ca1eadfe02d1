"""TF Serving's REST API on the inference port: model status, metadata and ``:predict``
(``/v1/models/{m}[/versions/{v}|/labels/{l}]``), over the same domain calls as v2."""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from typing import Any

import orjson
from fastapi import FastAPI, Request, Response

from lambdaserve.errors import InvalidInput, ModelNotFound
from lambdaserve.protocol import tfserving
from lambdaserve.protocol.limits import json_document
from lambdaserve.protocol.names import check_model_name, parse_version
from lambdaserve.serving.data_plane import InferenceDataPlane

# {m}, {m}/versions/{v} or {m}/labels/{l}, then /metadata or :verb
_TARGET = re.compile(
    r"^(?P<model>[^/:]+)(?:/versions/(?P<version>[^/:]+)|/labels/(?P<label>[^/:]+))?"
    r"(?P<what>/metadata|:predict|:classify|:regress)?$"
)


def install_tfserving(
    app: FastAPI, plane: InferenceDataPlane, read_body: Callable[[Request], Awaitable[bytes]]
) -> None:
    number_of = plane.version_number

    async def version_of(match: re.Match[str]) -> int | None:
        model = check_model_name(match["model"])
        if match["version"] is not None:
            return parse_version(match["version"])
        return await number_of(model, match["label"])

    @app.get("/v1/models/{target:path}")
    async def status_or_metadata(target: str) -> dict[str, Any]:
        match = _parse(target)
        model, number = match["model"], await version_of(match)
        if match["what"] == "/metadata":
            served = await plane.resolve_number(model, number)
            return tfserving.metadata(model, served.version, served.signature)
        if match["what"] is not None:
            raise ModelNotFound(f"GET /v1/models/{target} is not a TF Serving route; POST it")
        versions = await plane.versions(model)
        present = sorted(
            (v, r.state, r.reason) for v, r in versions.items() if r.present and number in (None, v)
        )
        if not present:
            what = f"version {number} of model {model}" if number else f"any versions of {model}"
            raise ModelNotFound(f"Could not find {what}")
        return tfserving.version_status(present)

    async def answer_predict(target: str, body: Callable[[], Awaitable[bytes]]) -> Response:
        """``POST /v1/models/{target}``; ``body`` reads the request body (after the path is
        checked). The app's route and the front door (``processes.asgi.front_door``) both
        answer through it."""
        match = _parse(target)
        verb = (match["what"] or "").lstrip(":")
        if verb in ("classify", "regress"):
            raise InvalidInput(
                f"the model has no {verb} signature (tensorflow/serving/{verb}); its "
                f'"{tfserving.SIGNATURE}" signature is a predict one: POST ...:predict'
            )
        if verb != "predict":
            raise ModelNotFound(f"POST /v1/models/{target}: use .../{match['model']}:predict")
        model, number = match["model"], await version_of(match)
        document = json_document(await body())

        # through the dynamic batcher where there is one (serve), as v2 infer
        served = await plane.served(model, number)
        parsed = tfserving.parse_predict(document, served.signature)
        inferred = await plane.infer(model, number, parsed.request)
        answer = tfserving.encode_predict(inferred.outputs, parsed.format)
        return Response(orjson.dumps(answer), media_type="application/json")

    @app.post("/v1/models/{target:path}")
    async def predict(target: str, request: Request) -> Response:
        return await answer_predict(target, lambda: read_body(request))

    app.state.answer_tfserving = answer_predict  # the front door's way in


def _parse(target: str) -> re.Match[str]:
    match = _TARGET.match(target)
    if match is None:
        raise ModelNotFound(
            f"/v1/models/{target} is not a TF Serving path: /v1/models/<model>"
            "[/versions/<n>|/labels/<label>][/metadata|:predict]"
        )
    return match
