"""The async path under attack and under faults, over the moto server: envelope fields are the
server's, a poisoned neighbour fails only itself, and nothing is lost."""

from __future__ import annotations

import json
import uuid
from typing import Any

import numpy as np
import pytest

from lambdaserve.settings import get_settings
from tests import builders
from tests.support import wait_until

ROW = [{"name": "INPUT__0", "datatype": "FP32", "shape": [1, 4], "data": [1, 2, 3, 4]}]


@pytest.fixture
def mlp(stack):
    stack.put("models/mlp/config.pbtxt", b"version_policy: { all { } }")
    stack.put("models/mlp/1/model.onnx", builders.onnx_mlp(4, 3))
    stack.put("models/mlp/77/model.onnx", builders.onnx_mlp(4, 2))
    stack.wait_state("mlp", 1, "READY")
    stack.wait_state("mlp", 77, "READY")
    return stack


def _async(stack, body: Any, path: str = "/v2/models/mlp/versions/1/infer", **headers: str):
    return stack.inference.post(
        path,
        content=body if isinstance(body, bytes) else json.dumps(body).encode(),
        headers={"Prefer": "respond-async", **headers},
    )


def _result(stack, request_id: str, timeout_s: float = 60):
    """The terminal answer (a request sent straight to the queue is unknown until then)."""
    return wait_until(
        lambda: (
            (r := stack.inference.get(f"/v2/requests/{request_id}")).status_code not in (202, 404)
            and r
        ),
        timeout_s,
    )


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("model_version", 77),
        ("model_name", "other"),
        ("payload_key", "requests/someone-elses"),
        ("deadline_ms", 1),
        ("header_length", 3),
        (
            "reply_to",
            "https://sqs.us-east-1.amazonaws.com/000000000000/lambdaserve-repository-events",
        ),
        ("anything_else", True),
    ],
)
def test_envelope_fields_in_the_body_never_take_effect(mlp, field, value):
    mlp.pause_requests()
    # When a client puts a routing field of the envelope into its HTTP body
    response = _async(mlp, {"inputs": ROW, field: value}, path="/v2/models/mlp/infer")
    # Then it is refused, saying which field, and nothing is queued
    assert response.status_code == 400, response.text
    assert field in response.json()["error"]
    assert mlp.queue_depth(mlp.resources.requests.url) == 0


def test_the_route_decides_the_version_and_the_server_the_deadline(mlp):
    # Given an unversioned async request whose timeout parameter asks for a deadline
    response = _async(
        mlp,
        {"inputs": ROW, "parameters": {"timeout": 60_000_000}},
        "/v2/models/mlp/versions/1/infer",
    )
    assert response.status_code == 202
    answer = _result(mlp, response.json()["id"])
    # Then version 1 ran (3 outputs), as the URL says
    assert answer.status_code == 200
    assert answer.json()["model_version"] == "1"
    assert answer.json()["outputs"][0]["shape"] == [1, 3]


def test_reply_to_works_only_for_allowed_queues(mlp, monkeypatch):
    replies = mlp.clients.sqs.create_queue(QueueName=f"lambdaserve-reply-{uuid.uuid4().hex[:6]}")[
        "QueueUrl"
    ]
    prefix = replies.rsplit("/", 1)[0] + "/lambdaserve-reply-*"
    monkeypatch.setenv("LAMBDASERVE_REPLY_TO_ALLOWED", prefix)
    get_settings.cache_clear()
    mlp.process.forget("submitter", settings=get_settings())
    # Given a deployment that allows reply queues named lambdaserve-reply-*
    response = _async(mlp, {"inputs": ROW, "reply_to": replies})
    assert response.status_code == 202, response.text
    # Then the reply arrives there
    message = wait_until(
        lambda: mlp.clients.sqs.receive_message(QueueUrl=replies, WaitTimeSeconds=1).get(
            "Messages"
        ),
        30,
    )
    reply = json.loads(message[0]["Body"])
    assert reply["id"] == response.json()["id"] and reply["status"] == "SUCCESS"
    # And a queue outside the list is refused
    events = mlp.resources.repository_events.url
    refused = _async(mlp, {"inputs": ROW, "reply_to": events})
    assert refused.status_code == 400 and "not a reply queue" in refused.json()["error"]


def test_a_queued_envelope_can_only_read_its_own_stored_body(mlp):
    # Given another request's payload in the bucket
    victim = b'{"inputs": []}'
    mlp.put("requests/victim", victim)
    mlp.pause_requests()
    mlp.clients.sqs.send_message(
        QueueUrl=mlp.resources.requests.url,
        MessageBody=json.dumps(
            {"id": "thief", "model_name": "mlp", "payload_key": "requests/victim"}
        ),
    )
    mlp.resume_requests()
    # Then the thief's request fails on its own, and the victim's body is untouched
    answer = _result(mlp, "thief")
    assert answer.status_code == 400
    assert "payload_key must be 'requests/thief'" in answer.json()["error"]
    body = mlp.clients.s3.get_object(Bucket=mlp.settings.bucket, Key="requests/victim")["Body"]
    assert body.read() == victim


def test_poisoned_neighbours_fail_only_themselves(mlp):
    # Given 200 queued requests whose bodies live in S3, 8 of them poisoned (body deleted)
    mlp.pause_requests()
    rng = np.random.default_rng(3)
    ids = []
    for _ in range(200):
        body, length = builders.binary_v2_request(rng.random((1, 4), dtype=np.float32))
        response = _async(mlp, body, **{"Inference-Header-Content-Length": length})
        assert response.status_code == 202
        ids.append(response.json()["id"])
    poisoned = set(ids[::25])
    for request_id in poisoned:
        mlp.delete(f"requests/{request_id}")
    # When the batcher drains the queue
    mlp.resume_requests(batch_size=10)
    # Then every innocent request succeeds and each poisoned one ends in its own 400
    outcomes = {request_id: _result(mlp, request_id) for request_id in ids}
    innocent_failures = [
        i for i, r in outcomes.items() if i not in poisoned and r.status_code != 200
    ]
    assert innocent_failures == []
    for request_id in poisoned:
        assert outcomes[request_id].status_code == 400
        assert "is gone" in outcomes[request_id].json()["error"]
    # And nothing went to the dead-letter queue
    assert mlp.queue_depth(mlp.resources.requests.dlq_url) == 0
    assert mlp.process.consumer  # the same batcher served it all
