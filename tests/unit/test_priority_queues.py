"""Triton's priority levels on queued work: one requests queue per level (template.yaml's
PriorityQueues). The submitter picks a request's queue as ``serve`` picks its level, and the
batcher tops up and leases on the queue a delivery came from."""

from __future__ import annotations

import json
from dataclasses import replace

import orjson
import pytest

from lambdaserve.config.dynamic_batching import DynamicBatching
from lambdaserve.queued.submit import queue_level
from lambdaserve.settings import Settings
from lambdaserve.wiring.aws import AwsClients
from lambdaserve.wiring.inference import build_model_server
from lambdaserve.wiring.process import Process
from lambdaserve.wiring.queues import build_consumer_services, build_queue_services
from tests import builders

LEVELS = DynamicBatching(priority_levels=3, default_priority_level=2)
CONFIG = b"""
max_batch_size: 8
input [ { name: "INPUT__0" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "OUTPUT__0" data_type: TYPE_FP32 dims: [ 3 ] } ]
dynamic_batching { priority_levels: 2 default_priority_level: 1 }
"""
LEVEL_2 = "lambdaserve-requests-2"


@pytest.mark.parametrize(
    ("priority", "level"),
    [(1, 1), (2, 2), (3, 3), (0, 2), (None, 2), (7, 2), ("high", 2), (True, 2), (-1, 2)],
)
def test_a_requests_queue_is_its_level_as_serve_reads_its_priority(priority, level):
    # Given a model with priority_levels 3, default level 2, and three deployed level queues
    parameters = {} if priority is None else {"priority": priority}
    # When a request asks for ``priority``
    chosen = queue_level(LEVELS, parameters, 3)
    # Then it waits in the queue of the level serve's batcher gives it
    assert chosen == level == max(LEVELS.level_of(parameters), 1)


def test_a_level_past_the_deployed_queues_waits_in_the_last_and_no_levels_is_level_1():
    # Given two deployed level queues
    # When a request asks for level 3 of 3, or its model has no priority_levels
    # Then level 3 waits in queue 2, a model without levels in queue 1, one queue takes all
    assert queue_level(LEVELS, {"priority": 3}, 2) == 2
    assert queue_level(None, {"priority": 2}, 2) == 1
    assert queue_level(DynamicBatching(), {"priority": 2}, 2) == 1
    assert [queue_level(LEVELS, {"priority": p}, 1) for p in (1, 2, 3)] == [1, 1, 1]


def test_the_level_queues_are_read_from_one_variable_in_order():
    # Given template.yaml's variable with levels 2 and 3's queues
    env = {"LAMBDASERVE_PRIORITY_QUEUES": "s-RequestsQueue2, s-RequestsQueue3"}
    # When the settings are read (and without it)
    # Then they are in level order; none without it (one level)
    assert Settings.from_env(env).priority_queues == ("s-RequestsQueue2", "s-RequestsQueue3")
    assert Settings.from_env({}).priority_queues == ()


@pytest.fixture
def levels(aws):
    """A level-2 queue beside the requests queue, and a model with two priority levels."""
    aws.clients.sqs.create_queue(QueueName=LEVEL_2)
    settings = replace(aws.settings, priority_queues=(LEVEL_2,))
    aws.put("models/mlp/config.pbtxt", CONFIG)
    aws.put("models/mlp/1/model.onnx", builders.onnx_mlp(4, 3))
    aws.services.registrar.reconcile_model("mlp")
    return settings


def test_an_async_request_is_queued_in_its_priority_levels_queue(aws, levels):
    # Given the process's submitter (its composition root) over two level queues
    sqs = aws.clients.sqs
    submitter = Process(levels, clients=aws.clients).submitter()
    row = {"name": "INPUT__0", "datatype": "FP32", "shape": [1, 4], "data": [0.0] * 4}

    def submit(parameters: dict) -> str:
        body = orjson.dumps({"inputs": [row], "parameters": parameters})
        return submitter.submit("mlp", None, body, None)

    # When requests ask for priority 2, 1, nothing (the default level 1) and 9 (above the
    # model's levels: the default)
    second = submit({"priority": 2})
    first = {submit({"priority": 1}), submit({}), submit({"priority": 9})}

    # Then priority 2 waits in the level-2 queue, the rest in the requests queue
    def queued(url: str) -> set[str]:
        messages = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10).get("Messages", [])
        return {json.loads(m["Body"])["id"] for m in messages}

    assert queued(sqs.get_queue_url(QueueName=LEVEL_2)["QueueUrl"]) == {second}
    assert queued(aws.resources.requests.url) == first


def test_the_batcher_tops_up_and_leases_on_the_queue_a_delivery_came_from(aws, levels):
    # Given a message waiting in each level's queue
    sqs = aws.clients.sqs
    level_2 = sqs.get_queue_url(QueueName=LEVEL_2)["QueueUrl"]
    arn = sqs.get_queue_attributes(QueueUrl=level_2, AttributeNames=["QueueArn"])
    sqs.send_message(QueueUrl=level_2, MessageBody="second")
    sqs.send_message(QueueUrl=aws.resources.requests.url, MessageBody="first")
    services = build_queue_services(levels, aws.clients)
    server = build_model_server(levels, aws.clients)
    consumer = build_consumer_services(levels, services, lambda: server, AwsClients(levels))
    # When a delivery from the level-2 queue's mapping is topped up
    taken = consumer.delivery(arn["Attributes"]["QueueArn"]).topup.fetch()
    # Then the top-up takes the level-2 queue's message, and one with no source the requests
    # queue's
    assert [message.body for message, _ in taken] == ["second"]
    assert [message.body for message, _ in consumer.delivery(None).topup.fetch()] == ["first"]
