"""The one v2 infer door: every transport (the FastAPI route, the long-running server's
ASGI front door, the infer function's direct Lambda path) answers
``POST /v2/models/{m}[/versions/{v}]/infer`` through ``read_v2_call`` (name, version text,
body limit, decoding, binary header length), a ``v2_infer``, and ``error_answer``. Nothing
here imports FastAPI, so the direct path starts without it."""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson

from lambdaserve.errors import LambdaServeError, PayloadTooLarge
from lambdaserve.protocol.content_encoding import decode_body
from lambdaserve.protocol.http_status import INTERNAL_ERROR, status_for
from lambdaserve.protocol.limits import header_int
from lambdaserve.protocol.names import check_model_name
from lambdaserve.protocol.raw_binary import parse_raw_binary
from lambdaserve.protocol.torchserve_errors import error_document
from lambdaserve.protocol.v2 import (
    HEADER_LENGTH,
    EncodedResponse,
    InferRequest,
    encode_infer_response,
    parse_infer_request,
)
from lambdaserve.serving.capture.capture_offers import offer_served
from lambdaserve.serving.data_plane import InferenceDataPlane
from lambdaserve.serving.version_resolver import ServedVersion

V2_INFER = re.compile(r"^/v2/models/([^/]+)(?:/versions/([^/]+))?/infer$")
JSON = "application/json"
logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class V2Call:
    """A v2 infer request as every door reads it, before the version is resolved."""

    model: str
    version_text: str | None
    body: bytes
    header_length: int | None


@dataclass(frozen=True)
class HttpAnswer:
    """Status, body and headers, for a transport to send as it sends things."""

    status: int
    body: bytes
    headers: dict[str, str] = field(default_factory=lambda: {"content-type": JSON})


def read_v2_call(
    model: str, version_text: str | None, headers: Mapping[str, str], body: bytes, limit: int
) -> V2Call:
    """The preamble every door shares. ``headers`` have lower-case names; ``body`` is what
    arrived (a door that streams checks the limit as it reads, this checks it again)."""
    check_body_size(len(body), limit)
    return V2Call(
        check_model_name(model),
        version_text or None,
        decode_body(body, headers.get("content-encoding"), limit),
        header_length_value(headers.get(HEADER_LENGTH.lower())),
    )


def encoded_answer(encoded: EncodedResponse) -> HttpAnswer:
    return HttpAnswer(
        200,
        encoded.body,
        {"content-type": JSON, **{k.lower(): v for k, v in encoded.headers.items()}},
    )


def error_answer(exc: Exception, method: str, path: str) -> HttpAnswer:
    """A domain error as its status and ``{"error": ...}`` (TorchServe's ErrorResponse on its
    routes); anything else logged, and 500 with the one internal-error text."""
    headers: dict[str, str] = {"content-type": JSON}
    if isinstance(exc, LambdaServeError):
        status, message = status_for(exc), exc.message
        headers.update(exc.headers)
    else:
        logger.error("unhandled error on %s %s", method, path, exc_info=exc)
        status, message = 500, INTERNAL_ERROR
    return HttpAnswer(status, orjson.dumps(error_document(path, status, message)), headers)


async def answer_v2(plane: InferenceDataPlane, call: V2Call) -> EncodedResponse:
    """A v2 call through the data plane (its dynamic batcher where it has one, its trace
    and its draining server's refusal of new sequences either way)."""
    version = await plane.version_number(call.model, call.version_text)
    model, body, header_length = call.model, call.body, call.header_length
    if header_length == 0:  # a raw binary request needs the model's signature: maybe I/O
        parsed = await asyncio.to_thread(parse_for, plane, model, version, body, header_length)
    else:
        parsed = parse_infer_request(body, header_length, plane.shared_memory)
    inferred = await plane.infer(model, version, parsed)
    encoded = encode_infer_response(
        model, inferred.version, parsed, inferred.outputs, plane.shared_memory
    )
    if plane.capture is not None:
        # inline when loaded (it just ran), else in a thread: no catalog read on the loop
        offer_capture(plane, await plane.served_for(inferred), call, encoded)
    return encoded


def answer_v2_now(plane: InferenceDataPlane, call: V2Call) -> EncodedResponse:
    """A v2 call run in this thread (the infer function: one request per instance)."""
    version = plane.number_now(call.model, call.version_text)
    return v2_infer(plane, call.model, version, call.body, call.header_length)


def v2_infer(
    plane: InferenceDataPlane,
    model: str,
    version: int | None,
    body: bytes,
    header_length: int | None,
) -> EncodedResponse:
    """One v2 inference from request bytes to response bytes, the model run in this thread."""
    parsed = parse_for(plane, model, version, body, header_length)

    def encoded(served: ServedVersion, outputs: Mapping[str, Any]) -> EncodedResponse:
        answer = encode_infer_response(
            served.model, served.version, parsed, outputs, plane.shared_memory
        )
        if plane.capture is not None:
            offer_capture(plane, served, V2Call(model, None, body, header_length), answer)
        plane.offer_shadow(model, parsed, served.version)
        return answer

    return plane.server().infer(model, version, parsed, encoded)


def offer_capture(
    plane: InferenceDataPlane, served: ServedVersion, call: V2Call, answer: EncodedResponse
) -> None:
    """The exchange to the plane's payload capture, where the version's config asks for it."""
    request_type = "application/octet-stream" if call.header_length is not None else JSON
    offer_served(
        plane.capture,
        served,
        (call.body, request_type),
        (answer.body, answer.headers.get("content-type", JSON)),
    )


def parse_for(
    plane: InferenceDataPlane,
    model: str,
    version: int | None,
    body: bytes,
    header_length: int | None,
) -> InferRequest:
    if header_length == 0:  # Triton's raw binary request: the body is the one input's data
        served = plane.resolve_now(model, version)
        return parse_raw_binary(
            body, served.signature.inputs, model, batched=served.config.max_batch_size > 0
        )
    return parse_infer_request(body, header_length, plane.shared_memory)


def check_body_size(size: int, limit: int) -> None:
    if size > limit:
        raise too_large(size, limit)


def too_large(size: int, limit: int) -> PayloadTooLarge:
    return PayloadTooLarge(
        f"request body is {size} bytes, over the {limit}-byte limit: a synchronous Lambda "
        "invocation takes 6 MB and API Gateway 10 MB; send fewer rows per request, or binary "
        "tensors (Inference-Header-Content-Length), which are about 4x smaller than JSON"
    )


def header_length_value(raw: str | None) -> int | None:
    """Inference-Header-Content-Length as an int, None when absent."""
    return header_int("Inference-Header-Content-Length", raw)
