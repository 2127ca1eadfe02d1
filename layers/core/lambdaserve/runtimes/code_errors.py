"""Model code's exceptions, logged for their author: the client gets the short message, the
log gets the traceback (the user's frames with ours) with the model, the version and the
request ids, so a handler's or Python model's ``file:line`` is never lost.

Request ids: the ones the caller knows (a v2 request's ``id``), set by the data plane around
a call; TorchServe's context ids where its worker code assigned them; else fresh ones, so a
log line can still be matched to the error a client reported.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar

from lambdaserve.errors import ModelCodeFailed, first_line

logger = logging.getLogger("lambdaserve.model_code")
_REQUEST_IDS: ContextVar[tuple[str, ...]] = ContextVar("model_code_request_ids", default=())


@contextmanager
def request_ids(ids: Sequence[str | None]) -> Iterator[None]:
    """The ids of the requests the code is about to be called with."""
    token = _REQUEST_IDS.set(tuple(i or "" for i in ids))
    try:
        yield
    finally:
        _REQUEST_IDS.reset(token)


def known_request_ids() -> tuple[str, ...]:
    """The caller's ids as set around this call (none generated: a worker gets them)."""
    return _REQUEST_IDS.get()


def current_request_ids(count: int, known: Sequence[str] = ()) -> tuple[str, ...]:
    """``known`` ids, else the caller's, else fresh ones (one per request)."""
    ids = tuple(known) or _REQUEST_IDS.get()
    if len(ids) != count or not all(ids):
        given = ids if len(ids) == count else ("",) * count
        ids = tuple(i or uuid.uuid4().hex for i in given)
    return ids


def log_code_failure(
    what: str, model: str, version: int | str, exc: BaseException, ids: Sequence[str] = ()
) -> None:
    """``what`` (``"the handler"``, ``"model.py"``) of ``model``/``version`` raised ``exc``."""
    requests = ", ".join(ids)
    logger.error(  # the words carry the context too: local text logs drop `extra`
        "%s of %s version %s raised %s: %s%s",
        what,
        model,
        version,
        type(exc).__name__,
        exc,
        f" (request {requests})" if requests else " (at load)",
        exc_info=exc,
        extra={"model": model, "version": str(version), "request_ids": list(ids)},
    )


def load_failure(what: str, model: str, exc: BaseException) -> ModelCodeFailed:
    """``what`` (``"the handler"``, ``"model.py"``) of ``model`` failed to load: the
    client's message, naming what the code raised."""
    return ModelCodeFailed(
        f"{what} of {model!r} failed to load: {type(exc).__name__}: {first_line(exc, 500)}"
    )
