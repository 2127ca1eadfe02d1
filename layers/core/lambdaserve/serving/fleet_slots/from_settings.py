"""The slot store a process's settings name (``LAMBDASERVE_INFLIGHT_STORE``): the catalog's
DynamoDB table (the default) or the Redis endpoint of the response cache's settings
(``LAMBDASERVE_REDIS_*``). Only the Lambda functions bound their versions' executions
fleet-wide: ``serve`` and ``dev`` run each version's instances in their process."""

from __future__ import annotations

from typing import Any

from lambdaserve.errors import InvalidInput
from lambdaserve.serving.fleet_slots.dynamodb_store import DynamoSlotStore
from lambdaserve.serving.fleet_slots.gate import FleetSlots
from lambdaserve.serving.sequences.from_settings import redis_client_from
from lambdaserve.settings import Settings


def fleet_slots_from(settings: Settings, dynamodb: Any) -> FleetSlots | None:
    """``dynamodb``: the catalog's client (the store asks nothing before a version with a
    stated instance count runs)."""
    if not settings.in_lambda:
        return None
    if settings.inflight_store == "dynamodb":
        return FleetSlots(DynamoSlotStore(dynamodb, settings.table))
    if settings.inflight_store != "redis":
        raise InvalidInput(
            f"LAMBDASERVE_INFLIGHT_STORE={settings.inflight_store!r}: use dynamodb or redis"
        )
    from lambdaserve.serving.fleet_slots.redis_store import RedisSlotStore

    return FleetSlots(RedisSlotStore(redis_client_from(settings, "LAMBDASERVE_INFLIGHT_STORE")))
