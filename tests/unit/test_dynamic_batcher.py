"""The in-process dynamic batcher: its decisions with a fake clock, and its asyncio loop."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from lambdaserve.batch_runs import BatchResult
from lambdaserve.dynamic_batcher import BatchPolicy, DynamicBatcher, Take, Wait, plan
from lambdaserve.errors import InvalidInput, ModelNotFound
from lambdaserve.protocol.v2 import InferInput, InferRequest

POLICY = BatchPolicy(max_batch_size=8, max_queue_delay_s=0.005)


def test_a_lone_request_runs_at_once_even_with_a_delay():
    assert plan([1], oldest_enqueued=0.0, now=0.0, policy=POLICY) == Take(1)


def test_queued_requests_wait_for_the_batch_to_fill_until_the_delay_from_the_oldest():
    assert plan([1, 1, 1], oldest_enqueued=10.0, now=10.001, policy=POLICY) == Wait(10.005)
    assert plan([1, 1, 1], oldest_enqueued=10.0, now=10.005, policy=POLICY) == Take(3)


def test_a_full_batch_runs_without_waiting():
    assert plan([1] * 12, oldest_enqueued=0.0, now=0.0, policy=POLICY) == Take(8)
    assert plan([3, 3, 3], oldest_enqueued=0.0, now=0.0, policy=POLICY) == Take(2)


def test_no_delay_means_no_waiting():
    policy = BatchPolicy(max_batch_size=8, max_queue_delay_s=0.0)
    assert plan([1, 1, 1], oldest_enqueued=0.0, now=0.0, policy=policy) == Take(3)


def test_a_preferred_size_the_rows_fill_runs_at_once():
    policy = BatchPolicy(max_batch_size=8, max_queue_delay_s=1.0, preferred_sizes=(4,))
    assert plan([1] * 5, oldest_enqueued=0.0, now=0.0, policy=policy) == Take(4)
    assert plan([1] * 3, oldest_enqueued=0.0, now=0.0, policy=policy) == Wait(1.0)


def test_a_model_that_does_not_batch_takes_one_at_a_time():
    assert plan([1, 1], 0.0, 0.0, BatchPolicy(max_batch_size=0)) == Take(1)


def row(value: float) -> InferRequest:
    data = np.full((1, 2), value, np.float32)
    return InferRequest((InferInput("x", "FP32", data.shape, data),))


def run(coroutine):
    """A private loop: asyncio.run would leave the main thread without one for later tests."""
    loop = asyncio.new_event_loop()
    try:
        return loop.run_until_complete(coroutine)
    finally:
        loop.close()


async def in_thread(function, *args):
    return await asyncio.to_thread(function, *args)


def test_concurrent_requests_run_in_batches_and_each_gets_its_own_result():
    calls: list[int] = []

    def execute(model, version, requests, queued_ns):
        calls.append(len(requests))
        assert len(queued_ns) == len(requests)
        return [
            BatchResult(outputs={"y": r.inputs[0].data * 2}, version=1)
            if r.inputs[0].data[0, 0] != 13
            else BatchResult(error=InvalidInput("thirteen is unlucky"))
            for r in requests
        ]

    async def scenario():
        batcher = DynamicBatcher(execute, lambda m, v: POLICY, in_thread)
        return await asyncio.gather(
            *(batcher.submit("m", None, row(i)) for i in range(20)), return_exceptions=True
        )

    results = run(scenario())
    assert len(results) == 20
    for i, result in enumerate(results):
        if i == 13:
            assert isinstance(result.error, InvalidInput)
        else:
            np.testing.assert_array_equal(result.outputs["y"], np.full((1, 2), 2 * i))
    assert sum(calls) == 20 and max(calls) > 1 and max(calls) <= 8


def test_a_batch_that_breaks_the_invariant_fails_every_member_loudly():
    def execute(model, version, requests, queued_ns):
        return [BatchResult(outputs={}, version=1)]  # one result for several requests

    async def scenario():
        batcher = DynamicBatcher(execute, lambda m, v: BatchPolicy(8, 0.01), in_thread)
        return await asyncio.gather(
            *(batcher.submit("m", None, row(i)) for i in range(3)), return_exceptions=True
        )

    results = run(scenario())
    assert any(isinstance(r, AssertionError) for r in results)
    assert all(isinstance(r, (AssertionError, BatchResult)) for r in results)


def test_an_unknown_model_fails_the_waiting_requests_and_the_lane_recovers():
    known = {"m"}

    def policy(model, version):
        if model not in known:
            raise ModelNotFound(f"unknown model {model!r}")
        return POLICY

    def execute(model, version, requests, queued_ns):
        return [BatchResult(outputs={"y": r.inputs[0].data}, version=1) for r in requests]

    async def scenario():
        batcher = DynamicBatcher(execute, policy, in_thread)
        with pytest.raises(ModelNotFound):
            await batcher.submit("ghost", None, row(1))
        known.add("ghost")
        return await batcher.submit("ghost", None, row(2))

    assert run(scenario()).outputs["y"][0, 0] == 2


def test_an_idle_lane_runs_a_lone_request_directly_and_busy_ones_still_batch():
    direct, batched = [], []

    def execute(model, version, requests, queued_ns):
        batched.append(len(requests))
        return [BatchResult(outputs={"y": r.inputs[0].data}, version=1) for r in requests]

    def execute_one(model, version, request):
        direct.append(1)
        return BatchResult(outputs={"y": request.inputs[0].data}, version=1)

    async def scenario():
        batcher = DynamicBatcher(execute, lambda m, v: POLICY, in_thread, execute_one=execute_one)
        for i in range(5):  # one at a time: after the first run shows the model is fast
            await batcher.submit("m", None, row(i))
        results = await asyncio.gather(*(batcher.submit("m", None, row(i)) for i in range(20)))
        return results

    results = run(scenario())
    assert len(direct) >= 4  # sequential requests skip the queue
    assert [r.outputs["y"][0, 0] for r in results] == list(range(20))
    assert max(batched) > 1  # concurrent ones still batch


@pytest.mark.parametrize("ready", [True, False])
def test_fast_batches_run_on_the_loop_unless_they_would_do_io_first(ready):
    # Given a fast model, and a server that says whether running now needs I/O first
    threads: list[int] = []

    async def counting_thread(function, *args):
        threads.append(1)
        return await asyncio.to_thread(function, *args)

    def execute(model, version, requests, queued_ns):
        return [BatchResult(outputs={"y": r.inputs[0].data}, version=1) for r in requests]

    async def scenario():
        batcher = DynamicBatcher(
            execute, lambda m, v: POLICY, counting_thread, ready=lambda m, v: ready
        )
        await batcher.submit("m", None, row(0))  # the first run shows the model is fast
        threads.clear()
        # When concurrent requests arrive
        return await asyncio.gather(*(batcher.submit("m", None, row(i)) for i in range(16)))

    results = run(scenario())
    assert [r.outputs["y"][0, 0] for r in results] == list(range(16))
    # Then they ran on the loop when ready, and in threads (no blocking I/O on the loop) if not
    assert (len(threads) == 0) if ready else (len(threads) > 0)
