"""The deployed batcher path with in-process moto: Lambda's 6 MB limit both ways (against a
Lambda client that enforces it, running the real batch entry point), a transient failure
of one request's body, and the visibility lease that returns a crashed run's messages."""

from __future__ import annotations

import io
import json
import time
from typing import Any

import numpy as np
import pytest
from botocore.exceptions import ClientError

from lambdaserve.errors import StorageUnavailable
from lambdaserve.handlers import infer
from lambdaserve.processes.event_pump import LocalContext
from lambdaserve.queued.delivery import VisibilityLease
from lambdaserve.queued.inference import InProcessInvoker, QueuedInference, QueueMessage
from lambdaserve.queued.invokers import LambdaInvoker
from lambdaserve.queued.results import PayloadStore, RequestEnvelope
from tests import builders

LAMBDA_LIMIT = 6 * 1024 * 1024  # synchronous invoke: request and response, each


class SizeLimitedLambda:
    """A Lambda client that runs the real batch entry point and enforces the 6 MB limits as
    the Lambda service documents them (request refused; response an error instead)."""

    def __init__(self) -> None:
        self.request_sizes: list[int] = []
        self.response_sizes: list[int] = []

    def invoke(self, FunctionName: str, Payload: bytes) -> dict[str, Any]:
        self.request_sizes.append(len(Payload))
        if len(Payload) > LAMBDA_LIMIT:
            raise ClientError(
                {
                    "Error": {
                        "Code": "RequestEntityTooLargeException",
                        "Message": f"Request must be smaller than {LAMBDA_LIMIT} bytes",
                    }
                },
                "Invoke",
            )
        answer = json.dumps(infer.batch_handler(json.loads(Payload), LocalContext("b"))).encode()
        self.response_sizes.append(len(answer))
        if len(answer) > LAMBDA_LIMIT:
            error = {"errorType": "Function.ResponseSizeTooLarge", "errorMessage": "too large"}
            return {"FunctionError": "Unhandled", "Payload": io.BytesIO(json.dumps(error).encode())}
        return {"StatusCode": 200, "Payload": io.BytesIO(answer)}


@pytest.fixture
def echo(aws, monkeypatch):
    aws.put("models/echo/1/model.onnx", builders.onnx_identity(784))
    aws.services.registrar.reconcile_model("echo")
    process = aws.use_process()
    return process.server(), process.queue


def _envelope(request_id: str, rows: np.ndarray) -> RequestEnvelope:
    return RequestEnvelope(
        id=request_id,
        model_name="echo",
        request={
            "inputs": [
                {"name": "x", "datatype": "FP32", "shape": list(rows.shape), "data": rows.tolist()}
            ]
        },
    )


def test_sixty_146kb_requests_fit_lambdas_6mb_limit_both_ways(echo):
    _, queue = echo
    lambda_client = SizeLimitedLambda()
    queued = QueuedInference(
        queue.results, queue.payloads, LambdaInvoker(lambda_client, "infer"), max_receive_count=3
    )
    # Given 60 queued requests of ~146 KB each (8.8 MB in all, each answer as large)
    rng = np.random.default_rng(0)
    rows = {f"r{i}": rng.random((9, 784), dtype=np.float32) for i in range(60)}
    envelopes = {k: _envelope(k, v) for k, v in rows.items()}
    assert 140_000 < len(json.dumps(envelopes["r0"].to_message())) < 192 * 1024
    for envelope in envelopes.values():
        queue.results.create_pending(envelope)
    messages = [QueueMessage(k, json.dumps(e.to_message())) for k, e in envelopes.items()]
    # When the batcher processes them in one delivery
    retry = queued.process(messages)
    # Then nothing is retried, and every invoke stayed within the limit both ways
    assert retry == set(), queue.results.get(sorted(retry)[0])
    assert len(lambda_client.request_sizes) >= 2
    assert max(lambda_client.request_sizes) <= LAMBDA_LIMIT
    assert max(lambda_client.response_sizes) <= LAMBDA_LIMIT
    # And every request has its own correct answer (the largest ones via S3)
    for request_id, expected in rows.items():
        record = queue.results.get(request_id)
        assert record is not None and record.status == "SUCCESS", record
        output = json.loads(record.body)["outputs"][0]
        np.testing.assert_allclose(np.array(output["data"], np.float32).reshape(9, 784), expected)


class FlakyPayloads(PayloadStore):
    """S3 failing once for one request's body (a throttle, a network blip)."""

    def __init__(self, inner: PayloadStore, flaky_key: str) -> None:
        self._inner = inner
        self._flaky_key = flaky_key
        self.failures = 0

    def get(self, key: str) -> bytes:
        if key == self._flaky_key and self.failures == 0:
            self.failures += 1
            raise StorageUnavailable(f"reading {key} failed: SlowDown")
        return self._inner.get(key)

    def put(self, request_id: str, body: bytes) -> str:
        return self._inner.put(request_id, body)

    def delete(self, key: str) -> None:
        self._inner.delete(key)


