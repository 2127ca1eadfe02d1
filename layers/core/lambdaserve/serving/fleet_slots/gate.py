"""Each execution of a version whose config states an instance count holds one of its
slots fleet-wide; one that finds none free waits, as a request waits in Triton's queue for
an instance, bounded by the model's queue policy:

- ``max_queue_size`` requests already waiting fleet-wide: refused at once, with Triton's
  "Exceeds maximum queue size";
- its queue timeout (``default_timeout_microseconds``, or its ``timeout`` parameter where
  ``allow_timeout_override``) passed under ``timeout_action: REJECT``: "Request timeout
  expired";
- otherwise until the invocation is about to end (its deadline, which the handlers set
  from Lambda's remaining time), refused then with what to change.

Waiting is polling with jittered backoff: the store is asked again, no instance is woken.
Order among the waiting is not kept (nor are priority levels): whoever asks first once a
slot is free takes it, a newcomer only when nobody waits.
"""

from __future__ import annotations

import logging
import random
import time
import uuid
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from lambdaserve.config.dynamic_batching import QueuePolicy
from lambdaserve.config.model_config import ModelConfig
from lambdaserve.errors import LambdaServeError, QueueRejected
from lambdaserve.protocol.invocation import DEADLINE, FALLBACK_S
from lambdaserve.serving.fleet_slots.records import Limits, SlotKey, SlotStore, Taken

_log = logging.getLogger(__name__)
# what is kept of the invocation's time to answer once a request gives up waiting
MARGIN_S = 1.0
FIRST_POLL_S = 0.01
LAST_POLL_S = 0.25


class SlotRefused(QueueRejected):
    """No slot of the version was free within what its queue policy allows (503,
    UNAVAILABLE): the same request later may succeed."""


def limits_of(config: ModelConfig, parameters: Mapping[str, Any]) -> Limits | None:
    """The fleet's bound for a version (None: the config states no instance count, and
    Lambda scales it as it scales the function)."""
    if not config.stated_instance_count:
        return None
    return Limits(config.stated_instance_count, _policy(config, parameters).max_queue_size)


def _policy(config: ModelConfig, parameters: Mapping[str, Any]) -> QueuePolicy:
    batching = config.dynamic_batching
    if batching is None:
        return QueuePolicy()
    return batching.policy_of(batching.level_of(parameters))


class FleetSlots:
    def __init__(self, store: SlotStore) -> None:
        self.store = store

    @contextmanager
    def execution(
        self, model: str, version: int, config: ModelConfig, parameters: Iterable[Mapping[str, Any]]
    ) -> Iterator[None]:
        """One execution (of one request, or of a batch: its first member's policy)."""
        first = next(iter(parameters), {})
        limits = limits_of(config, first)
        if limits is None:
            yield
            return
        key, lease = SlotKey(model, version), uuid.uuid4().hex[:16]
        self._acquire(key, lease, limits, config, first)
        try:
            yield
        finally:
            try:
                self.store.release(key, lease, waiting=False)
            except LambdaServeError as exc:  # the answer stands; the lease expires anyway
                _log.warning("model '%s' keeps a slot until its lease expires: %s", model, exc)

    def _acquire(
        self,
        key: SlotKey,
        lease: str,
        limits: Limits,
        config: ModelConfig,
        parameters: Mapping[str, Any],
    ) -> None:
        started = time.time()
        deadline = DEADLINE.get() or started + FALLBACK_S
        policy = _policy(config, parameters)
        timeout_s = policy.timeout_for(parameters) if policy.reject_on_timeout else 0.0
        waiting, poll_s = False, FIRST_POLL_S
        try:
            while True:
                taken = self.store.take(key, lease, limits, deadline, waiting)
                if taken is Taken.RUNNING:
                    return
                if taken is Taken.FULL:
                    raise _full(key, limits)
                waiting = True
                now = time.time()
                if timeout_s and now - started >= timeout_s:
                    raise SlotRefused(
                        f"Request timeout expired: it waited {now - started:.3f} s for one of "
                        f"model '{key.model}''s {limits.slots} instance(s), past its timeout "
                        "(dynamic_batching default_queue_policy, or the request's timeout "
                        "parameter)"
                    )
                if now >= deadline - MARGIN_S:
                    raise SlotRefused(
                        f"no instance of model '{key.model}' was free in {now - started:.1f} s: "
                        f"its config.pbtxt states instance_group count {limits.slots}, which "
                        "bounds its executions at once across every instance of the function; "
                        "raise the count, or send the request with 'Prefer: respond-async'"
                    )
                until = min(deadline - MARGIN_S, started + timeout_s if timeout_s else deadline)
                time.sleep(max(0.0, min(poll_s * random.uniform(0.5, 1.5), until - now)))
                poll_s = min(poll_s * 2, LAST_POLL_S)
        except LambdaServeError:
            if waiting:
                self.store.release(key, lease, waiting=True)
            raise


def _full(key: SlotKey, limits: Limits) -> SlotRefused:
    return SlotRefused(
        f"Exceeds maximum queue size: model '{key.model}' already has {limits.max_waiting} "
        f"request(s) waiting for its {limits.slots} instance(s) across the fleet, its "
        "dynamic_batching max_queue_size is "
        f"{limits.max_waiting}; retry later, or raise max_queue_size"
    )
