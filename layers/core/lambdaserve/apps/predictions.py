"""TorchServe's inference API: ``POST``/``PUT /predictions/{model}[/{version}]``.

JSON bodies map onto tensors as before. Raw bodies (``curl -T kitten.jpg``) and multipart
fields (``curl -F data=@kitten.jpg``) reach handlers and BYTES-input models as they came.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Awaitable, Callable
from typing import Any, TypeVar

import orjson
from fastapi import FastAPI, Request, Response
from starlette.datastructures import Headers, UploadFile
from starlette.formparsers import MultiPartException, MultiPartParser

from lambdaserve.apps.workflows import install_workflow_predictions
from lambdaserve.config.runtime_names import HANDLER_RUNTIME
from lambdaserve.errors import InvalidInput
from lambdaserve.protocol import torchserve
from lambdaserve.protocol.names import check_model_name
from lambdaserve.runtimes.torchserve.context import SEQUENCE_ID_HEADER
from lambdaserve.serving.capture.capture_offers import JSON, offer, offer_served
from lambdaserve.serving.data_plane import InferenceDataPlane
from lambdaserve.serving.raw_predictions import (
    RawRequest,
    explain_raw,
    handler_sequence,
    takes_raw,
)

T = TypeVar("T")
Call = Callable[[str, "int | None", Callable[[], Any]], Awaitable[Any]]
_JSON_TYPES = ("application/json", "text/json")


def install_predictions(
    app: FastAPI, plane: InferenceDataPlane, read_body: Callable[[Request], Awaitable[bytes]]
) -> None:
    server, call, number_of = plane.server, plane.call, plane.version_number

    async def answer_prediction(
        model_text: str, version_text: str | None, body: bytes, headers: dict[str, str]
    ) -> Response:
        """One prediction; ``headers`` with lower-case names. The app's route and the front
        door (``processes.asgi.front_door``) both answer through it."""
        model = check_model_name(model_text)
        # TorchServe's string versions ("1.0") are version labels here
        number = await number_of(model, version_text)
        content_type = headers.get("content-type", "").lower()
        fields = (
            await _form_fields(Headers(headers), body)
            if content_type.startswith("multipart/form-data")
            else None
        )

        served = await plane.served(model, number)
        if (
            fields is not None
            or (takes_raw(served) and not _is_json(content_type, served))
            or _is_binary(content_type)
        ):
            sequence = (
                await call(model, number, lambda: handler_sequence(server(), served, headers))
                if served.record.runtime == HANDLER_RUNTIME
                else None
            )
            sent = headers if sequence is None else {**headers, SEQUENCE_ID_HEADER: sequence}
            raw = RawRequest(fields or (("body", _body(body, content_type)),), sent)
            answer = await plane.predict_raw(served, raw)
            # TorchServe answers a sequence's id, so a client can send the next step with it
            echoed = None if sequence is None else {SEQUENCE_ID_HEADER: sequence}
            if answer.status < 300:
                sent_type = content_type or "application/octet-stream"
                offer_served(
                    plane.capture, served, (body, sent_type), (answer.body, answer.content_type)
                )
            return Response(
                answer.body, answer.status, headers=echoed, media_type=answer.content_type
            )
        # tensors: through the dynamic batcher where there is one (serve), as v2 infer
        prediction = torchserve.parse_prediction(body, served.signature.inputs)
        inferred = await plane.infer(model, number, prediction.request)
        payload = torchserve.encode_prediction(inferred.outputs, prediction.single_instance)
        if plane.capture is not None:
            request = (body, content_type or JSON)
            await offer(
                plane, model, inferred.version, request, (payload, JSON), served=inferred.served
            )
        return Response(payload, media_type="application/json")

    async def predictions(request: Request) -> Response:
        body = await read_body(request)
        headers = {k.lower(): v for k, v in request.headers.items()}
        return await answer_prediction(
            request.path_params["model"], request.path_params.get("version"), body, headers
        )

    app.state.answer_prediction = answer_prediction  # the front door's way in

    async def explanations(request: Request) -> Response:
        """TorchServe's explanations API: the handler's ``explain_handle`` (BaseHandler's
        reads the ``explain`` request header TorchServe's frontend sets)."""
        model = check_model_name(request.path_params["model"])
        number = await number_of(model, request.path_params.get("version"))
        body = await read_body(request)
        fields = await raw_fields(request, body)
        headers = {k.lower(): v for k, v in request.headers.items()} | {"explain": "True"}

        def run() -> Response:
            raw = RawRequest(fields, headers)
            answer = explain_raw(server(), model, number, raw)
            if answer.status < 300 and plane.capture is not None:
                served = plane.resolve_now(model, number)
                sent = headers.get("content-type") or "application/octet-stream"
                offer_served(
                    plane.capture, served, (body, sent), (answer.body, answer.content_type)
                )
            return Response(answer.body, answer.status, media_type=answer.content_type)

        result: Response = await call(model, number, run)
        return result

    for path in ("/predictions/{model}", "/predictions/{model}/{version}"):
        # PUT is what `curl -T file` sends, as TorchServe's documentation uses it.
        app.add_route(path, predictions, methods=["POST", "PUT"])
    for path in ("/explanations/{model}", "/explanations/{model}/{version}"):
        app.add_route(path, explanations, methods=["POST", "PUT"])
    install_workflow_predictions(app, plane, read_body, raw_fields)


async def raw_fields(request: Request, body: bytes) -> tuple[tuple[str, Any], ...]:
    """TorchServe's data row of a request: its multipart fields, or its body."""
    content_type = request.headers.get("content-type", "").lower()
    if content_type.startswith("multipart/form-data"):
        return await _form_fields(request.headers, body)
    return (("body", _body(body, content_type)),)


def _is_json(content_type: str, served: Any) -> bool:
    """A handler gets a JSON body parsed; a BYTES model gets raw bytes unless it is JSON."""
    return served.record.runtime != HANDLER_RUNTIME and content_type.startswith(_JSON_TYPES)


def _is_binary(content_type: str) -> bool:
    """Declared as something other than text (``image/jpeg``, ``application/octet-stream``):
    never parsed as JSON, whatever the model (curl -d and -T declare text or nothing)."""
    textual = (*_JSON_TYPES, "text/", "application/x-www-form-urlencoded")
    return bool(content_type) and not content_type.startswith(textual)


def _body(body: bytes, content_type: str) -> Any:
    if content_type.startswith(_JSON_TYPES):
        try:
            return orjson.loads(body)
        except orjson.JSONDecodeError as exc:
            raise InvalidInput(f"the request says JSON but is not: {exc}") from None
    return bytearray(body)


async def _form_fields(headers: Headers, body: bytes) -> tuple[tuple[str, Any], ...]:
    async def stream() -> AsyncGenerator[bytes, None]:
        yield body

    try:
        form = await MultiPartParser(headers, stream(), max_part_size=len(body) + 1).parse()
    except MultiPartException as exc:
        raise InvalidInput(f"the multipart body cannot be read: {exc.message}") from None
    fields: list[tuple[str, Any]] = []
    for name, value in form.multi_items():
        if isinstance(value, UploadFile):
            fields.append((name, bytearray(await value.read())))
            await value.close()
        else:
            fields.append((name, bytearray(value.encode())))
    if not fields:
        raise InvalidInput("the multipart body has no fields; send the data as -F data=@file")
    return tuple(fields)
