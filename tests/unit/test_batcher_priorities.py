"""Triton's priority levels and per-level queue policies in the dynamic batcher, and
preserve_ordering: the config parsed as Triton reads it, the lane's order, the refusals."""

from __future__ import annotations

import asyncio
import threading
from dataclasses import replace

import pytest

from lambdaserve.batching.assembly import BatchResult
from lambdaserve.batching.dynamic_batcher import DynamicBatcher
from lambdaserve.batching.plan import BatchPolicy, Take, Wait, plan
from lambdaserve.config.dynamic_batching import QueuePolicy
from lambdaserve.config.model_config import build
from lambdaserve.errors import InvalidInput, QueueRejected
from tests.unit.test_dynamic_batcher import (
    Blocking,
    in_thread,
    queue_behind_a_running_request,
    row,
    run,
)

LEVELS = {
    "max_batch_size": 1,
    "dynamic_batching": {
        "priority_levels": 3,
        "default_priority_level": 2,
        "priority_queue_policy": {"3": {"max_queue_size": 1}},
    },
}


def asking(value: float, priority: int | None):
    return replace(row(value), parameters={} if priority is None else {"priority": priority})


def policy_of(document) -> BatchPolicy:
    batching = build(document, "m").dynamic_batching
    assert batching is not None
    return BatchPolicy(1, queue=batching.queue_policy, batching=batching)


def test_levels_are_read_as_triton_reads_a_requests_priority():
    """Given priority_levels 3, default 2, When requests ask 0, 1, 3, 7 or nothing,
    Then levels 2, 1, 3, 2, 2; level 3 has its own policy, the others the default one."""
    batching = build(LEVELS, "m").dynamic_batching
    assert batching is not None
    assert [batching.level_of({"priority": p}) for p in (0, 1, 3, 7)] == [2, 1, 3, 2]
    assert batching.level_of({}) == 2
    assert batching.policy_of(3) == QueuePolicy(max_queue_size=1)
    assert batching.policy_of(1) == QueuePolicy()
    again = build(LEVELS, "m").to_triton_json()["dynamic_batching"]
    assert build({"dynamic_batching": again}, "m").dynamic_batching == batching


@pytest.mark.parametrize(
    ("block", "says"),
    [
        ({"priority_levels": 2, "default_priority_level": 3}, "default_priority_level 3"),
        (
            {"priority_levels": 2, "default_priority_level": 1, "priority_queue_policy": {"5": {}}},
            "level 5",
        ),
    ],
)
def test_levels_out_of_range_are_refused_saying_which(block, says):
    with pytest.raises(InvalidInput, match=says):
        build({"dynamic_batching": block}, "m")


def test_higher_levels_run_first_whatever_the_arrival_order():
    """Given one request running and requests queued at levels 3, 2 (default), 1,
    When the running one ends, Then they run 1, 2, 3."""
    blocking = Blocking()
    policy = policy_of(LEVELS)

    async def scenario():
        batcher = DynamicBatcher(blocking, lambda m, v: policy, in_thread)
        running = await queue_behind_a_running_request(batcher, blocking)
        loop = asyncio.get_running_loop()
        waiting = [
            loop.create_task(batcher.submit("m", None, asking(value, priority)))
            for value, priority in ((3, 3), (2, None), (1, 1))
        ]
        while batcher.waiting() != {("m", None): 3}:
            await asyncio.sleep(0)
        blocking.release.set()
        return await asyncio.gather(running, *waiting)

    results = run(scenario())
    assert [r.outputs["y"][0, 0] for r in results] == [0, 3, 2, 1]
    assert blocking.order == [0.0, 1.0, 2.0, 3.0]


def test_a_levels_own_max_queue_size_refuses_there_only():
    """Given level 3 holding one waiting request at most, When a second arrives at level 3
    and one at level 1, Then the level-3 one is refused with Triton's words, the other waits."""
    blocking = Blocking()
    policy = policy_of(LEVELS)

    async def scenario():
        batcher = DynamicBatcher(blocking, lambda m, v: policy, in_thread)
        running = await queue_behind_a_running_request(batcher, blocking)
        loop = asyncio.get_running_loop()
        first = loop.create_task(batcher.submit("m", None, asking(1, 3)))
        while batcher.waiting() != {("m", None): 1}:
            await asyncio.sleep(0)
        with pytest.raises(QueueRejected, match="^Exceeds maximum queue size") as refused:
            await batcher.submit("m", None, asking(2, 3))
        other = loop.create_task(batcher.submit("m", None, asking(3, 1)))
        while batcher.waiting() != {("m", None): 2}:
            await asyncio.sleep(0)
        blocking.release.set()
        return refused.value, await asyncio.gather(running, first, other)

    refusal, results = run(scenario())
    assert "priority level 3's max_queue_size is 1" in refusal.message
    assert [r.outputs["y"][0, 0] for r in results] == [0, 1, 3]


def test_preserve_ordering_answers_in_arrival_order_across_instances():
    """Given two batches at once (two instances) and preserve_ordering,
    When the first batch is slower than the second,
    Then the second's answer still leaves after the first's."""
    first_may_end = threading.Event()
    answered: list[int] = []

    def execute(model, version, requests, queued_ns):
        value = int(requests[0].inputs[0].data[0, 0])
        if value == 0:
            first_may_end.wait(10)
        return [BatchResult(outputs={"y": r.inputs[0].data}, version=1) for r in requests]

    batching = build({"max_batch_size": 1, "dynamic_batching": {"preserve_ordering": True}}, "m")
    assert batching.dynamic_batching is not None
    policy = BatchPolicy(1, parallel=2, batching=batching.dynamic_batching)

    async def scenario():
        batcher = DynamicBatcher(execute, lambda m, v: policy, in_thread)

        async def one(value: int):
            result = await batcher.submit("m", None, row(value))
            answered.append(value)
            return result

        loop = asyncio.get_running_loop()
        tasks = [loop.create_task(one(0)), loop.create_task(one(1))]
        await asyncio.sleep(0.2)  # the second batch has long finished running by now
        assert answered == []
        first_may_end.set()
        return await asyncio.gather(*tasks)

    run(scenario())
    assert answered == [0, 1]


def test_a_preferred_size_is_a_head_of_the_queue_that_adds_up_to_it_exactly():
    """Given preferred sizes 4 and 8 and a 10 s delay (Triton's L0_model_queue), When the
    queue holds 1, 2, 2 rows, Then it waits (no head adds up to 4 or 8); 2, 2, 1 runs the
    head of 4 now; 4, 4, 4 runs 8; and a head the next request would overflow runs."""
    policy = BatchPolicy(32, max_queue_delay_s=10.0, preferred_sizes=(4, 8))
    assert plan([1, 2, 2], 0.0, 0.0, policy) == Wait(10.0)
    assert plan([2, 2, 1], 0.0, 0.0, policy) == Take(2)
    assert plan([4, 4, 4], 0.0, 0.0, policy) == Take(2)
    assert plan([3, 3, 3], 0.0, 0.0, policy) == Take(2)
    assert plan([1, 2, 2], 0.0, 10.0, policy) == Take(3)
