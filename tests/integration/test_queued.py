"""Async requests and the batcher over the moto server: every accepted id ends in exactly
one terminal state; batches form; failures stay with their own request."""

from __future__ import annotations

import json
import uuid
from typing import Any

import numpy as np
import onnxruntime as ort
import pytest

from lambdaserve.queued.inference import RetryableError
from tests import builders
from tests.support import wait_until

MLP = builders.onnx_mlp(4, 3)


def v2(rows: np.ndarray, name: str = "INPUT__0") -> dict[str, Any]:
    return {
        "inputs": [
            {
                "name": name,
                "datatype": "FP32",
                "shape": list(rows.shape),
                "data": rows.ravel().tolist(),
            }
        ]
    }


def submit(stack, body: dict[str, Any], path: str = "/v2/models/mlp/infer") -> str:
    response = stack.inference.post(path, json=body, headers={"Prefer": "respond-async"})
    assert response.status_code == 202, response.text
    answer = response.json()
    assert answer["status_url"] == f"/v2/requests/{answer['id']}"
    return str(answer["id"])


def result(stack, request_id: str, timeout_s: float = 30):
    def done():
        response = stack.inference.get(f"/v2/requests/{request_id}")
        return response if response.status_code != 202 else None

    return wait_until(done, timeout_s)


def enqueue(stack, envelope: dict[str, Any]) -> None:
    stack.clients.sqs.send_message(
        QueueUrl=stack.resources.requests.url, MessageBody=json.dumps(envelope)
    )


def outcome(stack, request_id: str):
    return stack.services and wait_until(
        lambda: (r := _store(stack).get(request_id)) is not None and r.status != "PENDING" and r,
        30,
    )


def _store(stack):
    queued = stack.process.consumer.queued
    return queued._results


@pytest.fixture
def mlp(stack):
    stack.put("models/mlp/1/model.onnx", MLP)
    stack.wait_state("mlp", 1, "READY")
    return stack


def test_100_async_requests_get_100_correct_results_in_batches(mlp):
    rng = np.random.default_rng(7)
    rows = [rng.random((1, 4), dtype=np.float32) for _ in range(100)]
    # Given 100 requests accepted while the batcher is busy elsewhere
    mlp.pause_requests()
    ids = [submit(mlp, v2(r)) for r in rows]
    assert mlp.inference.get(f"/v2/requests/{ids[0]}").status_code == 202
    # When the batcher drains the queue
    mlp.resume_requests()
    # Then every request has its own correct answer
    session = ort.InferenceSession(MLP)
    for request_id, row in zip(ids, rows, strict=True):
        response = result(mlp, request_id)
        assert response.status_code == 200
        got = np.array(response.json()["outputs"][0]["data"], np.float32)
        np.testing.assert_allclose(got, session.run(None, {"INPUT__0": row})[0].ravel(), rtol=1e-6)
    # And some ran in batches larger than one
    [stats] = mlp.inference.get("/v2/models/mlp/stats").json()["model_stats"]
    assert stats["inference_count"] == 100
    assert max(b["batch_size"] for b in stats["batch_stats"]) > 1
    assert stats["execution_count"] < 100


def test_mixed_models_and_versions_in_one_delivery(stack):
    stack.put("models/mlp/config.pbtxt", b"version_policy: { all { } }")
    stack.put("models/mlp/1/model.onnx", builders.onnx_mlp(4, 3))
    stack.put("models/mlp/2/model.onnx", builders.onnx_mlp(4, 2))
    stack.put("models/add_sub/1/model.onnx", builders.onnx_add_sub())
    for model, version in (("mlp", 1), ("mlp", 2), ("add_sub", 1)):
        stack.wait_state(model, version, "READY")
    stack.pause_requests()
    one = np.ones((1, 4), np.float32)
    envelopes = [
        {"id": "m1", "model_name": "mlp", "model_version": 1, **v2(one)},
        {"id": "m2", "model_name": "mlp", "model_version": "2", **v2(one)},
        {"id": "m-default", "model_name": "mlp", **v2(one)},
        {
            "id": "as",
            "model_name": "add_sub",
            "inputs": [
                {"name": "a", "datatype": "FP32", "shape": [1, 4], "data": [1, 2, 3, 4]},
                {"name": "b", "datatype": "FP32", "shape": [1, 4], "data": [1, 1, 1, 1]},
            ],
        },
    ]
    for envelope in envelopes:
        enqueue(stack, envelope)
    stack.resume_requests()
    shapes = {}
    for envelope in envelopes:
        record = outcome(stack, envelope["id"])
        assert record.status == "SUCCESS", record.error
        body = json.loads(record.body)
        shapes[envelope["id"]] = (body["model_version"], body["outputs"][0]["shape"])
    assert shapes["m1"] == ("1", [1, 3])
    assert shapes["m2"] == ("2", [1, 2])
    assert shapes["m-default"] == ("2", [1, 2])
    assert json.loads(outcome(stack, "as").body)["outputs"][0]["data"] == [2, 3, 4, 5]


