"""The v2 infer call from request bytes to response bytes, for every door (the FastAPI
route, the ASGI front door, the Lambda handler's direct path): nothing here imports
FastAPI, so the direct path starts without it."""

from __future__ import annotations

import re

from lambdaserve.errors import PayloadTooLarge
from lambdaserve.protocol.limits import header_int
from lambdaserve.protocol.raw_binary import parse_raw_binary
from lambdaserve.protocol.v2 import (
    EncodedResponse,
    InferRequest,
    encode_infer_response,
    parse_infer_request,
)
from lambdaserve.serving.model_server import ModelServer

V2_INFER = re.compile(r"^/v2/models/([^/]+)(?:/versions/([^/]+))?/infer$")


def v2_infer(
    server: ModelServer, model: str, version: int | None, body: bytes, header_length: int | None
) -> EncodedResponse:
    """One v2 inference from request bytes to response bytes (any transport)."""
    parsed = parse_for(server, model, version, body, header_length)
    return server.infer(
        model,
        version,
        parsed,
        lambda served, outputs: encode_infer_response(
            served.model, served.version, parsed, outputs
        ),
    )


def parse_for(
    server: ModelServer, model: str, version: int | None, body: bytes, header_length: int | None
) -> InferRequest:
    if header_length == 0:  # Triton's raw binary request: the body is the one input's data
        served = server.resolver.resolve(model, version)
        return parse_raw_binary(
            body, served.signature.inputs, model, batched=served.config.max_batch_size > 0
        )
    return parse_infer_request(body, header_length)


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
