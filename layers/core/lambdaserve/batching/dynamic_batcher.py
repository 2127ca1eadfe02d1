"""Dynamic batching for long-running servers (ECS GPU tasks, ``lambdaserve serve``).

One lane per model version in the event loop. Without a queue delay, a request that finds
nothing else queued runs at once, so latency under light load stays near the inference
time; while a batch executes, arrivals queue up and run together next. With
``max_queue_delay_microseconds`` (Triton's name) queued requests wait up to that long from
the oldest for a preferred or full batch (``batching.plan``). The model's
``default_queue_policy`` bounds the queue and how long a request may wait in it. In Lambda
(one request per instance) the batcher is bypassed.

Generic over the request and result types: decoded v2 requests and their ``BatchResult``
(``TensorBatcher``), and TorchServe handlers' raw requests and their answers.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from lambdaserve.batching.assembly import BatchResult, batch_dim, check_invariant
from lambdaserve.batching.plan import BatchPolicy, Wait, plan
from lambdaserve.batching.priorities import MORE_QUEUED, place, waiting_at
from lambdaserve.errors import LambdaServeError, QueueRejected
from lambdaserve.protocol.v2 import InferRequest

INLINE_BELOW_S = 0.0005
R = TypeVar("R")  # a request
S = TypeVar("S")  # its result
Execute = Callable[[str, int | None, list[R], list[int]], list[S]]
ExecuteOne = Callable[[str, int | None, R], S]
RunInThread = Callable[..., Awaitable[Any]]
# told of each request the queue policy refused, to count it as the model's failure
Rejected = Callable[[str, int | None, LambdaServeError], None]


@dataclass
class _Pending(Generic[R, S]):
    request: R
    future: asyncio.Future[S]
    enqueued: float
    rows: int
    expires: float = 0.0  # clock seconds after which it may not wait any longer; 0: never
    overdue: bool = False  # past ``expires`` under timeout_action DELAY: runs behind the rest
    level: int = 0  # its priority level (1 the highest; 0: the model has no levels)


@dataclass
class _Lane(Generic[R, S]):
    pending: deque[_Pending[R, S]] = field(default_factory=deque)
    wakeup: asyncio.Event = field(default_factory=asyncio.Event)
    task: asyncio.Task[None] | None = None
    policy: BatchPolicy | None = None
    policy_at: float = 0.0
    last_run_s: float = 1.0  # unknown until the first run: assume slow
    busy: bool = False
    arriving: int = 0
    running: set[asyncio.Task[None]] = field(default_factory=set)  # batches run side by side
    # preserve_ordering: the delivery of the batch taken last (the next one's answers wait)
    delivered: asyncio.Future[None] | None = None


class DynamicBatcher(Generic[R, S]):
    """Queues requests per model version and executes them in batches off the loop."""

    def __init__(
        self,
        execute: Execute[R, S],
        policy: Callable[[str, int | None], BatchPolicy],
        run_in_thread: RunInThread,
        *,
        clock: Callable[[], float] = time.monotonic,
        execute_one: ExecuteOne[R, S] | None = None,
        ready: Callable[[str, int | None], bool] = lambda model, version: True,
        rejected: Rejected | None = None,
        rows: Callable[[R], int] | None = None,
    ) -> None:
        self._execute = execute
        # how many rows a request brings to a batch (a tensor's first dimension by default)
        self._rows: Callable[[R], int] = rows or _tensor_rows
        self._rejected = rejected
        self._execute_one = execute_one
        # False when running now would do I/O first (a catalog read, a model load): such
        # runs go to a thread, whatever the model's speed, so the event loop never blocks.
        self._ready = ready
        self._policy = policy
        self._run_in_thread = run_in_thread
        self._clock = clock
        self._lanes: dict[tuple[str, int | None], _Lane[R, S]] = {}
        self.executions: list[int] = []  # batch sizes run, newest last (bounded)
        self._loop: asyncio.AbstractEventLoop | None = None

    @property
    def loop(self) -> asyncio.AbstractEventLoop | None:
        """The event loop its lanes run in, once a request came (None before)."""
        return self._loop

    async def submit(self, model: str, version: int | None, request: R) -> S:
        lane = self._lanes.get((model, version))
        if lane is None or lane.task is None or lane.task.done():
            lane = self._lanes[(model, version)] = _Lane[R, S]()
            self._loop = asyncio.get_running_loop()
            lane.task = self._loop.create_task(self._drain(model, version, lane))
        if lane.policy is None:
            # The queue policy must hold from the lane's first requests on; a failure to read
            # it (an unknown model) reaches every waiting request through the drain.
            with contextlib.suppress(Exception):
                await self._lane_policy(model, version, lane)
        policy = lane.policy
        fast = (
            policy is not None
            and policy.max_queue_delay_s == 0
            and lane.last_run_s < INLINE_BELOW_S
            and self._ready(model, version)
        )
        if self._execute_one is not None and fast:
            # Let requests that arrived together reach this point too, then count them:
            # a lone request for a fast model runs directly (no queue hop); company batches.
            lane.arriving += 1
            try:
                await asyncio.sleep(0)
                idle = not (lane.pending or lane.busy or lane.running)
                alone = lane.arriving == 1 and idle
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
        now = self._clock()
        timeout = 0.0
        level = 0
        if policy is not None:
            parameters = getattr(request, "parameters", {})
            level = policy.batching.level_of(parameters) if policy.batching is not None else 0
            queue = policy.queue_of(level)
            limit = queue.max_queue_size
            # counted only where a limit applies (a pass over the queue per request); a
            # caller that went away holds no place (the drain forgets them otherwise)
            waiting = _waiting(lane, level, policy.levels) if limit else 0
            if limit and waiting >= limit:
                where = f"priority level {level}'s" if policy.levels else "default_queue_policy"
                raise await self._refusal(
                    model,
                    version,
                    f"Exceeds maximum queue size: model '{model}' already has {waiting} "
                    f"request(s) waiting, its dynamic_batching {where} max_queue_size is "
                    f"{limit}; retry later, or raise max_queue_size",
                )
            timeout = queue.timeout_for(parameters)
        future: asyncio.Future[S] = asyncio.get_running_loop().create_future()
        expires = now + timeout if timeout else 0.0
        place(
            lane.pending, _Pending(request, future, now, self._rows(request), expires, False, level)
        )
        lane.wakeup.set()
        return await future

    async def _refusal(self, model: str, version: int | None, message: str) -> QueueRejected:
        """The error for a request the queue policy refuses, counted as the model's failure."""
        error = QueueRejected(message)
        if self._rejected is not None:
            with contextlib.suppress(LambdaServeError):  # counting must not change the answer
                await self._run_in_thread(self._rejected, model, version, error)
        return error

    def waiting(self) -> dict[tuple[str, int | None], int]:
        """Requests queued per lane (model, version asked for), not yet running."""
        return {key: len(lane.pending) for key, lane in self._lanes.items() if lane.pending}

    async def _drain(self, model: str, version: int | None, lane: _Lane[R, S]) -> None:
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
                _forget_abandoned(lane)
                await self._expire(model, version, lane, policy)
                if not lane.pending:
                    break
                decision = plan(
                    [p.rows for p in lane.pending], lane.pending[0].enqueued, self._clock(), policy
                )
                if isinstance(decision, Wait):
                    lane.wakeup.clear()
                    until = min([decision.until, *_deadlines(lane)])
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(lane.wakeup.wait(), until - self._clock())
                    continue
                taken = [
                    lane.pending.popleft() for _ in range(min(decision.count, len(lane.pending)))
                ]
                limit = policy.parallel  # each of several from a thread
                order = _in_order(lane) if policy.preserve_ordering else None
                if limit <= 1 and not lane.running:
                    await self._run(model, version, taken, lane, order=order)
                    continue
                await self._run_beside(model, version, taken, lane, limit, order=order)

    async def _expire(
        self, model: str, version: int | None, lane: _Lane[R, S], policy: BatchPolicy
    ) -> None:
        """Requests past their queue timeout: refused (REJECT), or moved behind the ones
        still within theirs (DELAY), as Triton's queue policy does."""
        if not policy.times_out:
            return
        now = self._clock()
        expired = [p for p in lane.pending if p.expires and not p.overdue and p.expires <= now]
        for pending in expired:
            lane.pending.remove(pending)
            if not policy.queue_of(pending.level).reject_on_timeout:
                pending.overdue = True  # behind the ones of its level still within theirs
                place(lane.pending, pending)
                continue
            error = await self._refusal(
                model,
                version,
                f"Request timeout expired: it waited {now - pending.enqueued:.3f} s in "
                f"the queue of model '{model}', past its timeout (dynamic_batching "
                "default_queue_policy, or the request's timeout parameter)",
            )
            if not pending.future.done():
                pending.future.set_exception(error)

    async def _lane_policy(self, model: str, version: int | None, lane: _Lane[R, S]) -> BatchPolicy:
        # The policy comes from the catalog view (TTL-cached, I/O when stale): refresh it
        # off the loop, at most once a second per lane.
        if lane.policy is None or self._clock() - lane.policy_at > 1.0:
            lane.policy = await self._run_in_thread(self._policy, model, version)
            lane.policy_at = self._clock()
        return lane.policy

    async def _run_beside(
        self,
        model: str,
        version: int | None,
        taken: list[_Pending[R, S]],
        lane: _Lane[R, S],
        limit: int,
        *,
        order: _Order | None = None,
    ) -> None:
        """Start this batch beside the ones running; return once fewer than ``limit`` run
        (the next batch forms from what queued meanwhile)."""
        # in a thread whatever its speed: a batch run from the loop would hold the others
        run = self._run(model, version, taken, lane, inline=False, order=order)
        task = asyncio.get_running_loop().create_task(run)
        lane.running.add(task)

        def finished(done: asyncio.Task[None]) -> None:
            lane.running.discard(done)
            lane.wakeup.set()

        task.add_done_callback(finished)
        while len(lane.running) >= max(1, limit):
            lane.wakeup.clear()
            await lane.wakeup.wait()

    async def _run(
        self,
        model: str,
        version: int | None,
        taken: list[_Pending[R, S]],
        lane: _Lane[R, S],
        *,
        inline: bool = True,
        order: _Order | None = None,
    ) -> None:
        try:
            await self._run_batch(model, version, taken, lane, inline=inline, order=order)
        finally:
            if order is not None and not order[1].done():
                order[1].set_result(None)  # the next batch's answers may leave now

    async def _run_batch(
        self,
        model: str,
        version: int | None,
        taken: list[_Pending[R, S]],
        lane: _Lane[R, S],
        *,
        inline: bool,
        order: _Order | None,
    ) -> None:
        started = self._clock()
        queued_ns = [int((started - p.enqueued) * 1e9) for p in taken]
        requests = [p.request for p in taken]

        def timed() -> tuple[list[S], float]:
            # the run alone: under load, a thread hop's wait would make any model look slow
            begun = self._clock()
            token = MORE_QUEUED.set(lambda: bool(lane.pending))
            try:
                ran = self._execute(model, version, requests, queued_ns)
            finally:
                MORE_QUEUED.reset(token)
            return ran, self._clock() - begun

        lane.busy = True
        try:
            if inline and lane.last_run_s < INLINE_BELOW_S and self._ready(model, version):
                # A fast model: a thread hop would cost more than the run (measured: waking a
                # pool thread and taking the GIL back took longer than a batch of 8 rows).
                results, lane.last_run_s = timed()
            else:
                results, lane.last_run_s = await self._run_in_thread(timed)
            check_invariant(len(taken), results)
            lane.busy = False
        except Exception as exc:  # a bug or an outage: every waiting request hears of it
            lane.busy = False
            await _after_earlier(order)
            for pending in taken:
                if not pending.future.done():
                    pending.future.set_exception(exc)
            return
        self.executions = [*self.executions[-999:], sum(p.rows for p in taken)]
        await _after_earlier(order)
        for pending, result in zip(taken, results, strict=True):
            if not pending.future.done():
                pending.future.set_result(result)


