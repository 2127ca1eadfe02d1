"""Reading JSON request bodies with 400s that say what is wrong."""

from __future__ import annotations

from typing import Any

from fastapi import Request

from lambdaserve.errors import InvalidInput
from lambdaserve.protocol.limits import json_document


async def json_object(request: Request, *, required: bool = True) -> dict[str, Any]:
    """The body as a JSON object; an empty body is ``{}`` unless ``required``."""
    raw = await request.body()
    if not raw.strip():
        if required:
            raise InvalidInput("the request body is empty; send a JSON object")
        return {}
    body = json_document(raw)
    if not isinstance(body, dict):
        raise InvalidInput(f"the request body must be a JSON object, got {type(body).__name__}")
    return body
