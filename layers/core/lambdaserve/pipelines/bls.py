"""Models calling models in this process: BLS (``pb_utils.InferenceRequest(...).exec()``
inside a Python model), ensemble steps and TorchServe workflow nodes, with the same
resolution, cache and runtimes as an HTTP call."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np

from lambdaserve.errors import LambdaServeError
from lambdaserve.protocol.v2 import InferInput, InferRequest, RequestedOutput
from lambdaserve.runtimes import ensemble
from lambdaserve.runtimes.torchserve import workflow as torchserve_workflow
from lambdaserve.runtimes.torchserve.context import Answer
from lambdaserve.runtimes.triton_python import pb_utils
from lambdaserve.serving.data_plane import InferenceDataPlane
from lambdaserve.serving.raw_predictions import RawRequest, predict_raw
from lambdaserve.serving.streaming import stream
from lambdaserve.tensors import encoding
from lambdaserve.tensors.signature import Signature


def install_bls(plane: InferenceDataPlane) -> None:
    """Route this process's BLS requests, ensemble steps and workflow nodes through ``plane``
    (the process's one: its server looked up per call, so a renewed server takes them). They
    run in the calling model's thread, never through the plane's batchers: a model waiting
    on a batch that its own run holds open would wait for itself."""

    def execute(request: pb_utils.InferenceRequest) -> pb_utils.InferenceResponse:
        version = request.model_version if request.model_version > 0 else None
        try:
            v2 = InferRequest(
                inputs=tuple(_input(t.name(), t.as_numpy()) for t in request.inputs()),
                outputs=tuple(RequestedOutput(n) for n in request.requested_output_names()),
            )
            outputs: dict[str, np.ndarray[Any, Any]] = plane.server().infer(
                request.model_name, version, v2, lambda _, produced: produced
            )
        except LambdaServeError as exc:
            return pb_utils.InferenceResponse(error=pb_utils.TritonError(exc.message))
        return pb_utils.InferenceResponse([pb_utils.Tensor(n, a) for n, a in outputs.items()])

    pb_utils._executor = execute

    def execute_decoupled(
        request: pb_utils.InferenceRequest,
    ) -> Iterator[pb_utils.InferenceResponse]:
        """``exec(decoupled=True)``: every response, then (as Triton) an empty final one."""
        version = request.model_version if request.model_version > 0 else None
        v2 = InferRequest(
            inputs=tuple(_input(t.name(), t.as_numpy()) for t in request.inputs()),
            outputs=tuple(RequestedOutput(n) for n in request.requested_output_names()),
        )
        try:
            _, responses = stream(plane.server(), request.model_name, version, v2)
            for outputs in responses:
                yield pb_utils.InferenceResponse(
                    [pb_utils.Tensor(n, a) for n, a in outputs.items()]
                )
        except LambdaServeError as exc:
            yield pb_utils.InferenceResponse(error=pb_utils.TritonError(exc.message))
        yield pb_utils.InferenceResponse()

    pb_utils._stream_executor = execute_decoupled

    def ready(model: str, version: str) -> bool:
        try:
            plane.resolve_now(model, int(version) if version else None)
        except (LambdaServeError, ValueError):
            return False
        return True

    pb_utils._readiness = ready

    def run_step(
        model: str, version: int | None, inputs: dict[str, np.ndarray[Any, Any]], wanted: Any
    ) -> dict[str, np.ndarray[Any, Any]]:
        v2 = InferRequest(
            inputs=tuple(_input(name, array) for name, array in inputs.items()),
            outputs=tuple(RequestedOutput(n) for n in wanted),
        )
        produced: dict[str, np.ndarray[Any, Any]] = plane.server().infer(
            model, version, v2, lambda _, outputs: outputs
        )
        return produced

    def resolve(model: str, version: int | None) -> Signature:
        return plane.resolve_now(model, version).signature

    ensemble.install(run_step, resolve)

    def run_node(model: str, fields: tuple[tuple[str, Any], ...], headers: Any) -> Answer:
        return predict_raw(plane.server(), model, None, RawRequest(fields, headers))

    torchserve_workflow.install(run_node)


def _input(name: str, array: np.ndarray[Any, Any]) -> InferInput:
    return InferInput(name, encoding.v2_datatype(array), tuple(array.shape), array)