def test_a_bad_request_ends_as_its_own_error_while_the_others_succeed(mlp):
    mlp.pause_requests()
    one = np.ones((1, 4), np.float32)
    for i in range(5):
        enqueue(mlp, {"id": f"good-{i}", "model_name": "mlp", **v2(one)})
    enqueue(mlp, {"id": "bad-shape", "model_name": "mlp", **v2(np.ones((1, 6), np.float32))})
    enqueue(mlp, {"id": "no-model", "model_name": "ghost", **v2(one)})
    mlp.resume_requests()
    for i in range(5):
        assert outcome(mlp, f"good-{i}").status == "SUCCESS"
    bad = outcome(mlp, "bad-shape")
    assert (bad.status, bad.http_status) == ("ERROR", 400)
    assert "expected shape [-1, 4], got [1, 6]" in bad.error
    assert outcome(mlp, "no-model").http_status == 404
    response = mlp.inference.get("/v2/requests/bad-shape")
    assert response.status_code == 400 and "INPUT__0" in response.json()["error"]


class FailingInvoker:
    def __init__(self) -> None:
        self.calls = 0

    def invoke(self, envelopes):
        self.calls += 1
        raise RetryableError("TooManyRequestsException: Rate Exceeded")


def test_an_infer_failure_is_retried_then_dead_lettered_with_nothing_lost(mlp):
    # Given the infer function failing on every call (throttled)
    queued = mlp.process.consumer.queued
    failing = FailingInvoker()
    queued._invoker = failing
    ids = [submit(mlp, v2(np.ones((1, 4), np.float32))) for _ in range(3)]
    # Then every message reaches the DLQ after maxReceiveCount deliveries
    dlq = mlp.resources.requests.dlq_url

    def dead_lettered():
        attributes = mlp.clients.sqs.get_queue_attributes(
            QueueUrl=dlq, AttributeNames=["ApproximateNumberOfMessages"]
        )["Attributes"]
        return int(attributes["ApproximateNumberOfMessages"]) == 3

    wait_until(dead_lettered, 40)
    # And every accepted id ends in exactly one terminal state that says what happened
    for request_id in ids:
        response = result(mlp, request_id)
        assert response.status_code == 503
        assert "after 3 attempts" in response.json()["error"]
        assert response.json()["status"] == "ERROR"
    assert failing.calls >= 3


def test_duplicate_deliveries_produce_one_result_and_one_reply(mlp):
    reply_queue = mlp.clients.sqs.create_queue(QueueName=f"replies-{uuid.uuid4().hex[:8]}")[
        "QueueUrl"
    ]
    mlp.pause_requests()
    envelope = {
        "id": "dup-1",
        "model_name": "mlp",
        "reply_to": reply_queue,
        **v2(np.ones((1, 4), np.float32)),
    }
    for _ in range(3):
        enqueue(mlp, envelope)
    mlp.resume_requests()
    first = outcome(mlp, "dup-1")
    wait_until(lambda: mlp.queue_depth(mlp.resources.requests.url) == 0, 20)
    assert _store(mlp).get("dup-1").finished_at_ms == first.finished_at_ms
    replies = mlp.clients.sqs.receive_message(
        QueueUrl=reply_queue, MaxNumberOfMessages=10, WaitTimeSeconds=1
    ).get("Messages", [])
    assert len(replies) == 1
    reply = json.loads(replies[0]["Body"])
    assert reply["id"] == "dup-1" and reply["status"] == "SUCCESS"
    assert reply["response"]["outputs"][0]["shape"] == [1, 3]


