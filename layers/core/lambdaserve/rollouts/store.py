"""Rollouts in the catalog table, so any instance and the judge read the same one: one item
per label, its current or last rollout, ``pk = MODEL#<name>``, ``sk = ROLLOUT#<label>``.
Each write is conditional on the revision read (two judges, or a judge and a person, never
both move one rollout). An active rollout also carries ``kind = ROLLOUT``, which puts it in
the table's ``models`` index: the judge lists the active ones with one query."""

from __future__ import annotations

import json
from typing import Any

from botocore.exceptions import ClientError

from lambdaserve.catalog.items import key, model_pk, now_iso, plain
from lambdaserve.errors import Conflict
from lambdaserve.rollouts.progress import ACTIVE, Rollout, rollout_from

_SK = "ROLLOUT#"
_INDEX = "models"  # the catalog's (kind, pk) index
_KIND = "ROLLOUT"


class RolloutStore:
    def __init__(self, dynamodb: Any, table: str) -> None:
        self._db = dynamodb
        self._table = table

    def get(self, model: str, label: str) -> tuple[Rollout, int] | None:
        """The label's rollout and its revision (None: it never had one)."""
        found = self._db.get_item(
            TableName=self._table, Key=key(model_pk(model), _SK + label), ConsistentRead=True
        ).get("Item")
        if found is None:
            return None
        item = plain(found)
        return rollout_from(json.loads(item["document"])), int(item["revision"])

    def of_model(self, model: str) -> list[Rollout]:
        answer = self._db.query(
            TableName=self._table,
            KeyConditionExpression="pk = :pk AND begins_with(sk, :sk)",
            ExpressionAttributeValues={":pk": {"S": model_pk(model)}, ":sk": {"S": _SK}},
            ConsistentRead=True,
        )
        return [rollout_from(json.loads(plain(i)["document"])) for i in answer.get("Items", [])]

    def active(self) -> list[tuple[str, str]]:
        """(model, label) of every rollout progressing or paused."""
        found: list[tuple[str, str]] = []
        kwargs: dict[str, Any] = {
            "TableName": self._table,
            "IndexName": _INDEX,
            "KeyConditionExpression": "kind = :kind",
            "ExpressionAttributeValues": {":kind": {"S": _KIND}},
        }
        while True:
            page = self._db.query(**kwargs)
            for item in page.get("Items", []):
                pk, sk = item["pk"]["S"], item["sk"]["S"]
                found.append((pk[len("MODEL#") :], sk[len(_SK) :]))
            if "LastEvaluatedKey" not in page:
                return found
            kwargs["ExclusiveStartKey"] = page["LastEvaluatedKey"]

    def put(self, rollout: Rollout, revision: int | None) -> int:
        """Write ``rollout`` if the stored one is still at ``revision`` (None: a label that
        has no active rollout); its new revision, else Conflict."""
        spec = rollout.spec
        sets = "document = :doc, revision = :next, updated = :now"
        if rollout.phase in ACTIVE:
            expression = f"SET {sets}, kind = :kind"
        else:
            expression = f"SET {sets} REMOVE kind"
        values: dict[str, Any] = {
            ":doc": {"S": json.dumps(rollout.to_json())},
            ":next": {"N": str((revision or 0) + 1)},
            ":now": {"S": now_iso()},
        }
        if rollout.phase in ACTIVE:
            values[":kind"] = {"S": _KIND}
        if revision is None:
            condition = "attribute_not_exists(kind)"  # none, or the last one ended
        else:
            condition = "revision = :rev"
            values[":rev"] = {"N": str(revision)}
        try:
            self._db.update_item(
                TableName=self._table,
                Key=key(model_pk(spec.model), _SK + spec.label),
                UpdateExpression=expression,
                ConditionExpression=condition,
                ExpressionAttributeValues=values,
            )
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") != "ConditionalCheckFailedException":
                raise
            raise Conflict(
                f"the rollout of label {spec.label!r} of {spec.model!r} moved meanwhile (or one "
                "is already active): read its status and try again"
            ) from exc
        return (revision or 0) + 1
