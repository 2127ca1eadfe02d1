"""The GPU queue as template.yaml deploys it: a KIND_GPU model's async request queued by the
infer function and answered by the GPU service's `lambdaserve worker` task, model code too;
a KIND_GPU sequence's steps there too, under the task's role (its record in the catalog
table, a state over 400 KB in the bucket)."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from lambdaserve.catalog.store import Catalog
from lambdaserve.local.http_api_event import http_api_event
from tests import sequence_models
from tests.deployed.stack import STACK, DeployedStack, deployed, state_changes
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


@pytest.fixture(scope="module")
def gpu_worker(stack: DeployedStack) -> None:
    # the GPU service's task takes the GPU queue
    stack.task("GpuTaskDefinition", ready_path="")


def _queued(stack: DeployedStack, model: str, body: dict) -> tuple[dict, str]:
    """``body`` sent to the infer function with Prefer: respond-async; the status URL's
    answer once it is not 202 any more, and the request's id."""
    event = http_api_event("POST", f"/v2/models/{model}/infer", json.dumps(body).encode())
    event["headers"]["prefer"] = "respond-async"
    accepted = stack.invoke("InferFunction", event)
    assert accepted["statusCode"] == 202, accepted
    status = http_api_event("GET", json.loads(accepted["body"])["status_url"], b"")

    def done() -> dict | None:
        answer = stack.invoke("InferFunction", status)
        return answer if answer["statusCode"] != 202 else None

    return wait_until(done, 180, interval_s=0.5), json.loads(accepted["body"])["id"]


def test_model_code_queued_for_the_gpu_is_answered_by_the_gpu_worker(
    stack: DeployedStack, gpu_worker: None
):
    # When a respond-async request for it reaches the infer function
    answer, _ = _queued(stack, "doubler", BODY)
    # Then the status URL answers the model code's outputs
    assert answer["statusCode"] == 200, answer
    assert json.loads(answer["body"])["outputs"][0]["data"] == [2, 4, 6]
    stack.assert_no_denials()


def _queued_step(stack: DeployedStack, value: int, start: bool, end: bool) -> int:
    body = {
        "inputs": [{"name": "INPUT", "datatype": "INT32", "shape": [1, 1], "data": [value]}],
        "parameters": {"sequence_id": "g1", "sequence_start": start, "sequence_end": end},
    }
    answer, _ = _queued(stack, "gpu_wide", body)
    assert answer["statusCode"] == 200, answer
    return int(json.loads(answer["body"])["outputs"][0]["data"][0])


def test_a_gpu_sequences_state_lives_in_the_catalog_and_the_bucket(
    stack: DeployedStack, gpu_worker: None
):
    # Given a KIND_GPU sequence model whose implicit state is 480 KB (over an item's 400 KB)
    files = sequence_models.wide_accumulator("gpu_wide")
    files["config.pbtxt"] += b"instance_group [{ kind: KIND_GPU }]\n"
    stack.publish("gpu_wide", files)
    # When its steps are queued for the GPU worker, one after the other
    sums = [_queued_step(stack, 5, True, False), _queued_step(stack, 2, False, False)]
    listed = stack.clients.s3.list_objects_v2(
        Bucket=stack.settings.bucket, Prefix="sequence-state/gpu_wide/"
    )
    sums.append(_queued_step(stack, 3, False, True))
    # Then each step met the state the one before left (the record in the catalog table,
    # the state in the bucket while the sequence lived), under the task's role
    assert sums == [5, 7, 10]
    assert listed.get("KeyCount", 0) == 1, listed
    stack.assert_no_denials()


