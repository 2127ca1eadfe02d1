"""Slots in the catalog's DynamoDB table, one item per version.

Keys: ``pk = INFLIGHT#<model>#<version>``, ``sk = SLOTS``. The item holds the counters
``n_run`` and ``n_wait`` and one attribute per lease, ``r_<lease>`` or ``w_<lease>``, its
expiry (epoch seconds). Taking, queueing and releasing are each one conditional UpdateItem,
so the counters never pass the bounds however many instances race. A refused take gets the
item back with its refusal (``ReturnValuesOnConditionCheckFailure``), removes the leases
past their expiry (an environment that died mid-request) and tries once more; a release is
conditional on its lease still being there, so a second release changes nothing.
"""

from __future__ import annotations

import contextlib
import time
from typing import Any

from botocore.exceptions import ClientError

from lambdaserve.errors import StorageUnavailable
from lambdaserve.serving.fleet_slots.records import Limits, SlotKey, Taken

SK = "SLOTS"
_COUNTS = {"r_": "n_run", "w_": "n_wait"}


class _Refused(Exception):
    def __init__(self, item: dict[str, Any]) -> None:
        super().__init__("condition failed")
        self.item = item


class DynamoSlotStore:
    def __init__(self, dynamodb: Any, table: str) -> None:
        self._db = dynamodb
        self._table = table

    def take(
        self, key: SlotKey, lease: str, limits: Limits, expires_at: float, waiting: bool
    ) -> Taken:
        for attempt in range(2):
            try:
                self._update(key, *_run(lease, limits, expires_at, waiting))
                return Taken.RUNNING
            except _Refused as refused:
                item = refused.item
                if waiting and f"w_{lease}" not in item:
                    waiting = False  # its place was reaped (past its expiry): queue again
                if not (attempt == 0 and self._reap(key, item)):
                    break
        if waiting:
            return Taken.WAITING
        for attempt in range(2):
            try:
                self._update(key, *_queue(lease, limits, expires_at))
                return Taken.WAITING
            except _Refused as refused:
                if not (attempt == 0 and self._reap(key, refused.item)):
                    break
        return Taken.FULL

    def release(self, key: SlotKey, lease: str, waiting: bool) -> None:
        prefix = "w_" if waiting else "r_"
        with contextlib.suppress(_Refused):  # released already, or reaped: nothing to give
            self._update(
                key,
                f"REMOVE #l SET {_COUNTS[prefix]} = {_COUNTS[prefix]} - :one",
                "attribute_exists(#l)",
                {"#l": prefix + lease},
                {":one": {"N": "1"}},
            )

    def _reap(self, key: SlotKey, item: dict[str, Any]) -> bool:
        """Remove the item's expired leases (True: some were there to remove)."""
        now = time.time()
        expired = [
            name
            for name, value in item.items()
            if name[:2] in _COUNTS and float(value.get("N", "0")) <= now
        ]
        if not expired:
            return False
        names = {f"#a{i}": name for i, name in enumerate(expired)}
        gone = {prefix: sum(1 for name in expired if name.startswith(prefix)) for prefix in _COUNTS}
        # refused: another instance reaped (or released) some of them first; try again anyway
        with contextlib.suppress(_Refused):
            self._update(
                key,
                f"REMOVE {', '.join(names)} SET "
                + ", ".join(
                    f"{count} = if_not_exists({count}, :zero) - :{prefix[0]}"
                    for prefix, count in _COUNTS.items()
                ),
                " AND ".join(f"attribute_exists({alias})" for alias in names),
                names,
                {":zero": {"N": "0"}, ":r": {"N": str(gone["r_"])}, ":w": {"N": str(gone["w_"])}},
            )
        return True

    def _update(
        self, key: SlotKey, expression: str, condition: str, names: Any, values: Any
    ) -> None:
        try:
            self._db.update_item(
                TableName=self._table,
                Key={"pk": {"S": f"INFLIGHT#{key.model}#{key.version}"}, "sk": {"S": SK}},
                UpdateExpression=expression,
                ConditionExpression=condition,
                ExpressionAttributeNames=names,
                ExpressionAttributeValues=values,
                ReturnValuesOnConditionCheckFailure="ALL_OLD",
            )
        except ClientError as exc:
            if exc.response["Error"]["Code"] == "ConditionalCheckFailedException":
                item: dict[str, Any] = dict(exc.response.get("Item") or {})  # type: ignore[call-overload]
                raise _Refused(item) from exc
            raise StorageUnavailable(
                f"could not count model '{key.model}''s executions in flight: {exc}"
            ) from exc


def _run(lease: str, limits: Limits, expires_at: float, waiting: bool) -> tuple[Any, ...]:
    """A slot, when fewer than ``limits.slots`` run; for a newcomer, only when nobody waits."""
    values = {
        ":e": {"N": f"{expires_at:.3f}"},
        ":k": {"N": str(limits.slots)},
        ":one": {"N": "1"},
        ":zero": {"N": "0"},
    }
    names = {"#r": f"r_{lease}"}
    expression = "SET #r = :e, n_run = if_not_exists(n_run, :zero) + :one"
    condition = "(attribute_not_exists(n_run) OR n_run < :k)"
    if waiting:
        names["#w"] = f"w_{lease}"
        expression += ", n_wait = n_wait - :one REMOVE #w"
        condition += " AND attribute_exists(#w)"
    else:
        condition += " AND (attribute_not_exists(n_wait) OR n_wait = :zero)"
    return expression, condition, names, values


def _queue(lease: str, limits: Limits, expires_at: float) -> tuple[Any, ...]:
    values = {":e": {"N": f"{expires_at:.3f}"}, ":one": {"N": "1"}, ":zero": {"N": "0"}}
    condition = "attribute_not_exists(#w)"
    if limits.max_waiting:
        values[":q"] = {"N": str(limits.max_waiting)}
        condition += " AND (attribute_not_exists(n_wait) OR n_wait < :q)"
    expression = "SET #w = :e, n_wait = if_not_exists(n_wait, :zero) + :one"
    return expression, condition, {"#w": f"w_{lease}"}, values
