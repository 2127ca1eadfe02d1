"""infer function (container image).

Handlers: ``app.api_handler`` (API Gateway HTTP API), ``app.batch_handler`` (the batcher) and
``app.code_validator_handler`` (model code's auto_complete_config at publish).
"""

from __future__ import annotations

from typing import Any

from lambdaserve.handlers.infer import api_handler, batch_handler
from lambdaserve.handlers.snapstart import start_instance

__all__ = ["api_handler", "batch_handler", "code_validator_handler"]

start_instance()  # Lambda's init phase: SnapStart's hooks, or the clients and the runtime


def code_validator_handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    """The code-validator function's entry (imported here, not at the infer functions' init)."""
    from lambdaserve.handlers.code_validator import handler

    return handler(event, context)
