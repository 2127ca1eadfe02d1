"""One place that maps domain errors to HTTP status codes (no web framework needed)."""

from __future__ import annotations

from lambdaserve.errors import (
    Conflict,
    InferenceError,
    InvalidInput,
    LambdaServeError,
    ModelCodeTimedOut,
    ModelControlDisabled,
    ModelNotFound,
    ModelNotReady,
    ModelRejected,
    PayloadTooLarge,
    QueueRejected,
    RequestTimeout,
    SettingFixed,
    StorageUnavailable,
    UnsupportedEncoding,
)

_STATUS: dict[type[LambdaServeError], int] = {
    InvalidInput: 400,
    # Triton's answer (HTTP's 415 fits too): "not implemented", Accept-Encoding says what is
    UnsupportedEncoding: 501,
    ModelRejected: 400,
    ModelNotFound: 404,
    Conflict: 409,
    RequestTimeout: 408,
    PayloadTooLarge: 413,
    InferenceError: 500,
    ModelCodeTimedOut: 504,
    ModelNotReady: 503,
    QueueRejected: 503,
    StorageUnavailable: 503,
    SettingFixed: 501,  # Triton's UNSUPPORTED
    ModelControlDisabled: 503,  # Triton's status for it (UNAVAILABLE)
}


# The one text a client gets for an error we did not expect; the details go to the log.
INTERNAL_ERROR = "internal error; the server log has the details"


def status_for(error: LambdaServeError) -> int:
    """The HTTP status of a domain error (500 for an unmapped subclass)."""
    for kind in type(error).__mro__:
        if kind in _STATUS:
            return _STATUS[kind]
    return 500
