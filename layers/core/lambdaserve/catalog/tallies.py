"""Each version's tallies (``metrics.tallies``) in the catalog table, one item per version
per second of flushes, added to by every instance (DynamoDB's ``ADD``: no read, no race):
``pk = MODEL#<name>``, ``sk = TALLY#<version>#<epoch second>``. A rollout's analysis sums a
window of them; they expire a day later (the table's TTL)."""

from __future__ import annotations

from typing import Any

from lambdaserve.catalog.items import key, model_pk, plain
from lambdaserve.metrics.tallies import Tally

_SK = "TALLY#{:010d}#{:012d}"
KEEP_S = 86_400


class TallyStore:
    def __init__(self, dynamodb: Any, table: str) -> None:
        self._db = dynamodb
        self._table = table

    def add(self, model: str, version: int, when: int, tally: Tally) -> None:
        counts = {"requests": tally.requests, "failures": tally.failures}
        counts |= {f"b{bucket}": count for bucket, count in tally.latency.items()}
        names = {f"#{name}": name for name in counts}
        self._db.update_item(
            TableName=self._table,
            Key=key(model_pk(model), _SK.format(version, when)),
            UpdateExpression="ADD "
            + ", ".join(f"#{name} :{name}" for name in counts)
            + " SET expires_at = :expires",
            ExpressionAttributeNames=names,
            ExpressionAttributeValues={
                **{f":{name}": {"N": str(count)} for name, count in counts.items()},
                ":expires": {"N": str(when + KEEP_S)},
            },
        )

    def window(self, model: str, version: int, start: int, end: int) -> Tally:
        """The sum of ``version``'s tallies flushed in the seconds [start, end)."""
        total = Tally()
        if end <= start:
            return total
        low, high = _SK.format(version, start), _SK.format(version, end - 1)
        kwargs: dict[str, Any] = {
            "TableName": self._table,
            "KeyConditionExpression": "pk = :pk AND sk BETWEEN :low AND :high",
            "ExpressionAttributeValues": {
                ":pk": {"S": model_pk(model)},
                ":low": {"S": low},
                ":high": {"S": high},
            },
            "ConsistentRead": True,
        }
        while True:
            page = self._db.query(**kwargs)
            for item in page.get("Items", []):
                total.add(_tally(plain(item)))
            if "LastEvaluatedKey" not in page:
                return total
            kwargs["ExclusiveStartKey"] = page["LastEvaluatedKey"]


def _tally(item: dict[str, Any]) -> Tally:
    latency = {int(k[1:]): int(v) for k, v in item.items() if k[:1] == "b" and k[1:].isdigit()}
    return Tally(int(item.get("requests", 0)), int(item.get("failures", 0)), latency)
