"""One delivery of the requests queue consumed: topped up, held on a short visibility lease,
run as batches, settled. The batcher function and ``lambdaserve worker`` both call this; each
reports the ids to retry as partial batch failures."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from lambdaserve.queued.delivery import TopUp, VisibilityLease
from lambdaserve.queued.inference import QueuedInference, QueueMessage


@dataclass(frozen=True)
class Delivered:
    """A message as the event source mapping delivered it."""

    message: QueueMessage
    receipt_handle: str


@dataclass(frozen=True)
class Consumed:
    """What became of one delivery: the delivered ids to retry, and the counts."""

    retry: frozenset[str]
    topped_up: int
    retried: int
    total: int


def consume(
    queued: QueuedInference,
    topup: TopUp,
    lease: VisibilityLease,
    delivered: Sequence[Delivered],
    after_run: Callable[[], None],
) -> Consumed:
    """Run the delivered messages and up to the top-up's worth more; ``after_run`` runs when
    the batches are done, even when they raised (the per-model metrics flush)."""
    extra = topup.fetch()
    handles = [d.receipt_handle for d in delivered] + [handle for _, handle in extra]
    try:
        with lease.hold(handles):  # a crash returns these within the lease, not the queue's 6 min
            retry = queued.process([d.message for d in delivered] + [m for m, _ in extra])
    finally:
        after_run()
    topup.settle(extra, retry)
    topup.retry_later(
        [(d.message, d.receipt_handle) for d in delivered if d.message.message_id in retry]
    )
    retried = frozenset(d.message.message_id for d in delivered if d.message.message_id in retry)
    return Consumed(retried, len(extra), len(retry), len(delivered) + len(extra))
