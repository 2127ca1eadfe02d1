"""instance_group.count and the queue policy on the Lambda path: a version's executions
counted fleet-wide in the catalog table (moto in-process) or a real redis-server; the bound
holds under racing threads, an expired lease is reaped, a release counts once, and the
queue policy refuses with Triton's words."""

from __future__ import annotations

import json
import threading
import time
from dataclasses import replace

import pytest

from lambdaserve.config.dynamic_batching import DynamicBatching, QueuePolicy
from lambdaserve.config.model_config import ModelConfig, build, parse_document
from lambdaserve.errors import QueueRejected
from lambdaserve.handlers import infer
from lambdaserve.local.http_api_event import http_api_event
from lambdaserve.processes.event_pump import LocalContext
from lambdaserve.protocol.http_status import status_for
from lambdaserve.protocol.invocation import invocation_deadline
from lambdaserve.serving.fleet_slots.from_settings import fleet_slots_from
from lambdaserve.serving.fleet_slots.gate import FleetSlots, SlotRefused
from lambdaserve.serving.fleet_slots.records import Limits, SlotKey, Taken
from tests import builders
from tests.redis_server import redis_server

KEY = SlotKey("m", 1)


class OneCallAtATime:
    """A DynamoDB client whose calls run one at a time: DynamoDB applies each conditional write
    to an item atomically, moto's in-process backend does not when threads race (two
    conditional UpdateItems both passed their condition: 3 executions held 2 slots once in CI)."""

    def __init__(self, client: object) -> None:
        self._client = client
        self._lock = threading.Lock()

    def __getattr__(self, name: str) -> object:
        found = getattr(self._client, name)
        if not callable(found):
            return found

        def call(*args: object, **kwargs: object) -> object:
            with self._lock:
                return found(*args, **kwargs)

        return call


@pytest.fixture(params=["dynamodb", "redis"])
def slots(request, aws) -> FleetSlots:
    """The Lambda path's slots over the catalog table, or over a real redis-server."""
    settings = replace(aws.settings, in_lambda=True)
    if request.param == "dynamodb":
        yield fleet_slots_from(settings, OneCallAtATime(aws.clients.dynamodb))
        return
    with redis_server() as found:
        settings = replace(
            settings, inflight_store="redis", redis_host=found.host, redis_port=found.port
        )
        yield fleet_slots_from(settings, aws.clients.dynamodb)


def config(count: int, **policy) -> ModelConfig:
    batching = DynamicBatching(queue_policy=QueuePolicy(**policy)) if policy else None
    return ModelConfig(name="m", stated_instance_count=count, dynamic_batching=batching)


def later(seconds: float = 60) -> float:
    return time.time() + seconds


def test_the_bound_holds_across_racing_instances(slots):
    # Given a version with two instances stated, and eight executions starting at once
    running, most, lock = [0], [0], threading.Lock()
    barrier = threading.Barrier(8)

    def execute():
        barrier.wait()
        with slots.execution("m", 1, config(2), [{}]):
            with lock:
                running[0] += 1
                most[0] = max(most[0], running[0])
            time.sleep(0.05)
            with lock:
                running[0] -= 1

    threads = [threading.Thread(target=execute) for _ in range(8)]
    # When they all run to the end
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    # Then never more than two ran at once, and two did (the others waited, none refused)
    assert most[0] == 2
    assert running[0] == 0


def test_the_queue_refuses_past_max_queue_size_and_the_waiting_go_first(slots):
    # Given one slot held and one request waiting, with max_queue_size 1
    store, limits = slots.store, Limits(1, 1)
    assert store.take(KEY, "a", limits, later(), False) is Taken.RUNNING
    assert store.take(KEY, "b", limits, later(), False) is Taken.WAITING
    # When a third comes / Then it is refused
    assert store.take(KEY, "c", limits, later(), False) is Taken.FULL
    # When the slot is given back / Then a newcomer still finds the queue full, and the
    # waiting one takes the slot
    store.release(KEY, "a", waiting=False)
    assert store.take(KEY, "c", limits, later(), False) is Taken.FULL
    assert store.take(KEY, "b", limits, later(), True) is Taken.RUNNING
    assert store.take(KEY, "c", limits, later(), False) is Taken.WAITING


def test_a_lease_past_its_expiry_is_reaped(slots):
    # Given the one slot held by an environment that died (its lease has expired)
    store, limits = slots.store, Limits(1, 1)
    assert store.take(KEY, "dead", limits, time.time() - 1, False) is Taken.RUNNING
    store.take(KEY, "dead-waiter", limits, time.time() - 1, False)
    # When another execution asks / Then it runs
    assert store.take(KEY, "alive", limits, later(), False) is Taken.RUNNING
    assert store.take(KEY, "next", limits, later(), False) is Taken.WAITING


def test_a_release_twice_gives_back_one_slot(slots):
    # Given two slots, both held
    store, limits = slots.store, Limits(2)
    for lease in ("a", "b"):
        assert store.take(KEY, lease, limits, later(), False) is Taken.RUNNING
    # When one is released twice
    store.release(KEY, "a", waiting=False)
    store.release(KEY, "a", waiting=False)
    # Then one slot is free, not two
    assert store.take(KEY, "c", limits, later(), False) is Taken.RUNNING
    assert store.take(KEY, "d", limits, later(), False) is Taken.WAITING


def test_a_full_queue_is_tritons_503(slots):
    # Given a version with one instance and max_queue_size 1: one running, one waiting
    slots.store.take(KEY, "a", Limits(1, 1), later(), False)
    slots.store.take(KEY, "b", Limits(1, 1), later(), False)
    # When an execution asks / Then it is refused with Triton's words, a 503
    policy = config(1, max_queue_size=1)
    with (
        pytest.raises(SlotRefused, match="^Exceeds maximum queue size") as refused,
        slots.execution("m", 1, policy, [{}]),
    ):
        pytest.fail("ran without a slot")
    assert isinstance(refused.value, QueueRejected) and status_for(refused.value) == 503


