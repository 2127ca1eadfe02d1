"""The event pump delivers SQS messages as a Lambda event source mapping does."""

from __future__ import annotations

import json
from typing import Any

from lambdaserve.processes.event_pump import EventPump, PumpConfig
from tests import builders
from tests.support import wait_until


def queue_depth(stack, url: str) -> int:
    attributes = stack.clients.sqs.get_queue_attributes(
        QueueUrl=url,
        AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"],
    )["Attributes"]
    return int(attributes["ApproximateNumberOfMessages"]) + int(
        attributes["ApproximateNumberOfMessagesNotVisible"]
    )


def test_a_poison_message_is_retried_then_dead_lettered_while_good_ones_land(stack):
    events = stack.resources.repository_events
    # Given a good upload and a message that is not an S3 notification on the same queue
    stack.clients.sqs.send_message(QueueUrl=events.url, MessageBody=json.dumps({"junk": True}))
    stack.put("models/m/1/model.onnx", builders.onnx_mlp())
    # Then the good event lands in the catalog
    stack.wait_state("m", 1, "READY")

    # And the poison message reaches the DLQ after maxReceiveCount receives, nothing else does
    def dead_lettered() -> list[dict[str, Any]]:
        return stack.clients.sqs.receive_message(
            QueueUrl=events.dlq_url, MaxNumberOfMessages=10
        ).get("Messages", [])

    [message] = wait_until(dead_lettered, timeout_s=30)
    assert json.loads(message["Body"]) == {"junk": True}
    wait_until(lambda: queue_depth(stack, events.url) == 0, timeout_s=10)


def test_batch_item_failures_are_redelivered_and_successes_deleted(stack):
    # Given our own queue pair and a handler that fails 'flaky' records on their first delivery
    stack.pause_requests()
    queue = stack.resources.requests
    seen: dict[str, int] = {}

    def handler(event: dict[str, Any], _: Any) -> dict[str, Any]:
        failures = []
        for record in event["Records"]:
            body = record["body"]
            seen[body] = seen.get(body, 0) + 1
            assert record["eventSource"] == "aws:sqs" and record["eventSourceARN"] == queue.arn
            if body.startswith("flaky") and seen[body] == 1:
                failures.append({"itemIdentifier": record["messageId"]})
        return {"batchItemFailures": failures}

    pump = EventPump(
        stack.clients.sqs, queue.url, queue.arn, handler, "t", config=PumpConfig(retry_delay_s=1)
    )
    for body in ("ok-1", "ok-2", "flaky-1"):
        stack.clients.sqs.send_message(QueueUrl=queue.url, MessageBody=body)
    pump.start()
    try:
        # Then every message is handled, the flaky one exactly twice, and the queue drains
        wait_until(lambda: seen.get("flaky-1") == 2 and queue_depth(stack, queue.url) == 0, 20)
        assert seen == {"ok-1": 1, "ok-2": 1, "flaky-1": 2}
    finally:
        pump.stop()


def test_a_handler_that_raises_returns_the_whole_batch(stack):
    stack.pause_requests()
    queue = stack.resources.requests
    calls: list[int] = []

    def handler(event: dict[str, Any], _: Any) -> None:
        calls.append(len(event["Records"]))
        if len(calls) == 1:
            raise RuntimeError("throttled")

    pump = EventPump(
        stack.clients.sqs, queue.url, queue.arn, handler, "t", config=PumpConfig(retry_delay_s=1)
    )
    stack.clients.sqs.send_message(QueueUrl=queue.url, MessageBody="x")
    pump.start()
    try:
        wait_until(lambda: len(calls) >= 2 and queue_depth(stack, queue.url) == 0, 20)
    finally:
        pump.stop()
    assert calls[:2] == [1, 1]