def test_a_large_gpu_request_and_answer_travel_through_the_bucket(
    stack: DeployedStack, gpu_worker: None
):
    # Given a request of 100,000 floats (over a queue message: its body goes to requests/)
    values = [float(i % 97) for i in range(100_000)]
    body = {"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [100_000], "data": values}]}
    # When it is queued for the GPU worker
    answer, request_id = _queued(stack, "doubler", body)
    # Then the worker read the body from the bucket, answered (its large answer stored under
    # results/), and removed the request's body, under the task's role
    assert answer["statusCode"] == 200, answer
    assert json.loads(answer["body"])["outputs"][0]["data"] == [v * 2 for v in values]
    keys = [
        o["Key"]
        for o in stack.clients.s3.list_objects_v2(Bucket=stack.settings.bucket).get("Contents", [])
    ]
    assert f"results/{request_id}" in keys and f"requests/{request_id}" not in keys, keys
    stack.assert_no_denials()


LAMBDA_ONLY = b"""
import os

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    # loads where the infer function checks it, not on the GPU task: code whose dependency
    # the task's image lacks
    def initialize(self, args):
        if "AWS_LAMBDA_FUNCTION_NAME" not in os.environ:
            raise RuntimeError("the library this model needs is not on the GPU task")

    def execute(self, requests):
        return [
            pb_utils.InferenceResponse(
                [pb_utils.Tensor("OUTPUT0", pb_utils.get_input_tensor_by_name(r, "INPUT0")
                 .as_numpy())]
            )
            for r in requests
        ]
"""
CAPTURED = (
    CONFIG
    + b"""
parameters { key: "data_capture" value { string_value: "{\\"sampling_percentage\\": 100}" } }
"""
)


def test_the_gpu_worker_announces_a_failed_load_and_captures_exchanges(
    stack: DeployedStack, gpu_worker: None
):
    # Given a KIND_GPU model whose code fails to load on the task, and one capturing every
    # exchange, and a queue on the stack's bus for the failed one's state changes
    changes = state_changes(stack, "lambda_only")
    stack.publish("lambda_only", {"config.pbtxt": CONFIG, "1/model.py": LAMBDA_ONLY})
    stack.publish("captured", {"config.pbtxt": CAPTURED, "1/model.py": DOUBLER})
    # When a queued request for each reaches the GPU worker
    failed, _ = _queued(stack, "lambda_only", BODY)
    answered, _ = _queued(stack, "captured", BODY)
    # Then the failed load is the version's state, announced on the bus under the task's
    # role, and the other's exchange lands under captures/
    assert failed["statusCode"] >= 500, failed
    [version] = Catalog(stack.clients.dynamodb, stack.settings.table).versions("lambda_only")
    assert version.state == "UNAVAILABLE" and "not on the GPU task" in version.reason, version
    states = changes()
    assert ("READY", "UNAVAILABLE") in states, states
    assert answered["statusCode"] == 200, answered

    def captured() -> list[str]:
        listed = stack.clients.s3.list_objects_v2(
            Bucket=stack.settings.bucket, Prefix="captures/captured/"
        )
        return [o["Key"] for o in listed.get("Contents", [])]

    assert wait_until(captured, 30), "no exchange was captured"
    stack.assert_no_denials()


def test_a_gpu_answer_goes_to_the_reply_queue_the_request_named(
    stack: DeployedStack, gpu_worker: None
):
    # Given a client's reply queue named as the stack allows (<stack>-reply-*)
    sqs = stack.clients.sqs
    reply_url = sqs.create_queue(QueueName=f"{STACK}-reply-gpu")["QueueUrl"]
    # When a producer sends an envelope naming it straight to the GPU queue
    envelope = {**BODY, "id": "gpu-reply-1", "model_name": "doubler", "reply_to": reply_url}
    sqs.send_message(QueueUrl=stack.queue("GpuRequestsQueue").url, MessageBody=json.dumps(envelope))
    # Then the GPU worker, under the task's role, sends the result there
    replies = wait_until(
        lambda: sqs.receive_message(QueueUrl=reply_url, WaitTimeSeconds=1).get("Messages"), 180
    )
    reply = json.loads(replies[0]["Body"])
    assert reply["status"] == "SUCCESS", reply
    assert reply["response"]["outputs"][0]["data"] == [2, 4, 6]
    stack.assert_no_denials()
