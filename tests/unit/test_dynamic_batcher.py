"""The in-process dynamic batcher: its decisions with a fake clock, and its asyncio loop."""

from __future__ import annotations

import asyncio
import threading
from dataclasses import replace

import numpy as np
import pytest

from lambdaserve.batching.assembly import BatchResult
from lambdaserve.batching.dynamic_batcher import DynamicBatcher
from lambdaserve.batching.plan import BatchPolicy, Take, Wait, plan
from lambdaserve.config.dynamic_batching import QueuePolicy
from lambdaserve.errors import InvalidInput, ModelNotFound, QueueRejected
from lambdaserve.protocol.v2 import InferInput, InferRequest

POLICY = BatchPolicy(max_batch_size=8, max_queue_delay_s=0.005)


def test_a_lone_request_waits_for_company_up_to_the_delay_as_tritons_batcher_does():
    assert plan([1], oldest_enqueued=0.0, now=0.0, policy=POLICY) == Wait(0.005)
    assert plan([1], oldest_enqueued=0.0, now=0.005, policy=POLICY) == Take(1)


def test_without_a_delay_a_lone_request_runs_at_once():
    assert plan([1], 0.0, 0.0, BatchPolicy(max_batch_size=8)) == Take(1)


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
        batcher = DynamicBatcher(
            execute, lambda m, v: BatchPolicy(max_batch_size=8), in_thread, execute_one=execute_one
        )
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


class Blocking:
    """An execute whose first run waits until released: requests queue up behind it."""

    def __init__(self) -> None:
        self.started = threading.Event()
        self.release = threading.Event()
        self.order: list[float] = []

    def __call__(self, model, version, requests, queued_ns):
        self.started.set()
        self.release.wait(10)
        self.order.extend(float(r.inputs[0].data[0, 0]) for r in requests)
        return [BatchResult(outputs={"y": r.inputs[0].data}, version=1) for r in requests]


async def queue_behind_a_running_request(batcher: DynamicBatcher, blocking: Blocking):
    running = asyncio.get_running_loop().create_task(batcher.submit("m", None, row(0)))
    assert await asyncio.to_thread(blocking.started.wait, 10)
    return running


def test_a_full_queue_refuses_at_once_with_tritons_words_and_counts_the_refusal():
    # Given a model whose queue policy holds one waiting request, and one request running
    blocking, refused = Blocking(), []
    policy = BatchPolicy(max_batch_size=1, queue=QueuePolicy(max_queue_size=1))

    async def scenario():
        batcher = DynamicBatcher(
            blocking,
            lambda m, v: policy,
            in_thread,
            rejected=lambda m, v, error: refused.append((m, v, type(error))),
        )
        running = await queue_behind_a_running_request(batcher, blocking)
        waiting = asyncio.get_running_loop().create_task(batcher.submit("m", None, row(1)))
        while batcher.waiting() != {("m", None): 1}:
            await asyncio.sleep(0)
        # When one more arrives, then the queue is full: it is refused without waiting
        with pytest.raises(QueueRejected, match="Exceeds maximum queue size") as refusal:
            await batcher.submit("m", None, row(2))
        blocking.release.set()
        return refusal.value, await running, await waiting

    refusal, first, second = run(scenario())
    assert "max_queue_size is 1" in refusal.message
    assert refused == [("m", None, QueueRejected)]
    # and the accepted ones still get their own results
    assert (first.outputs["y"][0, 0], second.outputs["y"][0, 0]) == (0, 1)


def test_a_request_past_its_queue_timeout_is_refused_under_reject():
    blocking = Blocking()
    queue = QueuePolicy(default_timeout_s=0.05)

    async def scenario():
        batcher = DynamicBatcher(
            blocking, lambda m, v: BatchPolicy(max_batch_size=1, queue=queue), in_thread
        )
        running = await queue_behind_a_running_request(batcher, blocking)
        late = asyncio.get_running_loop().create_task(batcher.submit("m", None, row(1)))
        await asyncio.sleep(0.1)  # past its timeout while the first still runs
        blocking.release.set()
        return await running, await asyncio.gather(late, return_exceptions=True)

    first, [late] = run(scenario())
    assert first.outputs["y"][0, 0] == 0
    assert isinstance(late, QueueRejected) and "Request timeout expired" in late.message
    assert blocking.order == [0.0]


