"""Where cached answers live: this process's memory (an LRU bounded in bytes), and Redis,
shared by every Lambda instance and ``serve`` task, Triton's ``local`` and ``redis`` caches.

The shared tier may fail or be slow; neither may fail a request. Every call has a bounded
timeout, a failure is a miss (logged once per outage, not per request), and after one the
tier is skipped for a few seconds so an outage costs no request a timeout.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

logger = logging.getLogger(__name__)


class CacheTier(Protocol):
    name: str

    def get(self, key: bytes) -> bytes | None: ...

    def put(self, key: bytes, value: bytes) -> None: ...


class LocalTier:
    """Least recently used out first, bounded by the bytes of its entries."""

    name = "local"

    def __init__(self, size_bytes: int) -> None:
        self.size_bytes = size_bytes
        self.used_bytes = 0
        self.evictions = 0
        self._entries: OrderedDict[bytes, bytes] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, key: bytes) -> bytes | None:
        with self._lock:
            value = self._entries.get(key)
            if value is not None:
                self._entries.move_to_end(key)
            return value

    def put(self, key: bytes, value: bytes) -> None:
        cost = len(key) + len(value)
        if cost > self.size_bytes:
            return  # bigger than the whole cache: storing it would only empty it
        with self._lock:
            old = self._entries.pop(key, None)
            if old is not None:
                self.used_bytes -= len(key) + len(old)
            self._entries[key] = value
            self.used_bytes += cost
            while self.used_bytes > self.size_bytes:
                dropped_key, dropped = self._entries.popitem(last=False)
                self.used_bytes -= len(dropped_key) + len(dropped)
                self.evictions += 1


@dataclass(frozen=True)
class RedisOptions:
    """Triton's redis cache settings (host, port, user, password, TLS) plus a TTL."""

    host: str
    port: int = 6379
    username: str = ""
    password: str = ""
    tls: bool = False
    ttl_s: int = 3600
    timeout_s: float = 0.1
    # after a failure, how long the tier is skipped before it is tried again
    retry_after_s: float = 5.0


class RedisTier:
    """One Redis (or Valkey, or ElastiCache Serverless) endpoint, via the ``redis`` library."""

    name = "redis"

    def __init__(self, options: RedisOptions, clock: Callable[[], float] = time.monotonic) -> None:
        import redis
        from redis.backoff import NoBackoff
        from redis.retry import Retry

        self.options = options
        self.failures = 0
        self._clock = clock
        self._down_until = 0.0
        self._down = False
        self._failed_at = float("-inf")
        self._lock = threading.Lock()
        # no retries: a retry doubles the time an outage costs a request, and a miss is fine
        self._client: Any = redis.Redis(
            host=options.host,
            port=options.port,
            username=options.username or None,
            password=options.password or None,
            ssl=options.tls,
            socket_timeout=options.timeout_s,
            socket_connect_timeout=options.timeout_s,
            retry=Retry(NoBackoff(), 0),
            health_check_interval=0,
        )

    def get(self, key: bytes) -> bytes | None:
        if self._skipping():
            return None
        began = self._clock()
        try:
            value = self._client.get(key)
        except Exception as exc:  # any failure of the shared tier is a miss
            self._failed(exc)
            return None
        self._recovered(began)
        return value if isinstance(value, bytes) else None

    def put(self, key: bytes, value: bytes) -> None:
        if self._skipping():
            return
        began = self._clock()
        try:
            self._client.set(key, value, ex=self.options.ttl_s if self.options.ttl_s > 0 else None)
        except Exception as exc:
            self._failed(exc)
            return
        self._recovered(began)

    def close(self) -> None:
        self._client.close()

    def _skipping(self) -> bool:
        return self._down and self._clock() < self._down_until

    def _failed(self, exc: Exception) -> None:
        with self._lock:
            self.failures += 1
            self._failed_at = self._clock()
            self._down_until = self._failed_at + self.options.retry_after_s
            first = not self._down
            self._down = True
        if first:
            logger.warning(
                "the shared response cache (redis %s:%s) failed: %s; requests are answered "
                "by their models until it is back (tried again every %.0f s)",
                self.options.host,
                self.options.port,
                exc,
                self.options.retry_after_s,
            )

    def _recovered(self, began: float) -> None:
        # a call that began before the last failure proves nothing: under concurrent load,
        # the connections already answering when Redis dies would say it is back
        if not self._down or began <= self._failed_at:
            return
        with self._lock:
            if not self._down or began <= self._failed_at:
                return
            self._down = False
        logger.warning(
            "the shared response cache (redis %s:%s) answers again",
            self.options.host,
            self.options.port,
        )
