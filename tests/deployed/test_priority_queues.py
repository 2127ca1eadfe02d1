"""Triton's priority levels on queued work as template.yaml deploys them (PriorityQueues=2):
each level's async requests wait in their own queue, and each queue feeds the batcher through
its own event source mapping, with its own MaximumConcurrency."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from lambdaserve.local.http_api_event import http_api_event
from lambdaserve.processes.event_pump import EventPump
from tests import builders
from tests.deployed.stack import DeployedStack, deployed

TWO_LEVELS = {"PriorityQueues": "2"}
CONFIG = b"""
max_batch_size: 8
input [ { name: "INPUT__0" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "OUTPUT__0" data_type: TYPE_FP32 dims: [ 3 ] } ]
dynamic_batching { priority_levels: 2 default_priority_level: 2 }
"""
ROW = {"name": "INPUT__0", "datatype": "FP32", "shape": [1, 4], "data": [1.0, 2.0, 3.0, 4.0]}


def publish(stack: DeployedStack) -> None:
    stack.publish("ranked", {"config.pbtxt": CONFIG, "1/model.onnx": builders.onnx_mlp(4, 3)})


def submit(stack: DeployedStack, priority: int) -> dict[str, Any]:
    """An async request at ``priority``; its status request."""
    body = json.dumps({"inputs": [ROW], "parameters": {"priority": priority}}).encode()
    event = http_api_event("POST", "/v2/models/ranked/infer", body)
    event["headers"]["prefer"] = "respond-async"
    accepted = stack.http(event)
    stack.assert_no_denials()  # a denied call fails the journey by name, not by its effect
    assert accepted["statusCode"] == 202, accepted
    return http_api_event("GET", json.loads(accepted["body"])["status_url"], b"")


def answered(stack: DeployedStack, status: dict[str, Any]) -> bool:
    return bool(stack.http(status)["statusCode"] == 200)


def waiting(stack: DeployedStack, logical: str) -> int:
    url = stack.queue(logical).url
    found = stack.clients.sqs.get_queue_attributes(
        QueueUrl=url, AttributeNames=["ApproximateNumberOfMessages"]
    )
    return int(found["Attributes"]["ApproximateNumberOfMessages"])


def mapping_of(stack: DeployedStack, queue: str) -> EventPump:
    """The batcher's event source mapping of ``queue``, as Lambda polls it."""
    sources = stack.shape.function("BatcherFunction").sources
    pumps = stack.pumps("BatcherFunction", poll_wait_s=1, retry_delay_s=1)
    return next(p for s, p in zip(sources, pumps, strict=True) if s.queue == queue)


def queue_at_priority_2(stack: DeployedStack) -> None:
    """The journey the template mutations break: a priority-2 request accepted."""
    publish(stack)
    submit(stack, 2)


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DeployedStack]:
    # Given the stack with two priority queues and a model with two priority levels
    with deployed(tmp_path_factory.mktemp("priority-queues"), TWO_LEVELS) as running:
        publish(running)
        yield running


def test_each_priority_level_waits_in_its_own_queue_and_is_answered_by_its_own_mapping(
    stack: DeployedStack,
):
    # When a backlog of priority-2 requests is queued, then one priority-1 request
    backlog = [submit(stack, 2) for _ in range(3)]
    urgent = submit(stack, 1)
    # Then the priority-2 requests wait in the level-2 queue, the priority-1 one in level 1's
    assert (waiting(stack, "RequestsQueue2"), waiting(stack, "RequestsQueue")) == (3, 1)
    # and each queue has its own mapping on the batcher, level 2's capped as the template says
    capped = {s.queue: s.max_concurrency for s in stack.shape.function("BatcherFunction").sources}
    assert capped == {"RequestsQueue": None, "RequestsQueue2": 5}
    # When level 1's mapping polls once
    mapping_of(stack, "RequestsQueue").poll_once()
    stack.assert_no_denials()
    # Then the priority-1 request is answered while the whole level-2 backlog still waits
    assert answered(stack, urgent)
    assert [answered(stack, status) for status in backlog] == [False] * 3
    assert waiting(stack, "RequestsQueue2") == 3
    # When another priority-1 request comes, and level 2's own mapping polls
    later = submit(stack, 1)
    level_2 = mapping_of(stack, "RequestsQueue2")
    for _ in range(10):
        if all(answered(stack, status) for status in backlog):
            break
        level_2.poll_once()
        stack.assert_no_denials()
    # Then the backlog is answered through it, its batches topped up from its own queue only
    assert all(answered(stack, status) for status in backlog)
    assert (waiting(stack, "RequestsQueue2"), waiting(stack, "RequestsQueue")) == (0, 1)
    assert not answered(stack, later)
    # and level 1's mapping answers the later request
    mapping_of(stack, "RequestsQueue").poll_once()
    assert answered(stack, later)
