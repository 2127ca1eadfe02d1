"""The dynamic batcher's decision: given the rows queued for a model version, run now or wait.

Kept apart from the asyncio machinery so the decision is a pure function, testable with a
fake clock. It follows Triton's dynamic batcher: with ``max_queue_delay_microseconds`` the
queued requests (even a lone one) wait up to that long from the oldest for a preferred
batch size or a full batch; without a delay whatever is queued runs at once.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from lambdaserve.config.dynamic_batching import DynamicBatching, QueuePolicy


@dataclass(frozen=True)
class BatchPolicy:
    max_batch_size: int
    max_queue_delay_s: float = 0.0
    preferred_sizes: tuple[int, ...] = ()
    queue: QueuePolicy = field(default_factory=QueuePolicy)
    # batches that may run at once: model code in N worker processes takes N, as
    # TorchServe's frontend gives each worker its own batch; N instances take N; else one
    parallel: int = 1
    # priority levels, their queue policies, preserve_ordering (None: one level, ``queue``)
    batching: DynamicBatching | None = None

    @property
    def levels(self) -> int:
        return self.batching.priority_levels if self.batching is not None else 0

    @property
    def preserve_ordering(self) -> bool:
        return self.batching is not None and self.batching.preserve_ordering

    def queue_of(self, level: int) -> QueuePolicy:
        """The queue policy of a priority level (the default one without levels)."""
        return self.batching.policy_of(level) if self.levels and self.batching else self.queue

    @property
    def times_out(self) -> bool:
        """Whether any queued request may have a timeout under these policies."""
        if self.queue.times_out:
            return True
        policies = self.batching.priority_policies if self.batching is not None else ()
        return any(policy.times_out for _, policy in policies)


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
    """The batching decision for a lane whose queued requests have ``rows`` rows each, as
    Triton's ``GetDynamicBatch`` decides: the queue's head is read up to the largest preferred
    size (the max batch size without one); a head whose rows add up to a preferred size
    exactly runs now (the largest such head), so does a head that is full or that the next
    request would overflow; otherwise it waits up to the delay from the oldest."""
    if not rows or policy.max_batch_size <= 0:
        return Take(1)
    limit = policy.max_batch_size
    preferred = [p for p in policy.preferred_sizes if 0 < p <= limit]
    cap = max(preferred) if preferred else limit
    count, total, best, overflows = 0, 0, 0, False
    for size in rows:
        if total + size > cap:
            overflows = True
            break
        count += 1
        total += size
        if total in preferred:
            best = count
    if best:
        return Take(best)
    if overflows or total >= cap:
        return Take(max(count, 1))  # a lone request above the cap runs alone
    if now < oldest_enqueued + policy.max_queue_delay_s:
        return Wait(oldest_enqueued + policy.max_queue_delay_s)
    return Take(max(count, 1))