def test_a_wait_past_the_queue_timeout_is_refused_and_leaves_the_queue(slots):
    # Given the one slot held, and a policy timing out after 0.2 s (REJECT)
    slots.store.take(KEY, "a", Limits(1), later(), False)
    policy = {"max_queue_size": 1, "default_timeout_s": 0.2}
    # When an execution waits / Then it is refused with Triton's words
    with (
        pytest.raises(SlotRefused, match="^Request timeout expired"),
        slots.execution("m", 1, config(1, **policy), [{}]),
    ):
        pytest.fail("ran without a slot")
    # and its place in the queue is free again
    assert slots.store.take(KEY, "b", Limits(1, 1), later(), False) is Taken.WAITING


def test_a_wait_ends_before_the_invocation_does_saying_what_to_change(slots):
    # Given the one slot held, no queue timeout, and an invocation with 1.3 s left
    slots.store.take(KEY, "a", Limits(1), later(), False)
    # When an execution waits / Then it gives up with a second to spare, saying what to do
    with (
        invocation_deadline(1300),
        pytest.raises(SlotRefused, match="respond-async"),
        slots.execution("m", 1, config(1), [{}]),
    ):
        pytest.fail("ran without a slot")


def test_a_version_without_a_stated_count_asks_no_store():
    # Given slots over a store that fails every call
    class Broken:
        def take(self, *args):
            raise AssertionError("asked the store")

        release = take

    # When an execution of a version whose config states no count runs / Then it runs
    with FleetSlots(Broken()).execution("m", 1, config(0), [{}]):
        pass


def test_only_a_stated_count_bounds_a_version():
    # Given configs with and without a count stated
    def parsed(text: str) -> ModelConfig:
        return build(parse_document("config.pbtxt", text.encode()), "m")

    base = 'platform: "onnxruntime_onnx"\nmax_batch_size: 4\n'
    # Then Triton's default count (2 for ONNX on CPU) is no bound, a stated one is
    assert parsed(base + "instance_group [{ kind: KIND_CPU }]").stated_instance_count == 0
    assert parsed(base + "instance_group [{ count: 3 }, { count: 1 }]").stated_instance_count == 4
    assert parsed(base).stated_instance_count == 0


def test_only_the_lambda_functions_count_slots(aws):
    # serve and dev run each version's instances in their process (the rate limiter's)
    assert fleet_slots_from(aws.settings, aws.clients.dynamodb) is None
    with pytest.raises(Exception, match="LAMBDASERVE_INFLIGHT_STORE=redis needs"):
        fleet_slots_from(
            replace(aws.settings, in_lambda=True, inflight_store="redis"), aws.clients.dynamodb
        )


BOUNDED = b"""
max_batch_size: 8
instance_group [{ count: 1, kind: KIND_CPU }]
dynamic_batching { default_queue_policy { max_queue_size: 1 } }
"""
ROW = {"name": "INPUT__0", "datatype": "FP32", "shape": [1, 4], "data": [1, 2, 3, 4]}


@pytest.fixture
def lambda_process(aws):
    """The infer function's process (in Lambda) over an MLP whose config states one
    instance and a queue of one, and an unbounded twin."""
    for name, config in (("bounded", BOUNDED), ("free", b"max_batch_size: 8\n")):
        aws.put(f"models/{name}/1/model.onnx", builders.onnx_mlp(4, 3))
        aws.put(f"models/{name}/config.pbtxt", config)
        aws.services.registrar.reconcile_model(name)
    aws.settings = replace(aws.settings, in_lambda=True)
    return aws.use_process()


def infer_event(model: str) -> dict:
    body = json.dumps({"inputs": [ROW]}).encode()
    return http_api_event("POST", f"/v2/models/{model}/infer", body)


def test_the_direct_path_holds_a_slot_and_gives_it_back(lambda_process):
    # Given the bounded model's one slot free
    store = lambda_process.server().fleet_slots.store
    # When two requests run one after the other / Then both answer (each gave its slot back)
    for _ in range(2):
        answer = infer.api_handler(infer_event("bounded"), LocalContext("infer"))
        assert answer["statusCode"] == 200, answer
    # and the slot is free: another execution takes it at once
    assert store.take(SlotKey("bounded", 1), "x", Limits(1), later(), False) is Taken.RUNNING


def test_a_full_queue_is_a_503_on_the_direct_path_and_per_item_in_a_batch(lambda_process):
    # Given the bounded model's slot held elsewhere and its queue of one taken
    store = lambda_process.server().fleet_slots.store
    store.take(SlotKey("bounded", 1), "elsewhere", Limits(1, 1), later(), False)
    store.take(SlotKey("bounded", 1), "waiting", Limits(1, 1), later(), False)
    # When a request comes through the HTTP API / Then it is Triton's 503
    answer = infer.api_handler(infer_event("bounded"), LocalContext("infer"))
    assert answer["statusCode"] == 503, answer
    assert "Exceeds maximum queue size" in answer["body"]
    # When a batch of the bounded and the unbounded model comes to the batch entry point
    bounded, free = (
        {"model_name": "bounded", "inputs": [ROW]},
        {"model_name": "free", "inputs": [ROW]},
    )
    results = infer.batch_handler({"requests": [bounded, free, bounded]}, LocalContext("infer"))[
        "results"
    ]
    # Then the bounded model's requests are refused each, the other model's answered
    assert [r["status"] for r in results] == [503, 200, 503]
    assert "Exceeds maximum queue size" in results[0]["error"]
