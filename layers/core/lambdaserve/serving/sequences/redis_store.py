"""Sequence records in Redis (or Valkey, ElastiCache): one hash per sequence, for steps
that must cost well under a millisecond of state I/O (``LAMBDASERVE_SEQUENCE_STORE=redis``,
on the response cache's endpoint settings).

A write or delete is a Lua script that compares the stored token with the one the step read
and changes the hash only if they match, atomically on the server: the same optimistic
locking as the DynamoDB store. Redis is a cache by trade: run it with an eviction policy
that never evicts these keys (``noeviction`` or ``volatile-*``); a record lost anyway makes
the sequence's next step fail with Triton's START message, never run on a wrong state.
"""

from __future__ import annotations

from typing import Any

from lambdaserve.errors import StorageUnavailable
from lambdaserve.serving.sequences.records import (
    SequenceKey,
    SequenceRecord,
    conflict,
)

# KEYS[1]: the hash; ARGV[1]: the token read ("" for none), then the new fields and the TTL
_WRITE = """
local stored = redis.call('HGET', KEYS[1], 'token')
if (ARGV[1] == '' and stored) or (ARGV[1] ~= '' and stored ~= ARGV[1]) then return 0 end
redis.call('HSET', KEYS[1], 'step', ARGV[2], 'last_seen_us', ARGV[3], 'token', ARGV[4],
           'state', ARGV[5])
redis.call('EXPIRE', KEYS[1], ARGV[6])
return 1
"""
_DELETE = """
local stored = redis.call('HGET', KEYS[1], 'token')
if (ARGV[1] == '' and stored) or (ARGV[1] ~= '' and stored ~= ARGV[1]) then return 0 end
redis.call('DEL', KEYS[1])
return 1
"""


class RedisSequenceStore:
    """``client``: a ``redis.Redis``; ``ttl_s``: when an abandoned record goes (idle expiry
    itself is decided on read, from ``last_seen_us``)."""

    def __init__(self, client: Any, ttl_s: int = 86_400) -> None:
        self._client = client
        self._ttl_s = ttl_s
        self._write = client.register_script(_WRITE)
        self._delete = client.register_script(_DELETE)

    def read(self, key: SequenceKey) -> SequenceRecord | None:
        try:
            fields = self._client.hgetall(_name(key))
        except Exception as exc:
            raise StorageUnavailable(f"could not read the sequence's state: {exc}") from exc
        if not fields:
            return None
        return SequenceRecord(
            step=int(fields[b"step"]),
            last_seen_us=int(fields[b"last_seen_us"]),
            state=bytes(fields.get(b"state", b"")),
            token=fields[b"token"].decode(),
        )

    def write(
        self, key: SequenceKey, record: SequenceRecord, expected: SequenceRecord | None
    ) -> None:
        arguments = [
            expected.token if expected else "",
            record.step,
            record.last_seen_us,
            record.token,
            record.state,
            self._ttl_s,
        ]
        self._run(self._write, key, arguments)

    def delete(self, key: SequenceKey, expected: SequenceRecord | None) -> None:
        self._run(self._delete, key, [expected.token if expected else ""])

    def _run(self, script: Any, key: SequenceKey, arguments: list[Any]) -> None:
        try:
            applied = script(keys=[_name(key)], args=arguments)
        except Exception as exc:
            raise StorageUnavailable(f"could not write the sequence's state: {exc}") from exc
        if not applied:
            raise conflict(key)


def _name(key: SequenceKey) -> bytes:
    return f"lambdaserve:sequence:{key.model}:{key.version}:{key.text}".encode()
