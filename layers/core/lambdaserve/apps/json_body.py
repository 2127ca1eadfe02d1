"""Reading JSON request bodies with 400s that say what is wrong."""

from __future__ import annotations

import json
from typing import Any

from fastapi import Request

from lambdaserve.errors import InvalidInput


async def json_object(request: Request, *, required: bool = True) -> dict[str, Any]:
    """The body as a JSON object; an empty body is ``{}`` unless ``required``."""
    raw = await request.body()
    if not raw.strip():
        if required:
            raise InvalidInput("the request body is empty; send a JSON object")
        return {}
    try:
        body = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise InvalidInput(f"the request body is not valid JSON: {exc}") from exc
    if not isinstance(body, dict):
        raise InvalidInput(f"the request body must be a JSON object, got {type(body).__name__}")
    return body
