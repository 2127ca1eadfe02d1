"""BLS calls from a Python model in a worker: the child writes the call's inputs in its
response area (the serving process is waiting on it, so the area is free) and sends a
``bls`` message; the serving process runs it through its own BLS executor (the data plane:
any model of the catalog, resolved, cached and batched as an HTTP call) and writes the
outputs in the request area (the child copied its inputs when the call began)."""

from __future__ import annotations

from typing import Any

from lambdaserve.runtimes.triton_python import pb_utils
from lambdaserve.workers.process import WorkerProcess
from lambdaserve.workers.shared_area import arrays_of


def answer_bls(worker: WorkerProcess, message: dict[str, Any]) -> None:
    inputs = worker.responses.read_tensors(message["inputs"])
    request = pb_utils.InferenceRequest(
        model_name=message["model"],
        model_version=int(message.get("version") or -1),
        inputs=[pb_utils.Tensor(name, array) for name, array in inputs.items()],
        requested_output_names=list(message["outputs"]),
    )
    executor = pb_utils._executor
    if executor is None:
        worker.channel.send({"error": "BLS is not available in this process"})
        return
    response = executor(request)
    error = response.error() if response.has_error() else None
    if error is not None:
        worker.channel.send({"error": error.message()})
        return
    produced = {t.name(): t.as_numpy() for t in response.output_tensors()}
    descriptors, _ = worker.requests.write_tensors(arrays_of(produced))
    worker.channel.send({"outputs": descriptors})