def test_a_reply_too_large_for_one_message_says_where_its_body_lies(stack):
    # Given a model answering about 400 KB of JSON to a small request, and a reply queue
    stack.put("models/expand/1/model.onnx", builders.onnx_expand(40_000))
    stack.wait_state("expand", 1, "READY")
    reply_queue = stack.clients.sqs.create_queue(QueueName=f"replies-{uuid.uuid4().hex[:8]}")[
        "QueueUrl"
    ]
    # When a queued request names the queue
    rows = np.full((1, 1), 1 / 7, np.float32)
    enqueue(stack, {"id": "big-reply", "model_name": "expand", "reply_to": reply_queue,
                    **v2(rows, name="x")})  # fmt: skip
    replies = wait_until(
        lambda: stack.clients.sqs.receive_message(QueueUrl=reply_queue, WaitTimeSeconds=1).get(
            "Messages"
        ),
        30,
    )
    # Then the reply (over one SQS message's 256 KB) names the stored body instead of
    # failing to send, and that body is the whole answer
    reply = json.loads(replies[0]["Body"])
    assert (reply["id"], reply["status"], reply["too_large_to_inline"]) == (
        "big-reply", "SUCCESS", True
    ), reply  # fmt: skip
    stored = stack.clients.s3.get_object(Bucket=stack.settings.bucket, Key=reply["body_key"])
    [output] = json.loads(stored["Body"].read())["outputs"]
    np.testing.assert_allclose(output["data"], np.full(40_000, 1 / 7, np.float32), rtol=1e-6)


def test_large_requests_and_results_round_trip_through_s3(stack):
    stack.put("models/echo/1/model.onnx", builders.onnx_identity(784))
    stack.wait_state("echo", 1, "READY")
    rows = np.random.default_rng(0).random((64, 784), dtype=np.float32)  # ~1 MB of JSON
    request_id = submit(stack, v2(rows, name="x"), path="/v2/models/echo/infer")
    response = result(stack, request_id)
    assert response.status_code == 200
    np.testing.assert_allclose(
        np.array(response.json()["outputs"][0]["data"], np.float32).reshape(64, 784), rows
    )
    bucket = stack.settings.bucket
    keys = [o["Key"] for o in stack.clients.s3.list_objects_v2(Bucket=bucket).get("Contents", [])]
    assert f"results/{request_id}" in keys  # the result lives in S3
    assert f"requests/{request_id}" not in keys  # the request payload is cleaned up


def test_binary_async_requests_travel_through_s3(mlp):
    rows = np.arange(8, dtype=np.float32).reshape(2, 4)
    body, header_length = builders.binary_v2_request(rows)
    response = mlp.inference.post(
        "/v2/models/mlp/infer",
        content=body,
        headers={"Prefer": "respond-async", "Inference-Header-Content-Length": header_length},
    )
    assert response.status_code == 202
    answer = result(mlp, response.json()["id"])
    # tritonclient asked for binary outputs: the result comes back as Triton answers them
    assert answer.status_code == 200
    length = int(answer.headers["inference-header-content-length"])
    header = json.loads(answer.content[:length])
    assert header["outputs"][0]["shape"] == [2, 3]
    got = np.frombuffer(answer.content[length:], np.float32).reshape(2, 3)
    np.testing.assert_allclose(got, ort.InferenceSession(MLP).run(None, {"INPUT__0": rows})[0])


def test_an_expired_request_ends_as_a_timeout(mlp):
    mlp.pause_requests()
    body = {**v2(np.ones((1, 4), np.float32)), "parameters": {"timeout": 1000}}  # 1 ms
    request_id = submit(mlp, body)
    import time

    time.sleep(0.05)
    mlp.resume_requests()
    response = result(mlp, request_id)
    assert response.status_code == 504
    assert response.json()["status"] == "TIMEOUT"


@pytest.mark.parametrize(
    ("body", "path", "status"),
    [
        (v2(np.ones((1, 5), np.float32)), "/v2/models/mlp/infer", 400),
        (v2(np.ones((1, 4), np.float32)), "/v2/models/ghost/infer", 404),
        ({"inputs": "nope"}, "/v2/models/mlp/infer", 400),
    ],
)
def test_async_submission_rejects_what_cannot_succeed_at_once(mlp, body, path, status):
    response = mlp.inference.post(path, json=body, headers={"Prefer": "respond-async"})
    assert response.status_code == status
    assert "error" in response.json()
