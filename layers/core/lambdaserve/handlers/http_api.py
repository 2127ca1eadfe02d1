"""API Gateway's HTTP API events (payload 2.0) read and answered: headers, the body
(base64 when binary), and an ``HttpAnswer`` shaped as the Lambda response API Gateway takes;
the infer function's answers without its ASGI app (forwarded to server mode, or v2 infer
through the one door). Imported by the first request, not by ``handlers.infer``'s import."""

from __future__ import annotations

import base64
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

from aws_lambda_powertools.utilities.data_classes import APIGatewayProxyEventV2

from lambdaserve.apps.v2_calls import (
    V2_INFER,
    HttpAnswer,
    answer_v2_now,
    encoded_answer,
    error_answer,
    read_v2_call,
)
from lambdaserve.protocol.limits import response_too_large
from lambdaserve.protocol.request_headers import forget, receive

if TYPE_CHECKING:
    from lambdaserve.forwarding.forwarder import HttpCall
    from lambdaserve.wiring.process import Process


def headers_of(event: APIGatewayProxyEventV2) -> dict[str, str]:
    # from the event's own dict: Powertools' ``headers`` builds a case-insensitive copy first
    raw: dict[str, str] = event.get("headers") or {}
    return {k.lower(): v for k, v in raw.items()}


def body_of(event: APIGatewayProxyEventV2) -> bytes:
    if event.is_base64_encoded:
        return base64.b64decode(event.body or "")
    return (event.body or "").encode()


def is_binary(answer: HttpAnswer) -> bool:
    return answer.headers.get("content-type", "application/json") != "application/json"


def lambda_answer(answer: HttpAnswer) -> dict[str, Any]:
    binary = is_binary(answer)
    return {
        "statusCode": answer.status,
        "headers": answer.headers,
        "body": base64.b64encode(answer.body).decode() if binary else answer.body.decode(),
        "isBase64Encoded": binary,
    }


def check_answer_size(answer: HttpAnswer, limit: int) -> None:
    """413 saying what to do when the answer would pass the synchronous limit (Lambda's
    6 MB), counted as it travels: base64 when binary."""
    size = len(answer.body)
    size = 4 * ((size + 2) // 3) if is_binary(answer) else size
    if limit and size > limit:
        raise response_too_large(size, limit)


def http_call_of(event: APIGatewayProxyEventV2) -> HttpCall:
    """The request as the server-mode forwarder sends it on."""
    from lambdaserve.forwarding.forwarder import HttpCall

    return HttpCall(
        event.request_context.http.method,
        event.raw_path,
        event.raw_query_string or "",
        headers_of(event),
        body_of(event),
    )


def answer_without_app(process: Process, event: dict[str, Any]) -> HttpAnswer | None:
    """The answer where the infer function gives one without its ASGI app: a server-mode
    model's request forwarded, or v2 infer; None for every other route."""
    parsed = APIGatewayProxyEventV2(event)
    return _forwarded(process, parsed) or _direct_infer(process, parsed)


def _forwarded(process: Process, event: APIGatewayProxyEventV2) -> HttpAnswer | None:
    """A request for a model that server mode serves, answered there (or queued)."""
    router = process.forwarder
    if router is None or event.get("version") != "2.0":
        return None
    call = http_call_of(event)
    try:
        answer = router.route(call)
    except Exception as exc:
        return error_answer(exc, call.method, event.raw_path)
    return None if answer is None else HttpAnswer(answer.status, answer.body, answer.headers)


def _direct_infer(process: Process, event: APIGatewayProxyEventV2) -> HttpAnswer | None:
    """``POST /v2/models/{m}[/versions/{v}]/infer`` through the one v2 door, without the
    ASGI stack (Mangum, middleware and routing cost several times a small model's run)."""
    if event.get("version") != "2.0" or event.request_context.http.method != "POST":
        return None
    headers = headers_of(event)
    match = V2_INFER.match(event.raw_path)
    if match is None or "respond-async" in headers.get("prefer", ""):
        return None  # async submission goes through the app
    settings = process.settings
    received = receive(headers)  # a weighted label's sticky header is read from them
    try:
        call = read_v2_call(
            unquote(match.group(1)),
            unquote(match.group(2) or ""),
            headers,
            body_of(event),
            settings.max_request_bytes,
        )
        answer = encoded_answer(answer_v2_now(process.plane, call))
        check_answer_size(answer, settings.max_response_bytes)
    except Exception as exc:
        return error_answer(exc, "POST", event.raw_path)
    finally:
        forget(received)
    return answer