def test_under_delay_an_overdue_request_runs_behind_the_ones_within_their_time():
    # Given DELAY, no default timeout, and requests that may shorten theirs
    blocking = Blocking()
    queue = QueuePolicy(reject_on_timeout=False, allow_timeout_override=True)

    def with_timeout(value: float, timeout_us: int | None) -> InferRequest:
        request = row(value)
        return replace(request, parameters={"timeout": timeout_us} if timeout_us else {})

    async def scenario():
        batcher = DynamicBatcher(
            blocking, lambda m, v: BatchPolicy(max_batch_size=1, queue=queue), in_thread
        )
        running = await queue_behind_a_running_request(batcher, blocking)
        loop = asyncio.get_running_loop()
        overdue = loop.create_task(batcher.submit("m", None, with_timeout(1, 10_000)))
        await asyncio.sleep(0.05)  # the first waiting one passes its 10 ms
        on_time = loop.create_task(batcher.submit("m", None, with_timeout(2, None)))
        while batcher.waiting() != {("m", None): 2}:
            await asyncio.sleep(0)
        blocking.release.set()
        return await asyncio.gather(running, overdue, on_time)

    results = run(scenario())
    # Then every request is answered, the overdue one last
    assert [r.outputs["y"][0, 0] for r in results] == [0, 1, 2]
    assert blocking.order == [0.0, 2.0, 1.0]


def test_a_request_may_shorten_its_queue_timeout_only_where_the_policy_allows():
    strict = QueuePolicy(default_timeout_s=0.5)
    lenient = QueuePolicy(default_timeout_s=0.5, allow_timeout_override=True)
    assert strict.timeout_for({"timeout": 1000}) == 0.5
    assert lenient.timeout_for({"timeout": 1000}) == 0.001
    assert lenient.timeout_for({"timeout": 10_000_000}) == 0.5  # never lengthened
    assert QueuePolicy(allow_timeout_override=True).timeout_for({"timeout": 2000}) == 0.002
    assert lenient.timeout_for({"timeout": "soon"}) == 0.5


def test_the_queue_policy_holds_from_a_lanes_very_first_requests():
    # Given a fresh lane whose policy is not read yet, and two requests arriving together
    policy = BatchPolicy(
        max_batch_size=8, max_queue_delay_s=0.2, queue=QueuePolicy(max_queue_size=1)
    )

    def execute(model, version, requests, queued_ns):
        return [BatchResult(outputs={"y": r.inputs[0].data}, version=1) for r in requests]

    async def scenario():
        batcher = DynamicBatcher(execute, lambda m, v: policy, in_thread)
        return await asyncio.gather(
            batcher.submit("m", None, row(0)),
            batcher.submit("m", None, row(1)),
            return_exceptions=True,
        )

    # Then one waits its turn and the other finds the queue full
    results = run(scenario())
    assert sorted(type(r).__name__ for r in results) == ["BatchResult", "QueueRejected"]


def test_a_request_whose_caller_went_away_leaves_the_queue_and_frees_its_place():
    # Given a queue of one place, taken by a request waiting behind a running one
    blocking = Blocking()
    policy = BatchPolicy(max_batch_size=1, queue=QueuePolicy(max_queue_size=1))

    async def scenario():
        batcher = DynamicBatcher(blocking, lambda m, v: policy, in_thread)
        running = await queue_behind_a_running_request(batcher, blocking)
        abandoned = asyncio.get_running_loop().create_task(batcher.submit("m", None, row(1)))
        while batcher.waiting() != {("m", None): 1}:
            await asyncio.sleep(0)
        # When its caller goes away (a client that disconnected, a gRPC deadline)
        abandoned.cancel()
        await asyncio.sleep(0)
        # Then another request takes the place instead of being refused, and the abandoned
        # request never runs
        taking = asyncio.get_running_loop().create_task(batcher.submit("m", None, row(2)))
        await asyncio.sleep(0)
        blocking.release.set()
        return await running, await taking

    first, second = run(scenario())
    assert (first.outputs["y"][0, 0], second.outputs["y"][0, 0]) == (0, 2)
    assert 1.0 not in blocking.order


def test_a_lane_with_two_workers_runs_two_batches_side_by_side():
    """Given a lane whose version has two worker processes (its policy's ``parallel``: 2),
    max batch 2,
    When four requests arrive together and each batch waits until another batch is running,
    Then two batches of two run at once (one after the other would never meet), and every
    request gets its own result."""
    both_running = threading.Barrier(2, timeout=20)

    def execute(model, version, requests, queued_ns):
        both_running.wait()  # breaks (and fails the batch) if the batches run one by one
        return [BatchResult(outputs={"y": r.inputs[0].data}, version=1) for r in requests]

    async def scenario():
        policy = BatchPolicy(2, 0.05, parallel=2)
        batcher = DynamicBatcher(execute, lambda m, v: policy, in_thread)
        results = await asyncio.gather(*(batcher.submit("m", None, row(i)) for i in range(4)))
        return results, batcher.executions

    results, executions = run(scenario())
    assert [int(r.outputs["y"][0, 0]) for r in results] == [0, 1, 2, 3]
    assert executions == [2, 2]
