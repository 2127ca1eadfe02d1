"""Typed domain errors. The domain raises these; apps map them to status codes."""

from __future__ import annotations


def first_line(exc: BaseException, limit: int = 300) -> str:
    """The first line of an exception's text (runtimes write pages), at most ``limit`` long."""
    lines = str(exc).strip().splitlines()
    return lines[0][:limit] if lines else type(exc).__name__


class LambdaServeError(Exception):
    """Base class of every error the domain raises on purpose."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class InvalidInput(LambdaServeError):
    """The request is malformed or does not fit the model."""


class ModelNotFound(LambdaServeError):
    """No such model or version in the catalog."""


class ModelNotReady(LambdaServeError):
    """The model or version exists but is not serving."""


class Conflict(LambdaServeError):
    """The request is valid but contradicts the current state."""


class PayloadTooLarge(LambdaServeError):
    """The request body is over the configured limit."""


class InferenceError(LambdaServeError):
    """The runtime failed while executing a valid request."""


class ModelRejected(LambdaServeError):
    """A published version failed validation; the message says what to fix."""


class RuntimeMissing(ModelRejected):
    """The runtime a version needs is not installed here: a fact about the environment."""


class StorageUnavailable(LambdaServeError):
    """A store the request depends on failed; trying the same request later may work."""


class RequestTimeout(LambdaServeError):
    """The client did not send its request in time."""


class QueueRejected(LambdaServeError):
    """The model's queue policy refused the request (its queue was full, or the request
    waited past its timeout): the same request later may succeed."""
