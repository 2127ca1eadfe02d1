"""API Gateway's HTTP API events (payload 2.0) read and answered: headers, the body
(base64 when binary), and an ``HttpAnswer`` shaped as the Lambda response API Gateway takes."""

from __future__ import annotations

import base64
from typing import TYPE_CHECKING, Any

from aws_lambda_powertools.utilities.data_classes import APIGatewayProxyEventV2

from lambdaserve.apps.v2_calls import HttpAnswer
from lambdaserve.protocol.limits import response_too_large

if TYPE_CHECKING:
    from lambdaserve.forwarding.forwarder import HttpCall


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
