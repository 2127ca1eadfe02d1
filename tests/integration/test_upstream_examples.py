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
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException, np_to_triton_dtype

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


def test_custom_metrics_client_finds_its_help_type_and_series_on_metrics(stack):
    """Given python_backend's custom_metrics model (a COUNTER MetricFamily with its
    description, created in initialize, incremented in execute), its code in a worker,
    When client.py's request is answered and /metrics is read,
    Then the sum and difference are right and /metrics has the example's three patterns:
    the family's # HELP line with its description, its # TYPE counter, and its series."""
    publish(stack, "custom_metrics")
    stack.wait_state("custom_metrics", 1, "READY")
    url = str(stack.inference.base_url).removeprefix("http://").rstrip("/")
    input0_data = np.random.rand(4).astype(np.float32)
    input1_data = np.random.rand(4).astype(np.float32)
    with httpclient.InferenceServerClient(url) as client:
        inputs = [
            httpclient.InferInput("INPUT0", [4], np_to_triton_dtype(input0_data.dtype)),
            httpclient.InferInput("INPUT1", [4], np_to_triton_dtype(input1_data.dtype)),
        ]
        inputs[0].set_data_from_numpy(input0_data)
        inputs[1].set_data_from_numpy(input1_data)
        outputs = [
            httpclient.InferRequestedOutput("OUTPUT0"),
            httpclient.InferRequestedOutput("OUTPUT1"),
        ]
        response = client.infer("custom_metrics", inputs, request_id="1", outputs=outputs)
    assert np.allclose(input0_data + input1_data, response.as_numpy("OUTPUT0"))
    assert np.allclose(input0_data - input1_data, response.as_numpy("OUTPUT1"))
    metrics = stack.inference.get("/metrics").text
    for pattern in (
        "# HELP requests_process_latency_ns Cumulative time spent processing requests",
        "# TYPE requests_process_latency_ns counter",
        'requests_process_latency_ns{model="custom_metrics",version="1"}',
    ):
        assert pattern in metrics, [line for line in metrics.splitlines() if "latency" in line]
