"""Sequence records in the catalog's DynamoDB table, one item per sequence.

Keys: ``pk = SEQUENCE#<model>#<version>``, ``sk = U:<id>`` (a uint64 id) or ``S:<id>`` (a
string id). The item holds ``step``, ``last_seen_us``, the encoded ``state`` (or, over
``MAX_STATE_BYTES``, ``state_key``: the S3 object holding it, ``state_objects``) and ``token``;
each write and delete is conditional on the token the step read (optimistic locking), so of
two instances racing on one step one wins and the other gets SequenceConflict. Idle expiry
is decided on read (``last_seen_us``); the table's TTL (``expires_at``) only cleans up. An
END leaves the item ``ended`` (a conditional PutItem, as every write: the functions and
tasks that serve need no DeleteItem), and the TTL removes it.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

from botocore.exceptions import ClientError

from lambdaserve.errors import InferenceError, StorageUnavailable
from lambdaserve.serving.sequences.records import (
    SequenceConflict,
    SequenceKey,
    SequenceRecord,
    conflict,
)
from lambdaserve.serving.sequences.state_objects import StateObjects

# DynamoDB's item limit is 400 KB, keys and names included: leave room for them
MAX_STATE_BYTES = 380_000


class DynamoSequenceStore:
    """``objects``: where a state over MAX_STATE_BYTES goes (None: such a state is refused)."""

    def __init__(
        self,
        dynamodb: Any,
        table: str,
        ttl_s: int = 86_400,
        objects: StateObjects | None = None,
    ) -> None:
        self._db = dynamodb
        self._table = table
        self._ttl_s = ttl_s
        self._objects = objects

    def read(self, key: SequenceKey) -> SequenceRecord | None:
        try:
            item = self._db.get_item(TableName=self._table, Key=_key(key), ConsistentRead=True).get(
                "Item"
            )
        except ClientError as exc:
            raise StorageUnavailable(f"could not read the sequence's state: {exc}") from exc
        if item is None:
            return None
        state_ref = item.get("state_key", {}).get("S", "")
        if state_ref and self._objects is not None:
            state = self._objects.get(state_ref)
        else:
            state = bytes(item["state"]["B"]) if "state" in item else b""
        return SequenceRecord(
            step=int(item["step"]["N"]),
            last_seen_us=int(item["last_seen_us"]["N"]),
            state=state,
            token=item["token"]["S"],
            ended=bool(item.get("ended", {}).get("BOOL", False)),
            state_ref=state_ref,
        )

    def write(
        self, key: SequenceKey, record: SequenceRecord, expected: SequenceRecord | None
    ) -> None:
        large = len(record.state) > MAX_STATE_BYTES
        if large and self._objects is None:
            raise InferenceError(
                f"the implicit state of sequence {key.sequence_id} is {len(record.state)} "
                f"bytes, over the {MAX_STATE_BYTES} bytes a DynamoDB item holds; make the "
                "model's state smaller"
            )
        item = {
            **_key(key),
            "step": {"N": str(record.step)},
            "last_seen_us": {"N": str(record.last_seen_us)},
            "token": {"S": record.token},
            "expires_at": {"N": str(int(time.time()) + self._ttl_s)},
        }
        written = ""
        if large and self._objects is not None:
            written = self._objects.put(key, record.token, record.state)
            item["state_key"] = {"S": written}
        elif record.state:
            item["state"] = {"B": record.state}
        if record.ended:
            item["ended"] = {"BOOL": True}
        try:
            self._conditional(key, expected, lambda **kw: self._db.put_item(Item=item, **kw))
        except SequenceConflict:
            if written and self._objects is not None:
                self._objects.discard(written)  # no item points to it: the winner's stays
            raise
        if expected is not None and expected.state_ref and self._objects is not None:
            self._objects.discard(expected.state_ref)  # the state this step replaced

    def delete(self, key: SequenceKey, expected: SequenceRecord | None) -> None:
        """The sequence ended: its item stays, marked, until the TTL takes it."""
        step = expected.step + 1 if expected else 1
        now_us = time.time_ns() // 1000
        self.write(key, SequenceRecord(step, now_us, b"", uuid.uuid4().hex, ended=True), expected)

    def _conditional(self, key: SequenceKey, expected: SequenceRecord | None, call: Any) -> None:
        if expected is None:
            condition: dict[str, Any] = {"ConditionExpression": "attribute_not_exists(pk)"}
        else:
            condition = {
                "ConditionExpression": "#t = :t",
                "ExpressionAttributeNames": {"#t": "token"},
                "ExpressionAttributeValues": {":t": {"S": expected.token}},
            }
        try:
            call(TableName=self._table, **condition)
        except ClientError as exc:
            if exc.response["Error"]["Code"] == "ConditionalCheckFailedException":
                raise conflict(key) from exc
            raise StorageUnavailable(f"could not write the sequence's state: {exc}") from exc


def _key(key: SequenceKey) -> dict[str, Any]:
    return {"pk": {"S": f"SEQUENCE#{key.model}#{key.version}"}, "sk": {"S": key.text}}
