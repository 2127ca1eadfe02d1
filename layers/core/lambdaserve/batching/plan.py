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
    """The batching decision for a lane whose queued requests have ``rows`` rows each."""
    if not rows or policy.max_batch_size <= 0:
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
