"""BLS calls from a Python model in a worker (``exec()``, ``exec(decoupled=True)``,
``is_model_ready``): the child writes the call's inputs in its response area (the serving
process is waiting on it, so that area is free) and sends a ``bls`` message; the serving
process runs it through its own BLS executors (the data plane: any model of the catalog,
resolved, cached and batched as an HTTP call) and writes the outputs in the request area
(the child copied its inputs when its call began). A decoupled call's responses come back
together, in order, once the called model has sent them all. A workflow's model nodes come
the same way (``kind: node``, answered by ``workers.node_relay``)."""

from __future__ import annotations

import threading
from typing import Any, Protocol

from lambdaserve.runtimes.triton_python import pb_utils
from lambdaserve.workers.channel import Channel
from lambdaserve.workers.node_relay import answer_node
from lambdaserve.workers.process import WorkerProcess
from lambdaserve.workers.shared_area import Area, arrays_of


class ResponseWriter(Protocol):
    """The child's response area, written from a cursor of its own (``workers.child``)."""

    def write(self, arrays: list[tuple[str, Any]]) -> list[Any]: ...


# -- the serving process's side ----------------------------------------------------------
def answer_bls(worker: WorkerProcess, message: dict[str, Any]) -> None:
    kind = message.get("kind", "one")
    if kind == "node":
        answer_node(worker, message)
        return
    if kind == "ready":
        ready = pb_utils._readiness is not None and pb_utils._readiness(
            message["model"], str(message.get("version") or "")
        )
        worker.channel.send({"ready": bool(ready)})
        return
    inputs = worker.responses.read_tensors(message["inputs"])
    request = pb_utils.InferenceRequest(
        model_name=message["model"],
        model_version=int(message.get("version") or -1),
        inputs=[pb_utils.Tensor(name, array) for name, array in inputs.items()],
        requested_output_names=list(message["outputs"]),
        timeout=int(message.get("timeout") or 0),
    )
    if pb_utils._executor is None or pb_utils._stream_executor is None:
        worker.channel.send({"responses": [{"error": "BLS is not available in this process"}]})
        return
    responses = list(pb_utils._stream_executor(request)) if kind == "all" else [request.exec()]
    documents, end = [], 0
    for response in responses:
        error = response.error() if response.has_error() else None
        if error is not None:
            documents.append({"error": error.message()})
            continue
        produced = {t.name(): t.as_numpy() for t in response.output_tensors()}
        descriptors, end = worker.requests.write_tensors(arrays_of(produced), end)
        documents.append({"outputs": descriptors})
    worker.channel.send({"responses": documents})


# -- the worker's side -------------------------------------------------------------------
def install_in_worker(
    channel: Channel,
    requests: Area,
    responses: ResponseWriter,
    lock: threading.Lock | None = None,
) -> None:
    """This worker's pb_utils sends its BLS calls to the serving process; ``lock`` keeps one
    exchange on the channel at a time (the worker's main loop receives under it too)."""
    lock = lock or threading.Lock()

    def call(request: Any, kind: str) -> list[Any]:
        arrays = [(t.name(), t.as_numpy()) for t in request.inputs()]
        with lock:
            descriptors = responses.write(arrays)
            channel.send(
                {
                    "op": "bls",
                    "kind": kind,
                    "model": request.model_name,
                    "version": request.model_version,
                    "inputs": descriptors,
                    "outputs": list(request.requested_output_names()),
                    "timeout": request._timeout,
                }
            )
            reply = channel.receive()
            return [
                pb_utils.InferenceResponse(error=pb_utils.TritonError(d["error"]))
                if "error" in d
                else pb_utils.InferenceResponse(
                    [pb_utils.Tensor(n, a) for n, a in requests.read_tensors(d["outputs"]).items()]
                )
                for d in reply["responses"]
            ]

    def ready(model: str, version: str) -> bool:
        with lock:
            channel.send({"op": "bls", "kind": "ready", "model": model, "version": version})
            return bool(channel.receive()["ready"])

    pb_utils._executor = lambda request: call(request, "one")[0]
    pb_utils._stream_executor = lambda request: iter(call(request, "all"))
    pb_utils._readiness = ready
