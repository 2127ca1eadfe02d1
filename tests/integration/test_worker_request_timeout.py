"""Triton's per-request `timeout` parameter (microseconds) where a Python model runs in
worker processes (`serve`, workers being the default): where the model's queue policy
lets a request set its own timeout (allow_timeout_override, as Triton and the queue apply
it), a run past it is answered "Request timeout expired", and the worker holding it is
killed and restarted, as responseTimeout does; the next request answers."""

from __future__ import annotations

import httpx
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from tests.integration.grpc_support import lambdaserve_serve
from tests.support import free_port

WAIT_S = 120
SLEEPER = """
import time
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            if x.flat[0] < 0:  # far longer than the requests' timeouts, short enough to end
                time.sleep(30)
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", x * 2)]))
        return responses
"""
CONFIG = """
backend: "python"
max_batch_size: 4
input [{ name: "INPUT0", data_type: TYPE_FP32, dims: [ 1 ] }]
output [{ name: "OUTPUT0", data_type: TYPE_FP32, dims: [ 1 ] }]
dynamic_batching { default_queue_policy { allow_timeout_override: true } }
"""


def test_a_python_model_past_the_requests_own_timeout_answers_it_and_its_worker_restarts(stack):
    """Given a Python model in workers that sleeps 30 s on a negative input, its config
    allowing a request's own timeout, and `serve --management-port`,
    When tritonclient.grpc asks it with infer(timeout=1 s) and an HTTP v2 request with
    parameters.timeout of 1 s, each for the sleeping input, then a normal request,
    Then both are answered "Request timeout expired" (UNAVAILABLE / 503, as a
    request that waited past its timeout in the queue), the worker that held them was
    replaced by a new process, the version stays READY and the next request answers."""
    stack.put("models/sleeper/config.pbtxt", CONFIG.encode())
    stack.put("models/sleeper/1/model.py", SLEEPER.encode())
    stack.wait_state("sleeper", 1, "READY")
    port = free_port()
    with lambdaserve_serve("--management-port", str(port)) as served:
        api = httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=WAIT_S)
        [first] = api.get("/models/sleeper").json()[0]["workers"]
        held = grpcclient.InferInput("INPUT0", [1, 1], "FP32")
        held.set_data_from_numpy(np.array([[-1.0]], np.float32))
        with pytest.raises(InferenceServerException) as refused:
            served.client().infer("sleeper", [held], timeout=1_000_000, client_timeout=WAIT_S)
        assert "Request timeout expired" in refused.value.message()
        assert refused.value.status() == "StatusCode.UNAVAILABLE"

        body = {
            "inputs": [{"name": "INPUT0", "shape": [1, 1], "datatype": "FP32", "data": [-1.0]}],
            "parameters": {"timeout": 1_000_000},
        }
        url = f"http://127.0.0.1:{served.http}/v2/models/sleeper/infer"
        answer = httpx.post(url, json=body, timeout=WAIT_S)
        assert answer.status_code == 503, answer.text
        assert answer.json()["error"].startswith("Request timeout expired")

        body["inputs"][0]["data"] = [2.0]
        again = httpx.post(url, json=body, timeout=WAIT_S)
        assert again.status_code == 200, again.text
        assert again.json()["outputs"][0]["data"] == [4.0]
        [now] = api.get("/models/sleeper").json()[0]["workers"]
        assert now["pid"] != first["pid"] and now["status"] == "READY"
        stack.wait_state("sleeper", 1, "READY")  # not counted as a crash of its code
