"""Typed domain errors. The domain raises these; apps map them to status codes."""

from __future__ import annotations

import re

# A C++ source location and the function it names, as runtimes put them in their messages
# (`/onnxruntime_src/onnxruntime/core/graph/model.cc:256 onnxruntime::Model::Model(...)`).
_SOURCE = re.compile(
    r"/?(?:[\w.+-]+/)*[\w.+-]+\.(?:cc|cpp|cxx|c|h|hpp):\d+\s+"
    r"(?:[\w:~]+(?:<[^>]*>)?\((?:[^()]|\([^()]*\))*\)\s*)?"
)
# An absolute path (a scratch directory, a library's install path): its last part is enough.
_PATH = re.compile(r"(?<![\w.:/])/(?:[^\s/:'\"]+/)+([^\s/:'\"]+)")


def first_line(exc: BaseException, limit: int = 300) -> str:
    """The first line of an exception's text (runtimes write pages), at most ``limit`` long,
    without the runtime's source locations or the paths of this machine: a reason says what
    is wrong with the model, not where our libraries were built or our scratch space is."""
    lines = str(exc).strip().splitlines()
    if not lines:
        return type(exc).__name__
    return _PATH.sub(r"\1", _SOURCE.sub("", lines[0]))[:limit]


class LambdaServeError(Exception):
    """Base class of every error the domain raises on purpose. ``headers``: response headers
    the answer carries (an unsupported Content-Encoding names the ones that are read)."""

    headers: tuple[tuple[str, str], ...] = ()

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class InvalidInput(LambdaServeError):
    """The request is malformed or does not fit the model."""


class UnsupportedEncoding(InvalidInput):
    """A request body in a Content-Encoding this server does not decode."""

    headers = (("accept-encoding", "gzip, deflate"),)


class ModelNotFound(LambdaServeError):
    """No such model or version in the catalog."""


class ModelNotReady(LambdaServeError):
    """The model or version exists but is not serving."""


class ModelCodeFailed(ModelNotReady):
    """The model's own code (a handler, a Python model) failed to load where it serves: a
    fact about the version, reported back to the catalog so it is not READY."""


class ModelTooLarge(ModelNotReady):
    """The version needs more memory than this process's residency budget holds, even with
    every other version unloaded: a fact about the version where it serves, reported back to
    the catalog (UNAVAILABLE with its size and the budget) so it is not READY."""


class LoadRefused(ModelCodeFailed):
    """The version cannot load where it serves as its config asks (Triton's rate limiter:
    an instance needs more of a resource than ``--rate-limit-resource`` gives)."""


class Conflict(LambdaServeError):
    """The request is valid but contradicts the current state."""


class PayloadTooLarge(LambdaServeError):
    """The request body is over the configured limit."""


class InferenceError(LambdaServeError):
    """The runtime failed while executing a valid request."""


class ModelCodeCrashed(InferenceError):
    """The model's code died in its worker process (a signal, an exit): the requests it held
    are answered with this once; the worker is restarted."""


class ModelCodeTimedOut(InferenceError):
    """The model's code held a request past its timeout (TorchServe's ``responseTimeout``):
    its worker is killed and restarted."""


class ModelRejected(LambdaServeError):
    """A published version failed validation; the message says what to fix."""


class RuntimeMissing(ModelRejected):
    """The runtime a version needs is not installed here: a fact about the environment."""


class StorageUnavailable(LambdaServeError):
    """A store the request depends on failed; trying the same request later may work."""


class ModelControlDisabled(LambdaServeError):
    """Explicit load / unload on a server whose models follow the repository alone."""


class SettingFixed(LambdaServeError):
    """A setting only the command line sets, asked to change through the API (Triton's
    UNSUPPORTED: HTTP 501, gRPC UNIMPLEMENTED)."""


class RequestTimeout(LambdaServeError):
    """The client did not send its request in time."""


class QueueRejected(LambdaServeError):
    """The model's queue policy refused the request (its queue was full, or the request
    waited past its timeout): the same request later may succeed."""
