"""python_backend's own examples, as their READMEs run them, against the stack with model
code in worker processes (the default in `serve` and `lambdaserve dev`): the decoupled
``repeat_int32`` (responses sent from a thread of the model's own after ``execute`` has
returned) with its ``repeat_client.py`` over tritonclient.grpc's stream, and
``custom_metrics`` with its ``client.py`` reading its MetricFamily back from ``/metrics``.

The models under tests/fixtures/python_models (``repeat_threaded``, ``custom_metrics``) are
written as the examples are; the clients below take the examples' clients' steps and checks.
"""

from __future__ import annotations

import queue
from functools import partial

import numpy as np
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from tests.integration.grpc_support import lambdaserve_serve
from tests.integration.test_python_models import publish

# repeat_client.py's request: four responses expected, [4], [2], [0] and [1], each sent
# DELAY[i] ms after the last, while execute returns after WAIT ms (before the last two)
IN_VALUE, DELAY_VALUE, WAIT_VALUE = [4, 2, 0, 1], [1, 2, 3, 4], 5


def _callback(completed: queue.Queue, result, error) -> None:
    completed.put(error if error else result)


def test_repeat_client_gets_every_response_of_a_model_sending_after_execute_returns(stack):
    """Given python_backend's decoupled repeat model (its execute returns before its thread
    has sent every response), its code in a worker, behind `lambdaserve serve --grpc-port`,
    When repeat_client.py's request is streamed with request_id "0" and OUT, IDX asked for,
    Then four responses come back for id "0", OUT being [4], [2], [0], [1] in order, IDX
    counting them, and nothing else follows on the stream (no error, no extra response)."""
    publish(stack, "repeat_threaded")
    stack.wait_state("repeat_threaded", 1, "READY")
    completed: queue.Queue = queue.Queue()
    inputs = [
        grpcclient.InferInput("IN", [len(IN_VALUE)], "INT32"),
        grpcclient.InferInput("DELAY", [len(DELAY_VALUE)], "UINT32"),
        grpcclient.InferInput("WAIT", [1], "UINT32"),
    ]
    inputs[0].set_data_from_numpy(np.array(IN_VALUE, dtype=np.int32))
    inputs[1].set_data_from_numpy(np.array(DELAY_VALUE, dtype=np.uint32))
    inputs[2].set_data_from_numpy(np.array([WAIT_VALUE], dtype=np.uint32))
    outputs = [grpcclient.InferRequestedOutput("OUT"), grpcclient.InferRequestedOutput("IDX")]
    with lambdaserve_serve() as served, served.client() as client:
        client.start_stream(callback=partial(_callback, completed))
        client.async_stream_infer(
            model_name="repeat_threaded", inputs=inputs, request_id="0", outputs=outputs
        )
        received = []
        for _ in IN_VALUE:
            item = completed.get(timeout=30)
            assert not isinstance(item, InferenceServerException), item.message()
            received.append(item)
        client.stop_stream()  # waits for the stream's end: anything still coming is queued
    assert completed.empty(), completed.get()
    assert [r.get_response().id for r in received] == ["0"] * len(IN_VALUE)
    assert [r.as_numpy("OUT").tolist() for r in received] == [[v] for v in IN_VALUE]
    assert [r.as_numpy("IDX").tolist() for r in received] == [[i] for i in range(len(IN_VALUE))]
