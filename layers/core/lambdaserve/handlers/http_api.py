"""API Gateway's HTTP API events (payload 2.0) read and answered: headers, the body
(base64 when binary), and an ``HttpAnswer`` shaped as the Lambda response API Gateway takes."""

from __future__ import annotations

import base64
from typing import Any

from aws_lambda_powertools.utilities.data_classes import APIGatewayProxyEventV2

from lambdaserve.apps.v2_calls import HttpAnswer


def headers_of(event: APIGatewayProxyEventV2) -> dict[str, str]:
    return {k.lower(): v for k, v in (event.headers or {}).items()}


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
