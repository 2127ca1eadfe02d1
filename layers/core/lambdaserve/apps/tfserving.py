"""TF Serving's REST API on the inference port: model status, metadata (every signature),
``:predict`` to any signature, ``:classify`` and ``:regress`` with ``examples``
(``/v1/models/{m}[/versions/{v}|/labels/{l}]``), over the same domain calls as v2."""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any

import orjson
from fastapi import FastAPI, Request, Response

from lambdaserve.apps.tf_signatures import examples_results, named_signature, run_named
from lambdaserve.errors import ModelNotFound
from lambdaserve.protocol import tf_examples, tfserving
from lambdaserve.protocol.limits import json_document
from lambdaserve.protocol.names import check_model_name, parse_version
from lambdaserve.serving import signatures
from lambdaserve.serving.capture.capture_offers import JSON, offer_served
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
            defs = await plane.call(
                model, served.version, partial(signatures.signature_defs, plane.server(), served)
            )
            return tfserving.metadata(model, served.version, defs)
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
        """``POST /v1/models/{target}`` (``:predict``, ``:classify``, ``:regress``); ``body``
        reads the request body (after the path is checked). The app's route and the front
        door (``processes.asgi.front_door``) both answer through it."""
        match = _parse(target)
        verb = (match["what"] or "").lstrip(":")
        if verb not in ("predict", "classify", "regress"):
            raise ModelNotFound(f"POST /v1/models/{target}: use .../{match['model']}:predict")
        model, number = match["model"], await version_of(match)
        sent = await body()
        document = json_document(sent)
        name = tfserving.signature_name(document)
        if verb == "predict":
            served, named = await named_signature(plane, model, number, name)
            parsed = tfserving.parse_predict(document, named.signature)
            outputs = await run_named(
                plane, model, number, served=served, named=named, request=parsed.request
            )
            answer = tfserving.encode_predict(outputs, parsed.format, parsed.added_dims)
        else:
            examples = tf_examples.serialized_examples(document)
            served, _, answer = await examples_results(
                plane, model, number, name=name, verb=verb, examples=examples
            )
        encoded = orjson.dumps(answer)
        offer_served(plane.capture, served, (sent, JSON), (encoded, JSON))
        return Response(encoded, media_type=JSON)

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
