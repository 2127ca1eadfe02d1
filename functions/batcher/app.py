"""batcher function: SAM handler ``app.handler`` (SQS event source on the requests queue)."""

from __future__ import annotations

from lambdaserve.handlers.batcher import handler

__all__ = ["handler"]