# preserve_ordering: (the delivery of the batch taken before this one, this one's delivery)
_Order = tuple["asyncio.Future[None] | None", "asyncio.Future[None]"]


def _in_order(lane: _Lane[Any, Any]) -> _Order:
    """The batch about to run delivers its answers after the one taken before it."""
    earlier = lane.delivered
    lane.delivered = asyncio.get_running_loop().create_future()
    return earlier, lane.delivered


async def _after_earlier(order: _Order | None) -> None:
    if order is not None and order[0] is not None:
        await asyncio.shield(order[0])


def _tensor_rows(request: Any) -> int:
    """A decoded v2 request's rows: its inputs' common first dimension (1 without one)."""
    return batch_dim(request) or 1


TensorBatcher = DynamicBatcher[InferRequest, BatchResult]


def _waiting(lane: _Lane[Any, Any], level: int, levels: int) -> int:
    _forget_abandoned(lane)
    return waiting_at(lane.pending, level, levels)


def _forget_abandoned(lane: _Lane[Any, Any]) -> None:
    """Requests whose caller went away (a client that disconnected, a gRPC deadline): they
    leave the queue, so they neither run nor hold a place under max_queue_size."""
    if any(p.future.cancelled() for p in lane.pending):
        lane.pending = deque(p for p in lane.pending if not p.future.cancelled())


def _deadlines(lane: _Lane[Any, Any]) -> list[float]:
    return [p.expires for p in lane.pending if p.expires and not p.overdue]
