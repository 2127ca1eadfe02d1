"""Shadow traffic on the Lambda path (queued.shadows): the infer function's handler answers
a label, its shadow copy leaves on the requests queue marked ``shadow_of``; the batcher's
domain runs it on the shadow version and records it through payload capture, keeping no
result. In-process moto; the deployed journey runs the same under the functions' roles."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest

from lambdaserve.catalog.label_weights import parse_label_weights
from lambdaserve.handlers import infer
from lambdaserve.local.http_api_event import http_api_event
from lambdaserve.processes.event_pump import LocalContext
from lambdaserve.queued.inference import QueueMessage
from lambdaserve.wiring.process import Process, install
from tests import builders
from tests.support import wait_until

BODY = json.dumps(
    {"inputs": [{"name": "INPUT__0", "datatype": "FP32", "shape": [1, 4], "data": [1, 2, 3, 4]}]}
).encode()


@pytest.fixture
def lambda_process(aws: Any) -> Process:
    """echo 1 (an MLP) under label prod, shadowed at 100% by echo 2 (which takes ``x``: it
    fails every copy); the process as the infer function builds it in Lambda."""
    aws.put("models/echo/config.pbtxt", b"version_policy: { all { } }")
    aws.put("models/echo/1/model.onnx", builders.onnx_mlp())
    aws.put("models/echo/2/model.onnx", builders.onnx_identity(4))
    aws.services.registrar.reconcile_model("echo")
    weights = {"versions": {"1": 100}, "shadow": {"version": 2, "percent": 100}}
    aws.services.manager.set_label_weights("echo", "prod", parse_label_weights(weights))
    process = Process(dataclasses.replace(aws.settings, in_lambda=True), clients=aws.clients)
    install(process)
    return process


def queued(process: Process) -> list[dict[str, Any]]:
    queue = process.queue
    answer = queue.sqs.receive_message(QueueUrl=queue.requests_queue_url(), MaxNumberOfMessages=10)
    return list(answer.get("Messages", []))


def test_the_infer_functions_shadow_copy_is_queued_then_recorded_by_the_batcher(lambda_process):
    process = lambda_process
    # When the infer function's handler answers the label
    event = http_api_event("POST", "/v2/models/echo/versions/prod/infer", BODY)
    answer = infer.api_handler(event, LocalContext("infer"))
    # Then the client has version 1's answer
    assert answer["statusCode"] == 200, answer
    assert answer["headers"]["lambdaserve-model-version"] == "1"
    # and a copy waits on the requests queue for version 2, marked the shadow of version 1
    [message] = wait_until(lambda: queued(process), 10, 0.1)
    envelope = json.loads(message["Body"])
    assert (envelope["model_version"], envelope["shadow_of"]) == (2, 1)
    assert envelope["inputs"] == json.loads(BODY)["inputs"]
    # When the batcher's domain runs it
    retry = process.consumer.queued.process([QueueMessage(message["MessageId"], message["Body"])])
    # Then it is not retried, and no result is kept for it
    assert retry == set()
    assert process.queue.results.get(envelope["id"]) is None
    # and payload capture holds the shadow's exchange, its error included
    process.data_capture.flush()
    s3, bucket = process.clients.s3, process.settings.bucket
    [key] = [
        o["Key"] for o in s3.list_objects_v2(Bucket=bucket)["Contents"] if "captures/" in o["Key"]
    ]
    assert key.startswith("captures/echo/2/")
    record = json.loads(s3.get_object(Bucket=bucket, Key=key)["Body"].read())
    assert record["eventMetadata"]["shadow"] is True
    assert record["eventMetadata"]["primaryVersion"] == 1
    assert "x" in json.loads(record["captureData"]["endpointOutput"]["data"])["error"]
    assert (
        json.loads(record["captureData"]["endpointInput"]["data"])["inputs"][0]["name"]
        == "INPUT__0"
    )
