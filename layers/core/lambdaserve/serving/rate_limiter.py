"""Triton's rate limiter (``--rate-limit execution_count``) across a process's loaded versions,
whatever their runtime: each execution holds one of its version's instances (a session of an
instance pool, a model-code worker) and the resources they need.

An instance runs only when the resources its ``instance_group.rate_limiter`` names are free:
a global resource is one pool for the process, a per-device one a pool per device (a process
here serves on one device, 0). Among the requests waiting with a free instance, the one whose
instance has the lowest executions x priority goes first, and only it: as Triton's
``AttemptAllocation`` tries the top of its staged queue alone, a lower one never overtakes it.

How much of a resource there is: what ``--rate-limit-resource NAME:COUNT[:DEVICE]`` gives,
else the most any one instance needs. A model needing more than what is given refuses to
load with Triton's reason, word for word (core ``src/rate_limiter.cc``).
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Hashable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field

from lambdaserve.batching.priorities import more_queued
from lambdaserve.config.instance_groups import RateLimits
from lambdaserve.errors import InvalidInput, LoadRefused

GLOBAL = "global"
PER_DEVICE = "per-device"  # a flag without a device: the count on every device
DEVICE = "0"  # the one device a process serves on
EXECUTION_COUNT = "execution_count"
OFF = "off"
# how long a version's place is kept for its next execution (its batch forms in between)
RESERVE_S = 0.05


@dataclass(frozen=True)
class Grant:
    """One instance's resources, held for one execution."""

    key: Hashable
    instance: int
    needs: tuple[tuple[tuple[str, str], int], ...]


@dataclass
class _Ticket:
    key: Hashable
    order: int
    # a version that released its instance with requests still queued behind it holds its
    # place among the waiting until its next execution asks (Triton re-stages the instance
    # at once); past this clock time, never claimed, the place is given up
    reserved_until: float = 0.0


@dataclass
class _Registered:
    limits: RateLimits
    needs: dict[tuple[str, str], int] = field(default_factory=dict)
    busy: list[bool] = field(default_factory=list)  # per instance
    executions: list[int] = field(default_factory=list)


def parse_resources(specs: Iterable[str]) -> dict[tuple[str, str], int]:
    """``--rate-limit-resource`` values, as tritonserver spells them: ``NAME:COUNT`` (on every
    device) or ``NAME:COUNT:DEVICE``; keyed by (name, device or per-device)."""
    given: dict[tuple[str, str], int] = {}
    for spec in specs:
        parts = spec.split(":")
        if len(parts) not in (2, 3) or not parts[0] or not parts[1].isdigit():
            raise InvalidInput(
                f"--rate-limit-resource {spec!r}: write <name>:<count> or "
                "<name>:<count>:<device> (a whole count, a device number), e.g. R1:10 or R2:5:0"
            )
        device = parts[2] if len(parts) == 3 else PER_DEVICE
        if device != PER_DEVICE and not device.isdigit():
            raise InvalidInput(f"--rate-limit-resource {spec!r}: the device must be a number")
        given[(parts[0], device)] = int(parts[1])
    return given


def check_mode(mode: str) -> str:
    if mode not in (EXECUTION_COUNT, OFF):
        raise InvalidInput(f"--rate-limit {mode!r}: use execution_count or off")
    return mode


