"""What a door shares with the plane about one request, beyond its body: the headers (HTTP)
or metadata (gRPC) it received, read only where a setting names one (a weighted label's
``sticky`` header), and the version that answered it, which every door says back (HTTP's
``lambdaserve-model-version`` header, gRPC's trailing metadata of the same name).

Context variables of the request's task: a door sets its headers once per request (never
copied: searched when asked); the plane sets the version as the answer comes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from contextvars import ContextVar, Token
from typing import Any

VERSION_HEADER = "lambdaserve-model-version"
# ASGI's raw pairs, a mapping of lower-case names, or a gRPC call's context
Received = Iterable[tuple[bytes, bytes]] | Mapping[str, str] | Any
_RECEIVED: ContextVar[Received | None] = ContextVar("lambdaserve_received", default=None)
_ANSWERED: ContextVar[int | None] = ContextVar("lambdaserve_answered_version", default=None)
# the request's cell for (model, version): its label drew a copy for its shadow version (a
# weighted label's ``shadow``), run after the answer by the plane that serves it. A cell made
# by the door, not a value: a label is resolved in a thread, whose context is a copy
_SHADOW: ContextVar[list[tuple[str, int] | None] | None] = ContextVar(
    "lambdaserve_shadow", default=None
)


def receive(headers: Received) -> Token[Received | None]:
    """The request's headers, until ``forget`` (called as the door's answer ends); a new
    request has no shadow drawn yet (a Lambda instance's context outlives one)."""
    _SHADOW.set([None])
    return _RECEIVED.set(headers)


def forget(token: Token[Received | None]) -> None:
    _RECEIVED.reset(token)


def header(name: str) -> str | None:
    """The request's value of ``name`` (lower case); None where it sent none."""
    received = _RECEIVED.get()
    if received is None:
        return None
    if isinstance(received, Mapping):
        value = received.get(name)
        return None if value is None else str(value)
    metadata: Callable[[], Any] | None = getattr(received, "invocation_metadata", None)
    if metadata is not None:  # gRPC: asked only now
        for key, value in metadata() or ():
            if key == name:
                return value.decode("latin-1") if isinstance(value, bytes) else str(value)
        return None
    wanted = name.encode("latin-1")
    for key, value in received:
        if key == wanted:
            return str(value.decode("latin-1"))
    return None


def answered_by(version: int) -> None:
    """The version that answers the request (its door says so)."""
    _ANSWERED.set(version)


def answered_version() -> int | None:
    return _ANSWERED.get()


def shadow_drawn(model: str, version: int) -> None:
    """The request's label drew a copy for its shadow ``version`` (the resolver); a request
    no door received (a queued one, a model's call) draws none."""
    cell = _SHADOW.get()
    if cell is not None:
        cell[0] = (model, version)


def take_shadow(model: str) -> int | None:
    """The shadow version drawn for this request of ``model``, once (the plane, after the
    answer)."""
    cell = _SHADOW.get()
    if cell is None or cell[0] is None:
        return None
    drawn, cell[0] = cell[0], None
    return drawn[1] if drawn[0] == model else None
