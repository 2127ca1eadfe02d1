"""instance_group.count and max_queue_size on the Lambda path as template.yaml deploys them
(InflightStore=dynamodb): three execution environments of the infer function take requests
for a model whose config states one instance and a queue of one, all at once. The model
stamps when each execution ran: one ran at a time (measured), one request waited for it,
the third was refused with Triton's 503, and no role was denied a call."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import ExitStack
from typing import Any

import pytest

from lambdaserve.local.http_api_event import http_api_event
from tests.deployed.stack import DeployedStack, deployed

MODEL = "stamped"
CONFIG = b"""
backend: "python"
max_batch_size: 4
input [{ name: "SLEEP_S", data_type: TYPE_FP32, dims: [ 1 ] }]
output [
  { name: "STARTED", data_type: TYPE_FP64, dims: [ 1 ] },
  { name: "ENDED", data_type: TYPE_FP64, dims: [ 1 ] }
]
instance_group [{ count: 1, kind: KIND_CPU }]
dynamic_batching { default_queue_policy { max_queue_size: 1 } }
"""
STAMPED = b"""
import time

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            started = time.time()
            sleep_s = pb_utils.get_input_tensor_by_name(request, "SLEEP_S").as_numpy()
            time.sleep(float(sleep_s.max()))
            stamps = [
                pb_utils.Tensor("STARTED", np.array([[started]], np.float64)),
                pb_utils.Tensor("ENDED", np.array([[time.time()]], np.float64)),
            ]
            responses.append(pb_utils.InferenceResponse(stamps))
        return responses
"""


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DeployedStack]:
    with deployed(tmp_path_factory.mktemp("instances"), {"EnablePythonModels": "true"}) as running:
        running.publish(MODEL, {"config.pbtxt": CONFIG, "1/model.py": STAMPED})
        yield running


def request(sleep_s: float) -> dict[str, Any]:
    tensor = {"name": "SLEEP_S", "datatype": "FP32", "shape": [1, 1], "data": [sleep_s]}
    body = json.dumps({"inputs": [tensor]}).encode()
    return http_api_event("POST", f"/v2/models/{MODEL}/infer", body)


def stamps(answer: dict[str, Any]) -> tuple[float, float]:
    outputs = {o["name"]: o["data"][0] for o in json.loads(answer["body"])["outputs"]}
    return outputs["STARTED"], outputs["ENDED"]


def test_one_execution_at_a_time_across_instances_and_the_overflow_is_refused(
    stack: DeployedStack,
):
    # Given three execution environments of the infer function (Lambda scaled out), each
    # with the model loaded (a request that does not sleep)
    with ExitStack() as instances:
        invokes = [lambda event: stack.invoke("InferFunction", event)]
        for number in (2, 3):
            invokes.append(instances.enter_context(stack.another_instance("InferFunction", number)))
            # one after the other: each start checks the shipped environment's files, which
            # must not change under an environment still importing them
            warm = invokes[-1](request(0.0))
            assert warm["statusCode"] == 200, warm
        warm = invokes[0](request(0.0))
        assert warm["statusCode"] == 200, warm
        # When each takes a request of two seconds at the same moment
        answers: list[dict[str, Any]] = []
        barrier = threading.Barrier(len(invokes))

        def call(invoke: Any) -> None:
            barrier.wait()
            answers.append(invoke(request(2.0)))

        threads = [threading.Thread(target=call, args=(i,)) for i in invokes]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    # Then one ran, one waited for the instance and ran after it, and the third found the
    # queue of one full: Triton's 503, word for word
    statuses = sorted(a["statusCode"] for a in answers)
    assert statuses == [200, 200, 503], answers
    [refused] = [a for a in answers if a["statusCode"] == 503]
    assert "Exceeds maximum queue size" in refused["body"], refused
    first, second = sorted(stamps(a) for a in answers if a["statusCode"] == 200)
    assert first[1] <= second[0], f"two executions overlapped: {first} and {second}"
    # and no role was denied a call the slots made
    stack.assert_no_denials()
