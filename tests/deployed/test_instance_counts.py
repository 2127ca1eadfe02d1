"""instance_group.count and max_queue_size on the Lambda path as template.yaml deploys them,
with each InflightStore (the catalog table, or a real redis-server): three execution
environments of the infer function take requests for a model whose config states one
instance and a queue of one, all at once. The model stamps when each execution ran: one ran
at a time (measured), one request waited for it, the third was refused with Triton's 503,
the slots were counted where the parameter says (the function reads it from the template's
variable), and no role was denied a call."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import ExitStack
from typing import Any

import pytest

from lambdaserve.local.http_api_event import http_api_event
from tests.deployed.stack import DeployedStack, deployed
from tests.redis_server import redis_server

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


RUNNING_KEY = f"lambdaserve:inflight:{MODEL}:1:running"


@pytest.fixture(scope="module", params=["dynamodb", "redis"])
def stores(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[DeployedStack, Any]]:
    """The stack with ``InflightStore`` set, and a Redis client where it is redis."""
    parameters = {"EnablePythonModels": "true", "InflightStore": request.param}
    with ExitStack() as scope:
        client = None
        if request.param == "redis":
            import redis

            server = scope.enter_context(redis_server())
            parameters |= {
                "ResponseCacheRedisHost": "127.0.0.1",
                "ResponseCacheRedisPort": str(server.port),
                "ResponseCacheRedisTls": "false",  # the local redis-server speaks plain TCP
            }
            client = redis.Redis(host="127.0.0.1", port=server.port)
        running = scope.enter_context(deployed(tmp_path_factory.mktemp("instances"), parameters))
        running.publish(MODEL, {"config.pbtxt": CONFIG, "1/model.py": STAMPED})
        yield running, client


def request(sleep_s: float) -> dict[str, Any]:
    tensor = {"name": "SLEEP_S", "datatype": "FP32", "shape": [1, 1], "data": [sleep_s]}
    body = json.dumps({"inputs": [tensor]}).encode()
    return http_api_event("POST", f"/v2/models/{MODEL}/infer", body)


def stamps(answer: dict[str, Any]) -> tuple[float, float]:
    outputs = {o["name"]: o["data"][0] for o in json.loads(answer["body"])["outputs"]}
    return outputs["STARTED"], outputs["ENDED"]


def test_one_execution_at_a_time_across_instances_and_the_overflow_is_refused(
    stores: tuple[DeployedStack, Any],
) -> None:
    stack, redis_client = stores
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
        # When each takes a request of four seconds at the same moment (long enough that all
        # three arrive while the first runs, on a loaded machine too: at two, one came late)
        answers: list[dict[str, Any]] = []
        barrier = threading.Barrier(len(invokes))

        def call(invoke: Any) -> None:
            barrier.wait()
            answers.append(invoke(request(4.0)))

        threads = [threading.Thread(target=call, args=(i,)) for i in invokes]
        seen_in_redis = watch_running_slots(redis_client, threads)
    # Then one ran, one waited for the instance and ran after it, and the third found the
    # queue of one full: Triton's 503, word for word
    statuses = sorted(a["statusCode"] for a in answers)
    assert statuses == [200, 200, 503], answers
    [refused] = [a for a in answers if a["statusCode"] == 503]
    assert "Exceeds maximum queue size" in refused["body"], refused
    first, second = sorted(stamps(a) for a in answers if a["statusCode"] == 200)
    assert first[1] <= second[0], f"two executions overlapped: {first} and {second}"
    # and the slots were counted in the store InflightStore names
    if redis_client is not None:
        assert seen_in_redis == 1, "the functions did not count their slots in Redis"
    else:
        item = stack.clients.dynamodb.get_item(
            TableName=stack.settings.table,
            Key={"pk": {"S": f"INFLIGHT#{MODEL}#1"}, "sk": {"S": "SLOTS"}},
        )
        assert "Item" in item, "the functions did not count their slots in the catalog table"
    # and no role was denied a call the slots made
    stack.assert_no_denials()


def watch_running_slots(client: Any, threads: list[threading.Thread]) -> int:
    """Start ``threads`` and wait for them; meanwhile, the most slots Redis held running."""
    most = 0
    for thread in threads:
        thread.start()
    while any(thread.is_alive() for thread in threads):
        if client is not None:
            most = max(most, int(client.zcard(RUNNING_KEY)))
        threading.Event().wait(0.05)
    for thread in threads:
        thread.join()
    return most


def test_a_queued_request_takes_its_slot_in_the_batch_function(
    stores: tuple[DeployedStack, Any],
) -> None:
    stack, redis_client = stores
    # Given a request for the model with one instance, sent with Prefer: respond-async
    event = request(0.5)
    event["headers"]["prefer"] = "respond-async"
    accepted = stack.invoke("InferFunction", event)
    assert accepted["statusCode"] == 202, accepted
    status = http_api_event("GET", json.loads(accepted["body"])["status_url"], b"")
    # When the requests queue's mapping feeds the batcher, and it the infer batch function
    stack.pump(
        "BatcherFunction", lambda: stack.invoke("InferFunction", status)["statusCode"] == 200
    )
    # Then the answer ran the model, its execution counted in the slots store under the
    # batch function's role (an instance count binds every path that runs the model)
    started, ended = stamps(stack.invoke("InferFunction", status))
    assert ended - started >= 0.5
    if redis_client is None:
        item = stack.clients.dynamodb.get_item(
            TableName=stack.settings.table,
            Key={"pk": {"S": f"INFLIGHT#{MODEL}#1"}, "sk": {"S": "SLOTS"}},
        )
        assert "Item" in item, "no slot was counted in the catalog table"
    stack.assert_no_denials()
