"""The GPU queue as template.yaml deploys it: a KIND_GPU model's async request queued by the
infer function and answered by the GPU service's `lambdaserve worker` task, model code too."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from lambdaserve.local.http_api_event import http_api_event
from tests.deployed.stack import DeployedStack, deployed
from tests.support import wait_until

GPU_SERVICE = {  # docs/deploy.md's GPU profile, less the real network's ids
    "EnableGpuService": "true",
    "GpuImageUri": "123456789012.dkr.ecr.us-east-1.amazonaws.com/lambdaserve:gpu",
    "GpuSubnetIds": "subnet-0123456789abcdef0",
    "EnablePythonModels": "true",
}
CONFIG = b"""
backend: "python"
max_batch_size: 0
input [{ name: "INPUT0", data_type: TYPE_FP32, dims: [ -1 ] }]
output [{ name: "OUTPUT0", data_type: TYPE_FP32, dims: [ -1 ] }]
instance_group [{ kind: KIND_GPU }]
"""
DOUBLER = b"""
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", x * 2)]))
        return responses
"""
BODY = {"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [3], "data": [1, 2, 3]}]}


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DeployedStack]:
    # Given the GPU service's stack with Python models on, a KIND_GPU Python model published
    with deployed(tmp_path_factory.mktemp("gpu-queue"), GPU_SERVICE) as running:
        running.publish("doubler", {"config.pbtxt": CONFIG, "1/model.py": DOUBLER})
        yield running


def test_model_code_queued_for_the_gpu_is_answered_by_the_gpu_worker(stack: DeployedStack):
    # When a respond-async request for it reaches the infer function
    event = http_api_event("POST", "/v2/models/doubler/infer", json.dumps(BODY).encode())
    event["headers"]["prefer"] = "respond-async"
    accepted = stack.invoke("InferFunction", event)
    assert accepted["statusCode"] == 202, accepted
    status = http_api_event("GET", json.loads(accepted["body"])["status_url"], b"")
    # and the GPU service's task takes the GPU queue
    stack.task("GpuTaskDefinition", ready_path="")

    def done() -> dict | None:
        answer = stack.invoke("InferFunction", status)
        return answer if answer["statusCode"] != 202 else None

    # Then the status URL answers the model code's outputs
    answer = wait_until(done, 180, interval_s=1)
    assert answer["statusCode"] == 200, answer
    assert json.loads(answer["body"])["outputs"][0]["data"] == [2, 4, 6]
    stack.assert_no_denials()
