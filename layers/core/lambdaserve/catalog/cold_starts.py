"""Each version's cold starts (``metrics.cold_starts``) in the catalog table, one item per
load anywhere: ``pk = MODEL#<name>``, ``sk = COLD#<version>#<sample>``; a load writes its
phases, its first inference adds one more; they expire after 30 days (the table's TTL)."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from lambdaserve.catalog.items import key, model_pk, plain

_PREFIX = "COLD#{:010d}#"
KEEP_S = 30 * 86_400
NEWEST = 200  # describe's p50/p99 are over this many of a version's newest cold starts


class ColdStartStore:
    def __init__(self, dynamodb: Any, table: str) -> None:
        self._db = dynamodb
        self._table = table

    def put(self, model: str, version: int, sample: str, fields: Mapping[str, Any]) -> None:
        values = {f":{name}": _value(value) for name, value in fields.items()}
        self._db.update_item(
            TableName=self._table,
            Key=key(model_pk(model), _PREFIX.format(version) + sample),
            UpdateExpression="SET "
            + ", ".join(f"#{name} = :{name}" for name in fields)
            + ", expires_at = :expires",
            ExpressionAttributeNames={f"#{name}": name for name in fields},
            ExpressionAttributeValues=values | {":expires": {"N": str(int(time.time()) + KEEP_S)}},
        )

    def of(self, model: str, version: int) -> list[dict[str, Any]]:
        """``version``'s newest cold starts (at most ``NEWEST``), each with its ``sample``."""
        page = self._db.query(
            TableName=self._table,
            KeyConditionExpression="pk = :pk AND begins_with(sk, :prefix)",
            ExpressionAttributeValues={
                ":pk": {"S": model_pk(model)},
                ":prefix": {"S": _PREFIX.format(version)},
            },
            ScanIndexForward=False,
            Limit=NEWEST,
        )
        found = []
        for item in page.get("Items", []):
            sample = plain(item)
            sample["sample"] = str(sample.get("sk", "")).rsplit("#", 1)[-1]
            found.append(sample)
        return found


def _value(value: Any) -> dict[str, str]:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return {"S": str(value)}
    return {"N": str(value)}
