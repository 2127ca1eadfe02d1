"""One place that maps domain errors to gRPC status codes, as ``http_status`` does for HTTP."""

from __future__ import annotations

import grpc

from lambdaserve.errors import (
    Conflict,
    InferenceError,
    InvalidInput,
    LambdaServeError,
    ModelCodeTimedOut,
    ModelNotFound,
    ModelNotReady,
    ModelRejected,
    PayloadTooLarge,
    QueueRejected,
    RequestTimeout,
    SettingFixed,
    StorageUnavailable,
)

_CODES: dict[type[LambdaServeError], grpc.StatusCode] = {
    InvalidInput: grpc.StatusCode.INVALID_ARGUMENT,
    ModelRejected: grpc.StatusCode.INVALID_ARGUMENT,
    ModelNotFound: grpc.StatusCode.NOT_FOUND,
    Conflict: grpc.StatusCode.FAILED_PRECONDITION,
    RequestTimeout: grpc.StatusCode.DEADLINE_EXCEEDED,
    PayloadTooLarge: grpc.StatusCode.RESOURCE_EXHAUSTED,
    InferenceError: grpc.StatusCode.INTERNAL,
    ModelCodeTimedOut: grpc.StatusCode.DEADLINE_EXCEEDED,
    ModelNotReady: grpc.StatusCode.UNAVAILABLE,
    # the queue is full or the request waited past its timeout: try again later (Triton's
    # PolicyQueue answers UNAVAILABLE, and clients' retry loops look for it)
    QueueRejected: grpc.StatusCode.UNAVAILABLE,
    StorageUnavailable: grpc.StatusCode.UNAVAILABLE,
    SettingFixed: grpc.StatusCode.UNIMPLEMENTED,  # Triton's UNSUPPORTED
}


def code_for(error: LambdaServeError) -> grpc.StatusCode:
    """The gRPC status of a domain error (INTERNAL for an unmapped subclass)."""
    for kind in type(error).__mro__:
        if kind in _CODES:
            return _CODES[kind]
    return grpc.StatusCode.INTERNAL
