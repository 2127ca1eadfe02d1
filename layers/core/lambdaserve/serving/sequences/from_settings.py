"""The sequence store a process's settings name (``LAMBDASERVE_SEQUENCE_STORE``): the
catalog's DynamoDB table (the default; states too large for an item in the models bucket's
``sequence-state/``), or the Redis endpoint of the response cache's
settings (``LAMBDASERVE_REDIS_*``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from lambdaserve.errors import InvalidInput
from lambdaserve.serving.sequences.dynamodb_store import DynamoSequenceStore
from lambdaserve.serving.sequences.records import SequenceStore
from lambdaserve.serving.sequences.state_objects import StateObjects
from lambdaserve.serving.sequences.steps import SequenceSteps
from lambdaserve.settings import Settings


def sequence_steps_from(
    settings: Settings, dynamodb: Any, s3: Callable[[], Any] | None = None
) -> SequenceSteps:
    """``s3``: where a state too large for a DynamoDB item goes (the models bucket's
    ``sequence-state/``); None refuses such a state."""
    return SequenceSteps(_store(settings, dynamodb, s3))


def _store(settings: Settings, dynamodb: Any, s3: Callable[[], Any] | None) -> SequenceStore:
    if settings.sequence_store == "dynamodb":
        objects = StateObjects(s3, settings.bucket) if s3 is not None else None
        return DynamoSequenceStore(dynamodb, settings.table, objects=objects)
    if settings.sequence_store != "redis":
        raise InvalidInput(
            f"LAMBDASERVE_SEQUENCE_STORE={settings.sequence_store!r}: use dynamodb or redis"
        )
    from lambdaserve.serving.sequences.redis_store import RedisSequenceStore

    return RedisSequenceStore(redis_client_from(settings, "LAMBDASERVE_SEQUENCE_STORE"))


def redis_client_from(settings: Settings, setting: str) -> Any:
    """A ``redis.Redis`` on the response cache's endpoint settings, for ``setting``=redis
    (named in the refusal where the host is missing)."""
    if not settings.redis_host:
        raise InvalidInput(
            f"{setting}=redis needs LAMBDASERVE_REDIS_HOST (and its port, user, password, "
            "TLS settings)"
        )
    import redis

    timeout_s = settings.redis_timeout_ms / 1000
    return redis.Redis(
        host=settings.redis_host,
        port=settings.redis_port,
        username=settings.redis_username or None,
        password=settings.redis_password or None,
        ssl=settings.redis_tls,
        socket_timeout=timeout_s,
        socket_connect_timeout=timeout_s,
    )
