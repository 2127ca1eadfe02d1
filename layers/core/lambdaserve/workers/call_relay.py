"""Calls from a worker's model code to other models, relayed to the serving process: a
Python model's BLS calls (``exec()``, ``exec(decoupled=True)``, ``is_model_ready``) and a
workflow's model nodes. The child's side is its process's model-to-model port
(``runtimes.model_calls``, installed once, at load); the serving process answers each call
through its own port (the data plane: any model of the catalog, resolved, cached and batched
as an HTTP call).

Tensors and a node's bytes go in the child's response area (the serving process is waiting
on it, so that area is free); the answer's come back in the request area (the child copied
its inputs when its call began). A decoupled call's responses come back together, in order,
once the called model has sent them all.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, Protocol

import numpy as np

from lambdaserve.errors import InferenceError, LambdaServeError
from lambdaserve.runtimes import model_calls
from lambdaserve.runtimes.op_threads import within
from lambdaserve.runtimes.torchserve.context import Answer
from lambdaserve.tensors.signature import Signature
from lambdaserve.workers import messages
from lambdaserve.workers.channel import Channel, error_from
from lambdaserve.workers.messages import BlsKind, Message, Op
from lambdaserve.workers.process import WorkerProcess
from lambdaserve.workers.shared_area import Area, arrays_of

Arrays = dict[str, np.ndarray[Any, Any]]


class ResponseWriter(Protocol):
    """The child's response area, written from a cursor of its own (``workers.child``)."""

    def write(self, arrays: list[tuple[str, Any]]) -> list[Any]: ...

    def write_bytes(self, data: bytes) -> int: ...


# -- the serving process's side ----------------------------------------------------------
def answer_call(worker: WorkerProcess, message: Message) -> None:
    """A ``bls`` or ``node`` message from ``worker``, answered through this process's port."""
    calls = model_calls.current()
    if message[messages.OP] == Op.NODE:
        _answer_node(worker, messages.Node.of(message), calls)
        return
    call = messages.Bls.of(message)
    if call.kind == BlsKind.READY:
        ready = calls is not None and calls.ready(call.model, call.version)
        worker.channel.send(messages.bls_ready(ready))
        return
    if calls is None:
        error = messages.bls_error("BLS is not available in this process")
        worker.channel.send(messages.bls_responses([error]))
        return
    inputs = worker.responses.read_tensors(call.inputs)
    produced: list[Arrays | str] = []
    try:
        if call.kind == BlsKind.ALL:
            produced.extend(calls.stream(call.model, call.version, inputs, call.outputs))
        else:
            produced.append(_infer(calls, call, inputs))
    except LambdaServeError as exc:
        produced.append(exc.message)
    documents, end = [], 0
    for answer in produced:
        if isinstance(answer, str):
            documents.append(messages.bls_error(answer))
            continue
        descriptors, end = worker.requests.write_tensors(arrays_of(answer), end)
        documents.append(messages.produced(descriptors))
    worker.channel.send(messages.bls_responses(documents))


def _infer(calls: model_calls.ModelCalls, call: messages.Bls, inputs: Arrays) -> Arrays:
    """One answer, within the child's timeout (microseconds) where it set one: the child
    waits on the channel until this side answers."""

    def infer() -> Arrays:
        return calls.infer(
            call.model,
            call.version,
            inputs,
            call.outputs,
            call.timeout_us,
            parameters=call.parameters,
            request_id=call.request_id,
        )

    if call.timeout_us <= 0:
        return infer()
    try:
        produced: Arrays = within(call.timeout_us / 1e6, infer)
    except TimeoutError:
        raise InferenceError("Request timeout expired") from None
    return produced


def _answer_node(
    worker: WorkerProcess, call: messages.Node, calls: model_calls.ModelCalls | None
) -> None:
    fields = tuple(
        (key, messages.field_value(value, worker.responses.read_bytes))
        for key, value in call.fields
    )
    try:
        if calls is None:
            raise InferenceError("workflows run only where models serve")
        answer = calls.run_node(call.model, fields, call.headers)
    except Exception as exc:  # the node's error is the workflow's to retry or report
        worker.channel.send(messages.failed(exc))
        return
    offset, _ = worker.requests.write_bytes(answer.body, 0)
    worker.channel.send(
        messages.node_answer(offset, len(answer.body), answer.content_type, answer.status)
    )


# -- the worker's side -------------------------------------------------------------------
class WorkerCalls:
    """The child's port: each call sent to the serving process and its answer awaited;
    ``lock`` keeps one exchange on the channel at a time (the child's main loop receives
    under it too, and a node left running past its timeout-ms may still be waiting for its
    answer when the next node starts)."""

    def __init__(
        self, channel: Channel, requests: Area, responses: ResponseWriter, lock: threading.Lock
    ) -> None:
        self._channel, self._requests, self._responses = channel, requests, responses
        self._lock = lock

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
        [answer] = self._bls(
            BlsKind.ONE,
            model=model,
            version=version,
            inputs=inputs,
            outputs=outputs,
            timeout_us=timeout_us,
            parameters=parameters,
            request_id=request_id,
        )
        if isinstance(answer, str):
            raise InferenceError(answer)
        return answer

    def stream(
        self,
        model: str,
        version: int | None,
        inputs: Mapping[str, np.ndarray[Any, Any]],
        outputs: Sequence[str],
    ) -> Iterator[Arrays]:
        for answer in self._bls(
            BlsKind.ALL, model=model, version=version, inputs=inputs, outputs=outputs, timeout_us=0
        ):
            if isinstance(answer, str):
                raise InferenceError(answer)
            yield answer

    def ready(self, model: str, version: int | None) -> bool:
        with self._lock:
            self._channel.send(messages.bls(BlsKind.READY, model, version))
            return bool(self._channel.receive()[messages.READY])

    def signature(self, model: str, version: int | None) -> Signature:
        # an ensemble is no model code: it loads in the serving process, never in a worker
        raise InferenceError("ensembles load in the serving process, not in a worker")

    def run_node(
        self, model: str, fields: tuple[tuple[str, Any], ...], headers: Mapping[str, str]
    ) -> Answer:
        with self._lock:
            encoded = [messages.field(k, v, self._responses.write_bytes) for k, v in fields]
            self._channel.send(messages.node(model, encoded, headers))
            reply = self._channel.receive()
            if messages.ERROR in reply:
                raise error_from(reply[messages.ERROR])
            offset, length, content_type, status = reply[messages.ANSWER]
            return Answer(self._requests.read_bytes(offset, length), content_type, status)

    def _bls(
        self,
        kind: BlsKind,
        *,
        model: str,
        version: int | None,
        inputs: Mapping[str, np.ndarray[Any, Any]],
        outputs: Sequence[str],
        timeout_us: int,
        parameters: Mapping[str, Any] | None = None,
        request_id: str = "",
    ) -> list[Arrays | str]:
        """Each response's outputs, or its error's message."""
        with self._lock:
            descriptors = self._responses.write(list(inputs.items()))
            self._channel.send(
                messages.bls(
                    kind,
                    model,
                    version,
                    inputs=descriptors,
                    outputs=outputs,
                    timeout_us=timeout_us,
                    parameters=parameters,
                    request_id=request_id,
                )
            )
            reply = self._channel.receive()
            return [
                str(d[messages.ERROR])
                if messages.ERROR in d
                else self._requests.read_tensors(d[messages.OUTPUTS])
                for d in reply[messages.RESPONSES]
            ]