class RateLimiter:
    """Resources, instances and priorities of every loaded version in this process."""

    def __init__(self, given: Mapping[tuple[str, str], int] | None = None) -> None:
        self._given = dict(given or {})
        self._lock = threading.Condition()
        self._versions: dict[Hashable, _Registered] = {}
        self._limit: dict[tuple[str, str], int] = {}
        self._held: dict[tuple[str, str], int] = {}
        self._waiting: list[_Ticket] = []
        self._order = itertools.count()

    def register(self, key: Hashable, instances: int, limits: RateLimits | None) -> None:
        """Count a version's ``instances`` in (again after a scaling: their executions kept);
        LoadRefused, and nothing registered, when a resource it needs is given in a smaller
        count than an instance needs."""
        limits = limits or RateLimits()
        needs: dict[tuple[str, str], int] = {}
        for resource in limits.resources:
            needs[(resource.name, GLOBAL if resource.global_ else DEVICE)] = resource.count
        count = max(1, instances)
        with self._lock:
            before = self._versions.get(key)
            registered = _Registered(limits, needs, [False] * count, [0] * count)
            if before is not None:  # a scaling: the instances that stay keep their state
                kept = min(count, len(before.busy))
                registered.busy[:kept] = before.busy[:kept]
                registered.executions[:kept] = before.executions[:kept]
            self._versions[key] = registered
            try:
                self._limit = self._limits()
            except LoadRefused:
                if before is None:
                    del self._versions[key]
                else:
                    self._versions[key] = before
                raise
            self._lock.notify_all()

    def register_loaded(
        self, key: Hashable, loaded: object, limits: RateLimits | None, scaled: int = 0
    ) -> None:
        """A version just loaded (or scaled to ``scaled``): its instances are its workers or
        its pool's sessions. Refused, it is let go (its workers stop) before LoadRefused."""
        count = getattr(loaded, "worker_count", 0) or getattr(loaded, "instance_count", 0)
        instances = scaled or (count if isinstance(count, int) and count > 0 else 1)
        try:
            self.register(key, instances, limits)
        except LoadRefused:
            close = getattr(loaded, "close", None)
            if close is not None:
                close()
            raise

    def unregister(self, key: Hashable) -> None:
        with self._lock:
            self._versions.pop(key, None)
            self._limit = self._limits()
            self._lock.notify_all()

    @contextmanager
    def execution(self, key: Hashable) -> Iterator[None]:
        """Hold one of the version's instances and its resources for one execution (a
        version not registered, such as an ensemble's, runs unlimited)."""
        if key not in self._versions:
            yield
            return
        grant = self.acquire(key)
        try:
            yield
        finally:
            self.release(grant, more_queued())

    def acquire(self, key: Hashable) -> Grant:
        """Wait until the version has a free instance, its resources are free, and no waiting
        request's instance comes before it; then hold them and that instance."""
        with self._lock:
            ticket = _Ticket(key, next(self._order))
            for held in [t for t in self._waiting if t.key == key and t.reserved_until]:
                self._waiting.remove(held)  # its place, kept since its last execution
                ticket.order = min(ticket.order, held.order)
            self._waiting.append(ticket)
            try:
                while True:
                    chosen = self._first()
                    registered = self._versions.get(key)
                    if registered is None:
                        raise LoadRefused(f"{key!r} was unloaded while its request waited")
                    if chosen is not None and chosen[0] is ticket and self._fits(registered):
                        index = chosen[1]
                        registered.busy[index] = True
                        for need, count in registered.needs.items():
                            self._held[need] = self._held.get(need, 0) + count
                        return Grant(key, index, tuple(registered.needs.items()))
                    self._lock.wait(self._until_a_reservation_lapses())
            finally:
                self._waiting.remove(ticket)
                self._lock.notify_all()  # the next in line may go now

    def release(self, grant: Grant, more_queued: bool = False) -> None:
        """Give the instance and its resources back; ``more_queued``: the version has
        requests queued for its next execution, which keeps its place (``_Ticket``)."""
        with self._lock:
            if more_queued:
                reserved = _Ticket(grant.key, next(self._order), time.monotonic() + RESERVE_S)
                self._waiting.append(reserved)
            for need, count in grant.needs:
                self._held[need] = self._held.get(need, 0) - count
            registered = self._versions.get(grant.key)
            if registered is not None and grant.instance < len(registered.busy):
                registered.busy[grant.instance] = False
                registered.executions[grant.instance] += 1
            self._lock.notify_all()

    def _until_a_reservation_lapses(self) -> float | None:
        ends = [t.reserved_until for t in self._waiting if t.reserved_until]
        return max(0.0, min(ends) - time.monotonic()) + 0.001 if ends else None

    def _first(self) -> tuple[_Ticket, int] | None:
        """The waiting request that goes first, with its instance: the lowest executions x
        priority among instances free now (the earliest request among equals)."""
        now = time.monotonic()
        for lapsed in [t for t in self._waiting if 0 < t.reserved_until <= now]:
            self._waiting.remove(lapsed)
        best: tuple[int, int, _Ticket, int] | None = None
        for ticket in self._waiting:
            registered = self._versions.get(ticket.key)
            if registered is None:
                continue
            for index, busy in enumerate(registered.busy):
                if busy:
                    continue
                rank = (registered.executions[index] * registered.limits.weight, ticket.order)
                if best is None or rank < best[:2]:
                    best = (*rank, ticket, index)
        return None if best is None else (best[2], best[3])

    def _fits(self, registered: _Registered) -> bool:
        return all(
            self._held.get(key, 0) + count <= self._limit.get(key, 0)
            for key, count in registered.needs.items()
        )

    def _limits(self) -> dict[tuple[str, str], int]:
        """How much of each resource there is: what an instance needs at most, raised to what
        the flags give, refused where they give less (core's UpdateResourceLimits)."""
        most: dict[tuple[str, str], int] = {}
        for registered in self._versions.values():
            for key, count in registered.needs.items():
                most[key] = max(most.get(key, 0), count)
        global_names = {name for name, device in most if device == GLOBAL}
        for name, device in most:
            if device != GLOBAL and name in global_names:
                raise LoadRefused(
                    f'Resource "{name}" is present as both global and device-specific '
                    "resource in the model configuration."
                )
        if not self._given:
            return most
        limits = {}
        for (name, device), needed in most.items():
            counts = [
                count
                for (given_name, given_device), count in self._given.items()
                if given_name == name and (device == GLOBAL or given_device in (device, PER_DEVICE))
            ]
            available = max(counts, default=0)
            if available < needed:
                raise LoadRefused(
                    f'Resource count for "{name}" is limited to {available} which will '
                    "prevent scheduling of one or more model instances, the minimum required "
                    f"count is {needed}"
                )
            limits[(name, device)] = available
        return limits
