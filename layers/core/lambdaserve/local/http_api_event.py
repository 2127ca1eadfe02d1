"""API Gateway HTTP API (payload 2.0) events, for invoking the HTTP handlers in-process as
API Gateway would (benchmarks of the Lambda path). Standard library only, so importing it
adds nothing to a cold-start measurement."""

from __future__ import annotations

import uuid
from typing import Any


def http_api_event(
    method: str, path: str, body: bytes, content_type: str = "application/json"
) -> dict[str, Any]:
    """One request's event, as a ``$default`` route on the ``$default`` stage delivers it."""
    return {
        "version": "2.0",
        "routeKey": "$default",
        "rawPath": path,
        "rawQueryString": "",
        "headers": {"content-type": content_type, "content-length": str(len(body))},
        "requestContext": {
            "http": {
                "method": method,
                "path": path,
                "protocol": "HTTP/1.1",
                "sourceIp": "127.0.0.1",
                "userAgent": "bench",
            },
            "requestId": str(uuid.uuid4()),
            "routeKey": "$default",
            "stage": "$default",
            "accountId": "123456789012",
            "apiId": "bench",
            "domainName": "bench",
            "domainPrefix": "bench",
            "time": "21/Nov/2026:14:06:02 +0000",
            "timeEpoch": 0,
        },
        "body": body.decode(),
        "isBase64Encoded": False,
    }
