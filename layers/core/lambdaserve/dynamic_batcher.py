"""Dynamic batching for long-running servers (ECS GPU tasks, ``lambdaserve serve``).

One lane per model version in the event loop. A request that finds nothing else queued
runs at once, so latency under light load stays near the inference time; while a batch
executes, arrivals queue up and run together next. With ``max_queue_delay_microseconds``
(Triton's name) a lane holding more than one request waits up to that long from its
oldest request for the batch to fill; a preferred batch size that the queued rows can
fill runs at once. In Lambda (one request per instance) the batcher is bypassed.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from lambdaserve.batch_runs import BatchResult
from lambdaserve.batching import batch_dim, check_invariant
from lambdaserve.protocol.v2 import InferRequest


@dataclass(frozen=True)
class BatchPolicy:
    max_batch_size: int
    max_queue_delay_s: float = 0.0
    preferred_sizes: tuple[int, ...] = ()


@dataclass(frozen=True)
class Take:
    """Run the first ``count`` queued requests now."""

    count: int


@dataclass(frozen=True)
class Wait:
    """Nothing to run before ``until`` (clock seconds) unless more requests arrive."""

    until: float


def plan(
    rows: Sequence[int], oldest_enqueued: float, now: float, policy: BatchPolicy
) -> Take | Wait:
    """The batching decision for a lane whose queued requests have ``rows`` rows each."""
    if len(rows) <= 1 or policy.max_batch_size <= 0:
        return Take(1)
    limit = policy.max_batch_size
    total = sum(rows)
    fitting = [p for p in policy.preferred_sizes if p <= min(total, limit)]
    if total >= limit or fitting:
        return Take(_count_within(rows, max(fitting) if fitting and total < limit else limit))
    deadline = oldest_enqueued + policy.max_queue_delay_s
    if now < deadline:
        return Wait(deadline)
    return Take(_count_within(rows, limit))


def _count_within(rows: Sequence[int], limit: int) -> int:
    count, total = 0, 0
    for size in rows:
        if total + size > limit and count:
            break
        count += 1
        total += size
    return max(count, 1)


INLINE_BELOW_S = 0.0005
Execute = Callable[[str, int | None, list[InferRequest], list[int]], list[BatchResult]]
ExecuteOne = Callable[[str, int | None, InferRequest], BatchResult]
RunInThread = Callable[..., Awaitable[Any]]


@dataclass
class _Pending:
    request: InferRequest
    future: asyncio.Future[BatchResult]
    enqueued: float
    rows: int


@dataclass
class _Lane:
    pending: deque[_Pending] = field(default_factory=deque)
    wakeup: asyncio.Event = field(default_factory=asyncio.Event)
    task: asyncio.Task[None] | None = None
    policy: BatchPolicy | None = None
    policy_at: float = 0.0
    last_run_s: float = 1.0  # unknown until the first run: assume slow
    busy: bool = False
    arriving: int = 0


class DynamicBatcher:
    """Queues requests per model version and executes them in batches off the loop."""

    def __init__(
        self,
        execute: Execute,
        policy: Callable[[str, int | None], BatchPolicy],
        run_in_thread: RunInThread,
        *,
        clock: Callable[[], float] = time.monotonic,
        execute_one: ExecuteOne | None = None,
        ready: Callable[[str, int | None], bool] = lambda model, version: True,
    ) -> None:
        self._execute = execute
        self._execute_one = execute_one
        # False when running now would do I/O first (a catalog read, a model load): such
        # runs go to a thread, whatever the model's speed, so the event loop never blocks.
        self._ready = ready
        self._policy = policy
        self._run_in_thread = run_in_thread
        self._clock = clock
        self._lanes: dict[tuple[str, int | None], _Lane] = {}
        self.executions: list[int] = []  # batch sizes run, newest last (bounded)

    async def submit(self, model: str, version: int | None, request: InferRequest) -> BatchResult:
        lane = self._lanes.get((model, version))
        if lane is None or lane.task is None or lane.task.done():
            lane = self._lanes[(model, version)] = _Lane()
            lane.task = asyncio.get_running_loop().create_task(self._drain(model, version, lane))
        fast = lane.last_run_s < INLINE_BELOW_S and self._ready(model, version)
        if self._execute_one is not None and fast:
            # Let requests that arrived together reach this point too, then count them:
            # a lone request for a fast model runs directly (no queue hop); company batches.
            lane.arriving += 1
            try:
                await asyncio.sleep(0)
                alone = lane.arriving == 1 and not lane.pending and not lane.busy
            finally:
                lane.arriving -= 1
            if alone:
                started = self._clock()
                lane.busy = True
                try:
                    return self._execute_one(model, version, request)
                finally:
                    lane.busy = False
                    lane.last_run_s = self._clock() - started
        future: asyncio.Future[BatchResult] = asyncio.get_running_loop().create_future()
        lane.pending.append(_Pending(request, future, self._clock(), batch_dim(request) or 1))
        lane.wakeup.set()
        return await future

    def waiting(self) -> dict[tuple[str, int | None], int]:
        """Requests queued per lane (model, version asked for), not yet running."""
        return {key: len(lane.pending) for key, lane in self._lanes.items() if lane.pending}

    async def _drain(self, model: str, version: int | None, lane: _Lane) -> None:
        while True:
            await lane.wakeup.wait()
            lane.wakeup.clear()
            while lane.pending:
                try:
                    policy = await self._lane_policy(model, version, lane)
                except Exception as exc:  # unknown model, not ready: everyone waiting hears it
                    while lane.pending:
                        waiting = lane.pending.popleft()
                        if not waiting.future.done():
                            waiting.future.set_exception(exc)
                    break
                decision = plan(
                    [p.rows for p in lane.pending], lane.pending[0].enqueued, self._clock(), policy
                )
                if isinstance(decision, Wait):
                    lane.wakeup.clear()
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(lane.wakeup.wait(), decision.until - self._clock())
                    continue
                taken = [
                    lane.pending.popleft() for _ in range(min(decision.count, len(lane.pending)))
                ]
                await self._run(model, version, taken, lane)

    async def _lane_policy(self, model: str, version: int | None, lane: _Lane) -> BatchPolicy:
        # The policy comes from the catalog view (TTL-cached, I/O when stale): refresh it
        # off the loop, at most once a second per lane.
        if lane.policy is None or self._clock() - lane.policy_at > 1.0:
            lane.policy = await self._run_in_thread(self._policy, model, version)
            lane.policy_at = self._clock()
        return lane.policy

    async def _run(
        self, model: str, version: int | None, taken: list[_Pending], lane: _Lane
    ) -> None:
        started = self._clock()
        queued_ns = [int((started - p.enqueued) * 1e9) for p in taken]
        requests = [p.request for p in taken]

        def timed() -> tuple[list[BatchResult], float]:
            # the run alone: under load, a thread hop's wait would make any model look slow
            begun = self._clock()
            ran = self._execute(model, version, requests, queued_ns)
            return ran, self._clock() - begun

        lane.busy = True
        try:
            if lane.last_run_s < INLINE_BELOW_S and self._ready(model, version):
                # A fast model: a thread hop would cost more than the run (measured: waking a
                # pool thread and taking the GIL back took longer than a batch of 8 rows).
                results, lane.last_run_s = timed()
            else:
                results, lane.last_run_s = await self._run_in_thread(timed)
            check_invariant(len(taken), results)
            lane.busy = False
        except Exception as exc:  # a bug or an outage: every waiting request hears of it
            lane.busy = False
            for pending in taken:
                if not pending.future.done():
                    pending.future.set_exception(exc)
            return
        self.executions = [*self.executions[-999:], sum(p.rows for p in taken)]
        for pending, result in zip(taken, results, strict=True):
            if not pending.future.done():
                pending.future.set_result(result)