def test_a_transient_failure_of_one_body_retries_that_request_alone(echo):
    server, queue = echo
    rows = np.ones((1, 784), np.float32)
    envelopes = []
    for i in range(5):
        body = json.dumps(_envelope(f"s{i}", rows).request).encode()
        envelopes.append(
            RequestEnvelope(
                id=f"s{i}", model_name="echo", payload_key=queue.payloads.put(f"s{i}", body)
            )
        )
    flaky = FlakyPayloads(queue.payloads, "requests/s2")
    queued = QueuedInference(
        queue.results, flaky, InProcessInvoker(lambda: server, flaky), max_receive_count=3
    )
    messages = [QueueMessage(e.id, json.dumps(e.to_message())) for e in envelopes]
    # When one request's body cannot be read this time
    retry = queued.process(messages)
    # Then only that request goes back to the queue; its neighbours are answered
    assert retry == {"s2"}
    assert [queue.results.get(f"s{i}").status for i in (0, 1, 3, 4)] == ["SUCCESS"] * 4
    # And the redelivery answers it
    assert queued.process([QueueMessage("s2", messages[2].body, receive_count=2)]) == set()
    assert queue.results.get("s2").status == "SUCCESS"


def _visible(sqs, url: str) -> int:
    attributes = sqs.get_queue_attributes(
        QueueUrl=url, AttributeNames=["ApproximateNumberOfMessages"]
    )["Attributes"]
    return int(attributes["ApproximateNumberOfMessages"])


def test_a_crashed_run_returns_its_messages_within_the_lease(aws):
    sqs, url = aws.clients.sqs, aws.resources.requests.url
    # Given a message received with the queue's long visibility timeout (420 s deployed)
    sqs.send_message(QueueUrl=url, MessageBody="{}")
    [message] = sqs.receive_message(QueueUrl=url, VisibilityTimeout=360)["Messages"]
    lease = VisibilityLease(sqs, lambda: url, lease_s=2)
    # When a run takes it on a 2 s lease and dies without renewing (a crash)
    lease._extend([message["ReceiptHandle"]])
    started = time.monotonic()
    # Then it is back in the queue after the lease, not after 360 s
    while _visible(sqs, url) == 0:
        assert time.monotonic() - started < 30
        time.sleep(0.2)


def test_a_live_run_keeps_its_messages_past_the_lease(aws):
    sqs, url = aws.clients.sqs, aws.resources.requests.url
    sqs.send_message(QueueUrl=url, MessageBody="{}")
    [message] = sqs.receive_message(QueueUrl=url, VisibilityTimeout=360)["Messages"]
    lease = VisibilityLease(sqs, lambda: url, lease_s=4)
    # Given a run that holds its message on a 4 s lease, renewed every 1.3 s
    with lease.hold([message["ReceiptHandle"]]):
        # When the work takes longer than the lease
        deadline = time.monotonic() + 6
        while time.monotonic() < deadline:
            # Then nobody else can receive the message meanwhile
            assert _visible(sqs, url) == 0
            time.sleep(0.3)
    # And after the run it comes back within one lease (had it not been deleted)
    started = time.monotonic()
    while _visible(sqs, url) == 0:
        assert time.monotonic() - started < 30
        time.sleep(0.2)


def test_binary_answers_cross_the_invoke_and_keep_their_header_length(echo):
    _, queue = echo
    lambda_client = SizeLimitedLambda()
    queued = QueuedInference(
        queue.results, queue.payloads, LambdaInvoker(lambda_client, "infer"), max_receive_count=3
    )
    rows = np.random.default_rng(1).random((2, 784), dtype=np.float32)
    body, header_length = builders.binary_v2_request(rows, name="x")  # binary outputs asked
    envelope = RequestEnvelope(
        id="bin-1",
        model_name="echo",
        payload_key=queue.payloads.put("bin-1", body),
        header_length=int(header_length),
    )
    queue.results.create_pending(envelope)
    assert queued.process([QueueMessage("bin-1", json.dumps(envelope.to_message()))]) == set()
    record = queue.results.get("bin-1")
    assert record.status == "SUCCESS" and record.header_length is not None
    header = json.loads(record.body[: record.header_length])
    assert header["outputs"][0]["parameters"]["binary_data_size"] == rows.nbytes
    got = np.frombuffer(record.body[record.header_length :], np.float32).reshape(2, 784)
    np.testing.assert_array_equal(got, rows)
