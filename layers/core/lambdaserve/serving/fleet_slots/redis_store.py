"""Slots in Redis (or Valkey, ElastiCache): two sorted sets per version, the leases running
and the leases waiting, each scored by its expiry. A take is one Lua script, one round trip:
expired leases removed (ZREMRANGEBYSCORE), the running counted (ZCARD), then the lease
added to the running or to the waiting, or refused, atomically on the server. Run Redis with
an eviction policy that never evicts these keys (``noeviction`` or ``volatile-*``)."""

from __future__ import annotations

import time
from typing import Any

from lambdaserve.errors import StorageUnavailable
from lambdaserve.serving.fleet_slots.records import Limits, SlotKey, Taken

# KEYS: running, waiting; ARGV: now, lease, expiry, slots, max waiting (0: none), key TTL
_TAKE = """
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', ARGV[1])
local queued = redis.call('ZSCORE', KEYS[2], ARGV[2])
local waiting = redis.call('ZCARD', KEYS[2])
if redis.call('ZCARD', KEYS[1]) < tonumber(ARGV[4]) and (queued or waiting == 0) then
  redis.call('ZREM', KEYS[2], ARGV[2])
  redis.call('ZADD', KEYS[1], ARGV[3], ARGV[2])
  redis.call('EXPIRE', KEYS[1], ARGV[6])
  return 1
end
if queued then return 0 end
if tonumber(ARGV[5]) > 0 and waiting >= tonumber(ARGV[5]) then return -1 end
redis.call('ZADD', KEYS[2], ARGV[3], ARGV[2])
redis.call('EXPIRE', KEYS[2], ARGV[6])
return 0
"""
_ANSWERS = {1: Taken.RUNNING, 0: Taken.WAITING, -1: Taken.FULL}


class RedisSlotStore:
    """``client``: a ``redis.Redis``. The sets themselves expire a while after their last
    lease would (``ttl_s``), so a version no longer served leaves nothing behind."""

    def __init__(self, client: Any, ttl_s: int = 3600) -> None:
        self._client = client
        self._ttl_s = ttl_s
        self._take = client.register_script(_TAKE)

    def take(
        self, key: SlotKey, lease: str, limits: Limits, expires_at: float, waiting: bool
    ) -> Taken:
        arguments = [
            f"{time.time():.3f}",
            lease,
            f"{expires_at:.3f}",
            limits.slots,
            limits.max_waiting,
            self._ttl_s + max(0, int(expires_at - time.time())),
        ]
        try:
            answer = self._take(keys=_names(key), args=arguments)
        except Exception as exc:
            raise StorageUnavailable(
                f"could not count model '{key.model}''s executions in flight: {exc}"
            ) from exc
        return _ANSWERS[int(answer)]

    def release(self, key: SlotKey, lease: str, waiting: bool) -> None:
        try:
            self._client.zrem(_names(key)[1 if waiting else 0], lease)
        except Exception as exc:
            raise StorageUnavailable(
                f"could not release model '{key.model}''s execution slot: {exc}"
            ) from exc


def _names(key: SlotKey) -> list[str]:
    base = f"lambdaserve:inflight:{key.model}:{key.version}"
    return [f"{base}:running", f"{base}:waiting"]
