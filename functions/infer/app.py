"""infer function (container image).

Handlers: ``app.api_handler`` (API Gateway HTTP API) and ``app.batch_handler`` (the batcher).
"""

from __future__ import annotations

from lambdaserve.handlers.infer import api_handler, batch_handler

__all__ = ["api_handler", "batch_handler"]
