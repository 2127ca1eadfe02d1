"""What a slot store keeps per version: the leases running (at most the version's instance
count) and the leases waiting for one (at most ``max_queue_size`` where it is set), each
with the time it expires; and the ``SlotStore`` protocol its stores implement."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Protocol


@dataclass(frozen=True)
class SlotKey:
    model: str
    version: int


@dataclass(frozen=True)
class Limits:
    """``slots``: executions at once fleet-wide (the stated instance count); ``max_waiting``:
    requests waiting for one (0: no bound, as Triton's ``max_queue_size``)."""

    slots: int
    max_waiting: int = 0


class Taken(Enum):
    RUNNING = "running"  # the lease holds a slot: run
    WAITING = "waiting"  # the lease waits in the version's queue: ask again later
    FULL = "full"  # no slot, and the queue holds max_waiting already: refuse


class SlotStore(Protocol):
    def take(
        self, key: SlotKey, lease: str, limits: Limits, expires_at: float, waiting: bool
    ) -> Taken:
        """A slot for ``lease`` when one is free (a newcomer only when nobody waits, so the
        waiting go first), else a place in the queue (kept where ``waiting``: the lease
        already has one). Expired leases are reaped before a refusal is final."""
        ...

    def release(self, key: SlotKey, lease: str, waiting: bool) -> None:
        """Give the lease's slot (or, where ``waiting``, its place) back; twice is once."""
        ...
