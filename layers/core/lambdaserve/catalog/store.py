"""DynamoDB catalog: one table holding model items and version items.

Keys: ``pk = MODEL#<name>``; ``sk = #MODEL`` for the model item and
``sk = V#<zero-padded version>`` for versions, so one Query reads a model's
versions in order. Model items also carry ``kind = MODEL``, the hash key of the
``models`` index that pages through model names.

Writes that come from reconciling the bucket are conditional on ``observed_at``
(when the bucket was listed), so a slow reconcile never overwrites a newer one.

Version states are derived from the model item and every version's facts, by more
than one writer at a time (events, the management API, reconcile). Each write of such
a fact bumps the model's ``#REVISION`` item afterwards, and derived states are written
only if the revision is still the one read before deriving them, so a writer that read
stale facts derives again instead of overwriting a newer state.
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

from botocore.exceptions import ClientError

from lambdaserve.catalog.items import (
    MODEL_SK,
    REVISION_SK,
    VERSION_SK,
    ModelRecord,
    VersionRecord,
    already_validated,
    decode_token,
    encode_token,
    key,
    loading_version,
    model_from_item,
    model_pk,
    now_iso,
    plain,
    values,
    version_from_item,
    version_to_item,
)
from lambdaserve.catalog.state_events import (
    Silent,
    StateAnnouncer,
    announce_changes,
    stated,
)

__all__ = [
    "MODELS_INDEX",
    "Catalog",
    "ModelRecord",
    "VersionRecord",
    "already_validated",
    "loading_version",
    "now_iso",
]

MODELS_INDEX = "models"
_JSON_MODEL_FIELDS = ("overrides", "version_labels", "label_weights", "auto_completed")
# DynamoDB allows 100 items per transaction; one is the revision check.
_STATES_PER_TRANSACTION = 99


class Catalog:
    """Reads and writes the catalog table through an injected DynamoDB client."""

    def __init__(self, dynamodb: Any, table: str, announcer: StateAnnouncer | None = None) -> None:
        self._db = dynamodb
        self.table = table
        # who hears of each state this catalog writes (state_events), after the write
        self._announcer: StateAnnouncer = announcer or Silent()

    def cold_starts(self, model: str, version: int) -> list[dict[str, Any]]:
        """``version``'s newest cold starts, wherever it loaded (``catalog.cold_starts``)."""
        from lambdaserve.catalog.cold_starts import ColdStartStore

        return ColdStartStore(self._db, self.table).of(model, version)

    # -- models -------------------------------------------------------------------------

    def get_model(self, name: str) -> ModelRecord | None:
        item = self._get(model_pk(name), MODEL_SK)
        return None if item is None else model_from_item(item)

    def put_model_config(self, record: ModelRecord) -> bool:
        """Store the file config seen at ``config_observed_at``; False if a newer one won."""
        now = now_iso()
        try:
            self._db.update_item(
                TableName=self.table,
                Key=key(model_pk(record.name), MODEL_SK),
                UpdateExpression=(
                    "SET kind = :kind, #name = :name, file_config = :fc, config_source = :src, "
                    "config_error = :err, rejected_config = :rej, class_labels = :labels, "
                    "initial_states = :states, "
                    "config_warnings = :warn, "
                    "config_observed_at = :t, "
                    "updated_at = :now, "
                    "created_at = if_not_exists(created_at, :now)"
                ),
                ConditionExpression=(
                    "attribute_not_exists(config_observed_at) OR config_observed_at <= :t"
                ),
                ExpressionAttributeNames={"#name": "name"},
                ExpressionAttributeValues=values(
                    kind="MODEL",
                    name=record.name,
                    fc=json.dumps(record.file_config) if record.file_config is not None else "",
                    src=record.config_source,
                    err=record.config_error,
                    rej=record.rejected_config,
                    warn=json.dumps(list(record.config_warnings)) if record.config_warnings else "",
                    labels=json.dumps(record.class_labels) if record.class_labels else "",
                    states=json.dumps(record.initial_states) if record.initial_states else "",
                    t=record.config_observed_at,
                    now=now,
                ),
            )
        except ClientError as exc:
            if _condition_failed(exc):
                return False
            raise
        self._bump(record.name)
        return True

    def update_model(self, name: str, **fields: Any) -> None:
        """Set API-owned model fields: ``overrides``, ``default_version``, ``unloaded``,
        ``version_labels``, ``label_weights``, ``preload`` (None removes one)."""
        now = now_iso()
        names = {"#name": "name"}
        named: dict[str, Any] = {"kind": "MODEL", "name": name, "now": now}
        sets = ["kind = :kind", "#name = :name", "updated_at = :now"]
        sets.append("created_at = if_not_exists(created_at, :now)")
        removes = []
        for attr, value in fields.items():
            if value is None:
                removes.append(attr)
                continue
            named[attr] = json.dumps(value) if attr in _JSON_MODEL_FIELDS else value
            sets.append(f"{attr} = :{attr}")
        expression = "SET " + ", ".join(sets)
        if removes:
            expression += " REMOVE " + ", ".join(removes)
        self._db.update_item(
            TableName=self.table,
            Key=key(model_pk(name), MODEL_SK),
            UpdateExpression=expression,
            ExpressionAttributeNames=names,
            ExpressionAttributeValues=values(**named),
        )
        self._bump(name)

    def list_models(
        self, limit: int, page_token: str | None = None
    ) -> tuple[list[str], str | None]:
        """One page of model names in name order, and an opaque token for the next."""
        kwargs: dict[str, Any] = {
            "TableName": self.table,
            "IndexName": MODELS_INDEX,
            "KeyConditionExpression": "kind = :kind",
            "ExpressionAttributeValues": values(kind="MODEL"),
            "Limit": limit,
        }
        if page_token:
            kwargs["ExclusiveStartKey"] = decode_token(page_token)
        response = self._db.query(**kwargs)
        names = [item["pk"]["S"][len("MODEL#") :] for item in response.get("Items", [])]
        last = response.get("LastEvaluatedKey")
        return names, (encode_token(last) if last else None)

    def all_model_names(self) -> list[str]:
        names: list[str] = []
        token: str | None = None
        while True:
            page, token = self.list_models(1000, token)
            names.extend(page)
            if token is None:
                return names

    # -- versions -----------------------------------------------------------------------

    def get_version(self, model: str, version: int) -> VersionRecord | None:
        item = self._get(model_pk(model), VERSION_SK.format(version))
        return None if item is None else version_from_item(item)

    def versions(self, model: str) -> list[VersionRecord]:
        """Every version item of ``model`` in ascending version order."""
        records: list[VersionRecord] = []
        kwargs: dict[str, Any] = {
            "TableName": self.table,
            "KeyConditionExpression": "pk = :pk AND begins_with(sk, :v)",
            "ExpressionAttributeValues": values(pk=model_pk(model), v="V#"),
            "ConsistentRead": True,
        }
        while True:
            response = self._db.query(**kwargs)
            records.extend(version_from_item(plain(i)) for i in response.get("Items", []))
            if "LastEvaluatedKey" not in response:
                return records
            kwargs["ExclusiveStartKey"] = response["LastEvaluatedKey"]

    def put_version(self, record: VersionRecord) -> bool:
        """Write what a reconcile observed at ``record.observed_at``; False if a newer won."""
        existing_created = record.created_at or now_iso()
        item = version_to_item(replace(record, created_at=existing_created, updated_at=now_iso()))
        try:
            answer = self._db.put_item(
                TableName=self.table,
                Item=item,
                ConditionExpression="attribute_not_exists(pk) OR observed_at <= :t",
                ExpressionAttributeValues=values(t=record.observed_at),
                ReturnValues="ALL_OLD",
            )
        except ClientError as exc:
            if _condition_failed(exc):
                return False
            raise
        self._bump(record.model)
        old = answer.get("Attributes") if isinstance(answer, dict) else None
        previous = stated(version_from_item(plain(old))) if old else ""
        self._announce([(record, stated(record), previous)])
        return True

    def set_loading_reason(self, record: VersionRecord, reason: str) -> bool:
        """Say how a validation in progress is going (unless the version moved on)."""
        try:
            self._db.update_item(
                TableName=self.table,
                Key=key(model_pk(record.model), VERSION_SK.format(record.version)),
                UpdateExpression="SET reason = :reason, updated_at = :now",
                ConditionExpression="observed_at = :t AND pending = :pending",
                ExpressionAttributeValues=values(
                    reason=reason, now=now_iso(), t=record.observed_at, pending=True
                ),
            )
        except ClientError as exc:
            if _condition_failed(exc):
                return False
            raise
        return True

    def record_load_failure(self, model: str, version: int, fingerprint: str, reason: str) -> bool:
        """Where it serves, the version's own code failed to load: the version is not
        READY (until it is checked again: a load, a reconcile, a re-upload), with the code's
        error as the reason. Only the
        validated bytes that failed are marked; False when the version moved on."""
        try:
            answer = self._db.update_item(
                TableName=self.table,
                Key=key(model_pk(model), VERSION_SK.format(version)),
                ReturnValues="ALL_NEW",
                UpdateExpression=(
                    "SET #state = :unavailable, reason = :reason, valid = :no, "
                    "validation_error = :reason, updated_at = :now, fingerprint = :unchecked"
                ),
                ConditionExpression="fingerprint = :fp AND #state = :ready",
                ExpressionAttributeNames={"#state": "state"},
                ExpressionAttributeValues=values(
                    unavailable="UNAVAILABLE",
                    reason=reason,
                    no=False,
                    now=now_iso(),
                    fp=fingerprint,
                    ready="READY",
                    # a load or a re-upload of the same bytes checks it again
                    unchecked="",
                ),
            )
        except ClientError as exc:
            if _condition_failed(exc):
                return False
            raise
        self._bump(model)
        failed = version_from_item(plain(answer["Attributes"]))
        self._announce([(failed, "UNAVAILABLE", "READY")])
        return True

    def revision(self, model: str) -> int:
        """The model's fact revision; read it before the facts a state is derived from."""
        item = self._get(model_pk(model), REVISION_SK)
        return int(item["revision"]) if item else 0

    def set_version_states(
        self, model: str, revision: int, changes: list[tuple[VersionRecord, str, str]]
    ) -> bool:
        """Write derived ``(version, state, reason)`` changes in one transaction, only if
        the model's revision is still ``revision``; False if a fact changed: derive again."""
        for start in range(0, len(changes), _STATES_PER_TRANSACTION):
            chunk = changes[start : start + _STATES_PER_TRANSACTION]
            try:
                self._db.transact_write_items(
                    TransactItems=[self._revision_check(model, revision)]
                    + [self._state_update(*change) for change in chunk]
                )
            except ClientError as exc:
                if exc.response.get("Error", {}).get("Code") == "TransactionCanceledException":
                    return False
                raise
        self._announce(
            [(replace(r, reason=reason), state, r.state) for r, state, reason in changes]
        )
        return True

    def _announce(self, written: list[tuple[VersionRecord, str, str]]) -> None:
        """(record, its new state, its previous state) for each write: the changes told."""
        if not isinstance(self._announcer, Silent):
            announce_changes(self._announcer, written, self._version_labels)

    def _version_labels(self, model: str) -> dict[str, int]:
        record = self.get_model(model)
        return dict(record.version_labels) if record else {}

    def _revision_check(self, model: str, revision: int) -> dict[str, Any]:
        check: dict[str, Any] = {"TableName": self.table, "Key": key(model_pk(model), REVISION_SK)}
        if revision:
            check["ConditionExpression"] = "revision = :r"
            check["ExpressionAttributeValues"] = values(r=revision)
        else:
            check["ConditionExpression"] = "attribute_not_exists(pk)"
        return {"ConditionCheck": check}

    def _state_update(self, record: VersionRecord, state: str, reason: str) -> dict[str, Any]:
        return {
            "Update": {
                "TableName": self.table,
                "Key": key(model_pk(record.model), VERSION_SK.format(record.version)),
                "UpdateExpression": "SET #state = :state, reason = :reason, updated_at = :now",
                "ConditionExpression": "observed_at = :t",
                "ExpressionAttributeNames": {"#state": "state"},
                "ExpressionAttributeValues": values(
                    state=state, reason=reason, now=now_iso(), t=record.observed_at
                ),
            }
        }

    def _bump(self, model: str) -> None:
        self._db.update_item(
            TableName=self.table,
            Key=key(model_pk(model), REVISION_SK),
            UpdateExpression="ADD revision :one",
            ExpressionAttributeValues=values(one=1),
        )

    # -- plumbing -----------------------------------------------------------------------

    def _get(self, pk: str, sk: str) -> dict[str, Any] | None:
        response = self._db.get_item(TableName=self.table, Key=key(pk, sk), ConsistentRead=True)
        item = response.get("Item")
        return None if item is None else plain(item)


def _condition_failed(exc: ClientError) -> bool:
    return bool(exc.response.get("Error", {}).get("Code") == "ConditionalCheckFailedException")
