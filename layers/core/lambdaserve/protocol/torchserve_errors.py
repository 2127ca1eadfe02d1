"""Error bodies on TorchServe's doors in TorchServe's ``ErrorResponse`` shape.

TorchServe answers every error as ``{"code": <status>, "type": "<Java exception>",
"message": "..."}`` and its clients and scripts read ``message`` (and ``type``). Triton's and
lambdaserve's own routes keep ``{"error": "..."}``, which the TorchServe body carries too, so
a client written against either shape reads the same answer.
"""

from __future__ import annotations

import re
from typing import Any

# TorchServe's inference and management routes (its /ping and /metrics answer no errors)
_DOORS = re.compile(r"^/(predictions|explanations|models|workflows|wfpredict|api-description)(/|$)")

# The exception names TorchServe's frontend puts in ``type`` for each status it answers
_TYPES = {
    400: "BadRequestException",
    404: "ModelNotFoundException",
    405: "MethodNotAllowedException",
    408: "RequestTimeoutException",
    409: "ConflictStatusException",
    413: "BadRequestException",
    415: "BadRequestException",
    429: "ServiceUnavailableException",
    501: "MethodNotAllowedException",
    503: "ServiceUnavailableException",
    504: "RequestTimeoutException",
    507: "InsufficientMemoryException",
}


def is_torchserve_door(path: str) -> bool:
    return _DOORS.match(path) is not None


def error_document(path: str, status: int, message: str) -> dict[str, Any]:
    """The error body for ``path``: TorchServe's shape on its doors, ``{"error"}`` elsewhere."""
    if not is_torchserve_door(path):
        return {"error": message}
    kind = _TYPES.get(status, "InternalServerException" if status >= 500 else "BadRequestException")
    return {"code": status, "type": kind, "message": message, "error": message}
