"""A lane's queue kept in Triton's priority order: level 1 first (0 where a model has no
levels), and within a level the requests still within their timeout before the ones past it
under ``timeout_action: DELAY``, each group in arrival order. Without levels or timeouts an
arrival goes to the back, as before: nothing is searched."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from contextvars import ContextVar
from typing import Protocol, TypeVar

# Set around a batch's execution: whether requests wait in its lane for the next one (the
# rate limiter keeps the version's place for it, as Triton re-stages a busy instance)
MORE_QUEUED: ContextVar[Callable[[], bool] | None] = ContextVar(
    "lambdaserve_more_queued", default=None
)


def more_queued() -> bool:
    """Whether the lane of the execution running in this context has requests waiting."""
    probe = MORE_QUEUED.get()
    return probe is not None and probe()


class Queued(Protocol):
    level: int
    overdue: bool


Q = TypeVar("Q", bound=Queued)


def place(queue: deque[Q], item: Q) -> None:
    """Put ``item`` behind every queued request that goes before it or with it."""
    key = (item.level, item.overdue)
    if not queue or (queue[-1].level, queue[-1].overdue) <= key:
        queue.append(item)
        return
    for index, queued in enumerate(queue):
        if (queued.level, queued.overdue) > key:
            queue.insert(index, item)
            return


def waiting_at(queue: deque[Q], level: int, levels: int) -> int:
    """How many requests wait at ``level`` (the whole queue where there are no levels):
    ``max_queue_size`` bounds each level's queue."""
    if not levels:
        return len(queue)
    return sum(1 for queued in queue if queued.level == level)
