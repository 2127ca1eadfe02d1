"""The one port for models calling models: what a Triton Python model's BLS requests
(``pb_utils``), an ensemble's steps (``runtimes.ensemble``) and a TorchServe workflow's model
nodes (``runtimes.torchserve.workflow``) call another model of the catalog through.

Installed once per process by whoever serves there: the serving process over its serving
plane (``pipelines.bls``), a worker child over its socket (``workers.call_relay``). The
runtimes read it when they call; none of them knows which side answers.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

if TYPE_CHECKING:
    from lambdaserve.runtimes.torchserve.context import Answer
    from lambdaserve.tensors.signature import Signature

Arrays = dict[str, np.ndarray[Any, Any]]  # tensors by name
_RUNNING: ContextVar[frozenset[str]] = ContextVar("models_running_here", default=frozenset())


class running:  # lower case: used as a function, `with running(model):`
    """``model`` runs a batch in this thread (a call it makes waits here). A class, not a
    generator: it is entered once per batch on the hot path."""

    __slots__ = ("_model", "_token")

    def __init__(self, model: str) -> None:
        self._model = model

    def __enter__(self) -> None:
        self._token = _RUNNING.set(_RUNNING.get() | {self._model})

    def __exit__(self, *exc: object) -> None:
        _RUNNING.reset(self._token)


def running_here() -> frozenset[str]:
    """The models whose runs this thread is inside: a call to one of them cannot wait in its
    queue, whose run it holds open."""
    return _RUNNING.get()


class ModelCalls(Protocol):
    """Calls to another model; a model's own failure raises as a ``LambdaServeError``."""

    def infer(
        self,
        model: str,
        version: int | None,
        inputs: Mapping[str, np.ndarray[Any, Any]],
        outputs: Sequence[str],
        timeout_us: int = 0,
        *,
        parameters: Mapping[str, Any] | None = None,
        request_id: str = "",
    ) -> Arrays:
        """One answer (a BLS ``exec()``, an ensemble step). ``timeout_us`` is the caller's
        own limit, which the caller keeps; a side that relays the call passes it on, so the
        side that answers stops waiting too (0: none), and it is the request's ``timeout``
        (its model's queue policy may let it shorten the wait, as Triton's). ``parameters``:
        the request's (a BLS request's own; an ensemble step's: the sequence its request
        belongs to); ``request_id``: its id (a BLS caller's choice, often its own)."""
        ...

    def stream(
        self,
        model: str,
        version: int | None,
        inputs: Mapping[str, np.ndarray[Any, Any]],
        outputs: Sequence[str],
    ) -> Iterator[Arrays]:
        """Every response of a decoupled model to one request (``exec(decoupled=True)``)."""
        ...

    def ready(self, model: str, version: int | None) -> bool:
        """Whether the model (the version, if given) is READY (``is_model_ready``)."""
        ...

    def signature(self, model: str, version: int | None) -> Signature:
        """The model's signature, or the error saying why it cannot serve (an ensemble's
        load checks its steps)."""
        ...

    def run_node(
        self, model: str, fields: tuple[tuple[str, Any], ...], headers: Mapping[str, str]
    ) -> Answer:
        """A workflow's model node: the request's fields and headers, as ``/predictions``."""
        ...


_port: list[ModelCalls] = []  # none, or the process's one


def install(calls: ModelCalls | None) -> None:
    """The process's port from now on (None: none, as before any serving began)."""
    _port[:] = [calls] if calls is not None else []


def current() -> ModelCalls | None:
    """The process's port; None where no serving began (each caller says what needs one)."""
    return _port[0] if _port else None
