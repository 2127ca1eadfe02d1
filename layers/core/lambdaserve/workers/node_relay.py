"""A TorchServe workflow's model nodes, called from its worker: the workflow's DAG (its
function nodes are the user's code) runs in the worker, and each model node crosses back to
the serving process, which runs it through its own data plane (the model named by the node,
resolved, cached and batched as a ``/predictions`` call), as a Python model's BLS calls do
(``workers.bls_relay``).

The node's fields go as the handler's rows do: bytes in the worker's response area (the
serving process is waiting on the worker, so the area is free), other values in the JSON
header; the node's answer comes back in the request area (the worker copied its request
when the call began).
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any, Protocol

from lambdaserve.runtimes.torchserve import workflow
from lambdaserve.runtimes.torchserve.context import Answer
from lambdaserve.workers.channel import Channel, error_document, error_from
from lambdaserve.workers.process import WorkerProcess
from lambdaserve.workers.shared_area import Area


class BytesWriter(Protocol):
    """The child's response area, written from a cursor of its own (``workers.child``)."""

    def write_bytes(self, data: bytes) -> int: ...


# -- the serving process's side ----------------------------------------------------------
def answer_node(worker: WorkerProcess, message: dict[str, Any]) -> None:
    fields = tuple(
        (key, worker.responses.read_bytes(*value["b"]) if "b" in value else value["j"])
        for key, value in message["fields"]
    )
    try:
        answer = workflow.run_node(message["model"], fields, message.get("headers") or {})
    except Exception as exc:  # the node's error is the workflow's to retry or report
        worker.channel.send({"error": error_document(exc)})
        return
    offset, _ = worker.requests.write_bytes(answer.body, 0)
    worker.channel.send({"answer": [offset, len(answer.body), answer.content_type, answer.status]})


# -- the worker's side -------------------------------------------------------------------
def install_in_worker(
    channel: Channel, requests: Area, responses: BytesWriter, lock: threading.Lock
) -> None:
    """This worker's workflows send their model nodes to the serving process; ``lock`` keeps
    one exchange on the channel at a time (a node left running past its timeout-ms may
    still be waiting for its answer when the next node starts)."""

    def call(model: str, fields: tuple[tuple[str, Any], ...], headers: Mapping[str, str]) -> Answer:
        with lock:
            encoded: list[list[Any]] = []
            for key, value in fields:
                if isinstance(value, bytes | bytearray | memoryview):
                    data = bytes(value)
                    encoded.append([key, {"b": [responses.write_bytes(data), len(data)]}])
                else:
                    encoded.append([key, {"j": value}])
            channel.send(
                {
                    "op": "bls",
                    "kind": "node",
                    "model": model,
                    "fields": encoded,
                    "headers": dict(headers),
                }
            )
            reply = channel.receive()
            if "error" in reply:
                raise error_from(reply["error"])
            offset, length, content_type, status = reply["answer"]
            return Answer(requests.read_bytes(offset, length), content_type, status)

    workflow.install(call)
