"""Models calling models in this process: BLS (``pb_utils.InferenceRequest(...).exec()``
inside a Python model), ensemble steps and TorchServe workflow nodes, with the same
resolution, cache and runtimes as an HTTP call: the process's model-to-model port
(``runtimes.model_calls``) over its serving plane."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from lambdaserve.errors import LambdaServeError
from lambdaserve.protocol.v2 import InferInput, InferRequest, RequestedOutput
from lambdaserve.runtimes import model_calls
from lambdaserve.runtimes.model_calls import running_here
from lambdaserve.runtimes.torchserve.context import Answer
from lambdaserve.serving.data_plane import InferenceDataPlane, Inferred
from lambdaserve.serving.raw_predictions import RawRequest, predict_raw
from lambdaserve.serving.streaming import stream
from lambdaserve.serving.version_resolver import ServedVersion
from lambdaserve.tensors import encoding
from lambdaserve.tensors.signature import Signature
from lambdaserve.tracing.request_trace import end_child, start_child

Arrays = dict[str, np.ndarray[Any, Any]]


class PlaneCalls:
    """The port over one serving plane: its server looked up per call, so a renewed server
    takes them. A call goes through the plane's batcher where it has one, as a client's
    request does (the callee's queue policy, priorities and batches apply, as Triton's BLS
    requests meet its scheduler), unless it calls a model whose run this thread is inside:
    waiting in a queue that its own run holds open, it would wait for itself. Such a call,
    and every call where the plane has no batcher, runs in the calling model's thread."""

    def __init__(self, plane: InferenceDataPlane) -> None:
        self._plane = plane

    def infer(
        self,
        model: str,
        version: int | None,
        inputs: Mapping[str, np.ndarray[Any, Any]],
        outputs: Sequence[str],
        timeout_us: int = 0,  # the caller keeps its own limit: this thread is the caller's
        *,
        parameters: Mapping[str, Any] | None = None,
        request_id: str = "",
    ) -> Arrays:
        given = dict(parameters or {})
        if timeout_us > 0:  # the request's own timeout, for its model's queue policy
            given["timeout"] = timeout_us
        request = _request(inputs, outputs, given, request_id)
        child = start_child(model, request)  # the caller is traced: so is this call
        answered: list[int] = []

        def keep(served: ServedVersion, arrays: Arrays) -> Arrays:
            answered.append(served.version)
            return arrays

        try:
            queued = self._through_batcher(model, version, request)
            if queued is not None:
                answered.append(queued.version)
                return dict(queued.outputs)
            produced: Arrays = self._plane.server().infer(model, version, request, keep)
            return produced
        finally:
            if child is not None:
                end_child(child, request, answered[0] if answered else None)

    def _through_batcher(
        self, model: str, version: int | None, request: InferRequest
    ) -> Inferred | None:
        """The answer through the plane's batcher, waited for in this thread; None where the
        call runs in this thread instead."""
        batcher = self._plane.batcher
        loop = batcher.loop if batcher is not None else None
        if loop is None or model in running_here() or _in(loop):
            return None
        # the child trace (if any) stamped its own start and queue (``start_child``): the
        # plane stamps nothing more on it, and the model's run stamps it as it runs
        queued = self._plane.infer_traced(model, version, request, None)
        return asyncio.run_coroutine_threadsafe(queued, loop).result()

    def stream(
        self,
        model: str,
        version: int | None,
        inputs: Mapping[str, np.ndarray[Any, Any]],
        outputs: Sequence[str],
    ) -> Iterator[Arrays]:
        _, responses = stream(self._plane.server(), model, version, _request(inputs, outputs))
        yield from responses

    def ready(self, model: str, version: int | None) -> bool:
        try:
            self._plane.resolve_now(model, version)
        except LambdaServeError:
            return False
        return True

    def signature(self, model: str, version: int | None) -> Signature:
        return self._plane.resolve_now(model, version).signature

    def run_node(
        self, model: str, fields: tuple[tuple[str, Any], ...], headers: Mapping[str, str]
    ) -> Answer:
        return predict_raw(self._plane.server(), model, None, RawRequest(fields, headers))


def install_bls(plane: InferenceDataPlane) -> None:
    """Route this process's BLS requests, ensemble steps and workflow nodes through ``plane``
    (the process's one)."""
    model_calls.install(PlaneCalls(plane))


def _request(
    inputs: Mapping[str, np.ndarray[Any, Any]],
    outputs: Sequence[str],
    parameters: Mapping[str, Any] | None = None,
    request_id: str = "",
) -> InferRequest:
    return InferRequest(
        id=request_id or None,
        inputs=tuple(
            InferInput(name, encoding.v2_datatype(array), tuple(array.shape), array)
            for name, array in inputs.items()
        ),
        outputs=tuple(RequestedOutput(n) for n in outputs),
        parameters=dict(parameters or {}),
    )


def _in(loop: asyncio.AbstractEventLoop) -> bool:
    """Whether this thread runs ``loop`` (it cannot wait for its own work)."""
    try:
        return asyncio.get_running_loop() is loop
    except RuntimeError:
        return False
