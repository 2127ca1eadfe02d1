"""TorchServe's sequences of a ``sequenceBatching`` handler, as its frontend keeps them (a
job group per ``ts_request_sequence_id``), in this process: a sequence's requests run one
at a time, in the order they came; at most ``maxSequenceJobQueueSize`` wait behind the one
running, and more are refused (503); at most ``maxNumSequence`` sequences are open where
model-config.yaml sets it; a sequence idle for ``sequenceMaxIdleMSec`` is closed, and one
whose request carries ``ts_request_sequence_end`` closes once that request is answered.

The handler keeps the sequence's state itself (TorchServe's stateful example does), so
this bookkeeping is the process's, as it is TorchServe's server's.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

from lambdaserve.errors import QueueRejected
from lambdaserve.runtimes.torchserve.manifest import FrontendBatching


class SequenceRefused(QueueRejected):
    """A sequence's request the handler's limits leave no room for (503)."""


@dataclass
class _Group:
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    waiting: int = 0
    running: bool = False
    last_seen_s: float = 0.0
    ended: bool = False


class HandlerSequences:
    """``clock``: monotonic seconds (tests pass their own, to idle a sequence out)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._groups: dict[tuple[str, int, str], _Group] = {}
        self._clock = clock

    @asynccontextmanager
    async def step(
        self,
        model: str,
        version: int,
        sequence_id: str,
        limits: FrontendBatching,
        ends: bool,
    ) -> AsyncIterator[None]:
        """Run the body as the sequence's next request, once the ones before it are done."""
        key = (model, version, sequence_id)
        now = self._clock()
        self._close_idle(model, version, now, limits.sequence_idle_s)
        group = self._groups.get(key)
        if group is None:
            _check_room(model, version, limits, self._open(model, version))
            group = self._groups[key] = _Group(last_seen_s=now)
        if group.waiting >= max(1, limits.sequence_queue):
            raise SequenceRefused(
                f"sequence {sequence_id!r} of model {model!r} already has {group.waiting} "
                f"request(s) waiting behind the one running, its maxSequenceJobQueueSize "
                f"({limits.sequence_queue}): send the next step once one is answered, or "
                "raise maxSequenceJobQueueSize in the archive's model-config.yaml"
            )
        group.waiting += 1
        try:
            await group.lock.acquire()
        finally:
            group.waiting -= 1  # running now, or cancelled while it waited
        group.running = True
        try:
            yield
        finally:
            group.running = False
            group.last_seen_s = self._clock()
            group.ended = group.ended or ends
            group.lock.release()
            if group.ended and group.waiting == 0 and self._groups.get(key) is group:
                del self._groups[key]  # ts_request_sequence_end: the sequence is closed

    def _open(self, model: str, version: int) -> int:
        return sum(1 for m, v, _ in self._groups if (m, v) == (model, version))

    def _close_idle(self, model: str, version: int, now: float, idle_s: float) -> None:
        """The version's sequences idle longer than sequenceMaxIdleMSec, none in flight."""
        for key, group in list(self._groups.items()):
            busy = group.running or group.waiting or group.lock.locked()
            if key[:2] == (model, version) and not busy and now - group.last_seen_s > idle_s:
                del self._groups[key]


def _check_room(model: str, version: int, limits: FrontendBatching, open_now: int) -> None:
    if limits.max_sequences and open_now >= limits.max_sequences:
        raise SequenceRefused(
            f"model {model!r} version {version} has {open_now} open sequence(s), its "
            f"maxNumSequence ({limits.max_sequences}): end one (a request with the "
            "ts_request_sequence_end header closes its sequence once answered) or let one "
            f"idle out (sequenceMaxIdleMSec: {limits.sequence_idle_s * 1000:.0f} ms)"
        )
