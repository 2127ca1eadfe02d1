"""DynamoDB catalog: one table holding model items and version items.

Keys: ``pk = MODEL#<name>``; ``sk = #MODEL`` for the model item and
``sk = V#<zero-padded version>`` for versions, so one Query reads a model's
versions in order. Model items also carry ``kind = MODEL``, the hash key of the
``models`` index that pages through model names.

Writes that come from reconciling the bucket are conditional on ``observed_at``
(when the bucket was listed), so a slow reconcile never overwrites a newer one.
"""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

from boto3.dynamodb.types import TypeDeserializer, TypeSerializer
from botocore.exceptions import ClientError

from lambdaserve.errors import InvalidInput

MODELS_INDEX = "models"
MODEL_SK = "#MODEL"
_VERSION_SK = "V#{:020d}"
_serializer = TypeSerializer()
_deserializer = TypeDeserializer()


def now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


@dataclass(frozen=True)
class ModelRecord:
    """Model-level facts: the config file, API overrides, default version, load state."""

    name: str
    file_config: dict[str, Any] | None = None
    config_source: str = ""
    config_error: str = ""
    # The newest config file was rejected; ``file_config`` is still the last good one.
    rejected_config: str = ""
    overrides: dict[str, Any] = field(default_factory=dict)
    default_version: int | None = None
    unloaded: bool = False
    config_observed_at: int = 0
    created_at: str = ""
    updated_at: str = ""


@dataclass(frozen=True)
class VersionRecord:
    """Version-level facts and the state the policy derived from them."""

    model: str
    version: int
    present: bool = True
    pending: bool = False
    valid: bool = False
    validation_error: str = ""
    state: str = "LOADING"
    reason: str = ""
    notes: str = ""
    runtime: str = ""
    model_file: str = ""
    signature: dict[str, Any] = field(default_factory=dict)
    sha256: str = ""
    size: int = 0
    files: tuple[dict[str, Any], ...] = ()
    fingerprint: str = ""
    observed_at: int = 0
    created_at: str = ""
    updated_at: str = ""
    validated_at: str = ""


def loading_version(
    model: str, version: int, fingerprint: str, observed_at: int, existing: VersionRecord | None
) -> VersionRecord:
    """The LOADING item a validation starts with (it keeps the version's creation time)."""
    return VersionRecord(
        model=model,
        version=version,
        pending=True,
        state="LOADING",
        reason="validating",
        fingerprint=fingerprint,
        observed_at=observed_at,
        created_at=existing.created_at if existing else "",
    )


def already_validated(existing: VersionRecord | None, fingerprint: str) -> bool:
    """Duplicate events for an unchanged version cost one read, not a revalidation."""
    return (
        existing is not None
        and existing.present
        and not existing.pending
        and existing.fingerprint == fingerprint
    )


class Catalog:
    """Reads and writes the catalog table through an injected DynamoDB client."""

    def __init__(self, dynamodb: Any, table: str) -> None:
        self._db = dynamodb
        self.table = table

    # -- models -------------------------------------------------------------------------

    def get_model(self, name: str) -> ModelRecord | None:
        item = self._get(_model_pk(name), MODEL_SK)
        return None if item is None else _model_from_item(item)

    def put_model_config(self, record: ModelRecord) -> bool:
        """Store the file config seen at ``config_observed_at``; False if a newer one won."""
        now = now_iso()
        try:
            self._db.update_item(
                TableName=self.table,
                Key=_key(_model_pk(record.name), MODEL_SK),
                UpdateExpression=(
                    "SET kind = :kind, #name = :name, file_config = :fc, config_source = :src, "
                    "config_error = :err, rejected_config = :rej, config_observed_at = :t, "
                    "updated_at = :now, "
                    "created_at = if_not_exists(created_at, :now)"
                ),
                ConditionExpression=(
                    "attribute_not_exists(config_observed_at) OR config_observed_at <= :t"
                ),
                ExpressionAttributeNames={"#name": "name"},
                ExpressionAttributeValues=_values(
                    kind="MODEL",
                    name=record.name,
                    fc=json.dumps(record.file_config) if record.file_config is not None else "",
                    src=record.config_source,
                    err=record.config_error,
                    rej=record.rejected_config,
                    t=record.config_observed_at,
                    now=now,
                ),
            )
        except ClientError as exc:
            if _condition_failed(exc):
                return False
            raise
        return True

    def update_model(self, name: str, **fields: Any) -> None:
        """Set API-owned model fields: ``overrides``, ``default_version``, ``unloaded``."""
        now = now_iso()
        names = {"#name": "name"}
        values: dict[str, Any] = {"kind": "MODEL", "name": name, "now": now}
        sets = ["kind = :kind", "#name = :name", "updated_at = :now"]
        sets.append("created_at = if_not_exists(created_at, :now)")
        removes = []
        for attr, value in fields.items():
            if value is None:
                removes.append(attr)
                continue
            values[attr] = json.dumps(value) if attr == "overrides" else value
            sets.append(f"{attr} = :{attr}")
        expression = "SET " + ", ".join(sets)
        if removes:
            expression += " REMOVE " + ", ".join(removes)
        self._db.update_item(
            TableName=self.table,
            Key=_key(_model_pk(name), MODEL_SK),
            UpdateExpression=expression,
            ExpressionAttributeNames=names,
            ExpressionAttributeValues=_values(**values),
        )

    def list_models(
        self, limit: int, page_token: str | None = None
    ) -> tuple[list[str], str | None]:
        """One page of model names in name order, and an opaque token for the next."""
        kwargs: dict[str, Any] = {
            "TableName": self.table,
            "IndexName": MODELS_INDEX,
            "KeyConditionExpression": "kind = :kind",
            "ExpressionAttributeValues": _values(kind="MODEL"),
            "Limit": limit,
        }
        if page_token:
            kwargs["ExclusiveStartKey"] = _decode_token(page_token)
        response = self._db.query(**kwargs)
        names = [item["pk"]["S"][len("MODEL#") :] for item in response.get("Items", [])]
        last = response.get("LastEvaluatedKey")
        return names, (_encode_token(last) if last else None)

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
        item = self._get(_model_pk(model), _VERSION_SK.format(version))
        return None if item is None else _version_from_item(item)

    def versions(self, model: str) -> list[VersionRecord]:
        """Every version item of ``model`` in ascending version order."""
        records: list[VersionRecord] = []
        kwargs: dict[str, Any] = {
            "TableName": self.table,
            "KeyConditionExpression": "pk = :pk AND begins_with(sk, :v)",
            "ExpressionAttributeValues": _values(pk=_model_pk(model), v="V#"),
            "ConsistentRead": True,
        }
        while True:
            response = self._db.query(**kwargs)
            records.extend(_version_from_item(_plain(i)) for i in response.get("Items", []))
            if "LastEvaluatedKey" not in response:
                return records
            kwargs["ExclusiveStartKey"] = response["LastEvaluatedKey"]

    def put_version(self, record: VersionRecord) -> bool:
        """Write what a reconcile observed at ``record.observed_at``; False if a newer won."""
        existing_created = record.created_at or now_iso()
        item = _version_to_item(replace(record, created_at=existing_created, updated_at=now_iso()))
        try:
            self._db.put_item(
                TableName=self.table,
                Item=item,
                ConditionExpression="attribute_not_exists(pk) OR observed_at <= :t",
                ExpressionAttributeValues=_values(t=record.observed_at),
            )
        except ClientError as exc:
            if _condition_failed(exc):
                return False
            raise
        return True

    def set_loading_reason(self, record: VersionRecord, reason: str) -> bool:
        """Say how a validation in progress is going (unless the version moved on)."""
        try:
            self._db.update_item(
                TableName=self.table,
                Key=_key(_model_pk(record.model), _VERSION_SK.format(record.version)),
                UpdateExpression="SET reason = :reason, updated_at = :now",
                ConditionExpression="observed_at = :t AND pending = :pending",
                ExpressionAttributeValues=_values(
                    reason=reason, now=now_iso(), t=record.observed_at, pending=True
                ),
            )
        except ClientError as exc:
            if _condition_failed(exc):
                return False
            raise
        return True

    def set_version_state(self, record: VersionRecord, state: str, reason: str) -> bool:
        """Update the derived state unless the version changed since it was read."""
        try:
            self._db.update_item(
                TableName=self.table,
                Key=_key(_model_pk(record.model), _VERSION_SK.format(record.version)),
                UpdateExpression="SET #state = :state, reason = :reason, updated_at = :now",
                ConditionExpression="observed_at = :t",
                ExpressionAttributeNames={"#state": "state"},
                ExpressionAttributeValues=_values(
                    state=state, reason=reason, now=now_iso(), t=record.observed_at
                ),
            )
        except ClientError as exc:
            if _condition_failed(exc):
                return False
            raise
        return True

    # -- plumbing -----------------------------------------------------------------------

    def _get(self, pk: str, sk: str) -> dict[str, Any] | None:
        response = self._db.get_item(TableName=self.table, Key=_key(pk, sk), ConsistentRead=True)
        item = response.get("Item")
        return None if item is None else _plain(item)


def _model_pk(name: str) -> str:
    return f"MODEL#{name}"


def _key(pk: str, sk: str) -> dict[str, Any]:
    return {"pk": {"S": pk}, "sk": {"S": sk}}


def _values(**values: Any) -> dict[str, Any]:
    return {f":{name}": _serializer.serialize(value) for name, value in values.items()}


def _plain(item: dict[str, Any]) -> dict[str, Any]:
    return {key: _number(_deserializer.deserialize(value)) for key, value in item.items()}


def _number(value: Any) -> Any:
    if isinstance(value, Decimal):
        return int(value) if value == value.to_integral_value() else float(value)
    return value


def _condition_failed(exc: ClientError) -> bool:
    return bool(exc.response.get("Error", {}).get("Code") == "ConditionalCheckFailedException")


def _encode_token(key: dict[str, Any]) -> str:
    return base64.urlsafe_b64encode(json.dumps(key).encode()).decode()


def _decode_token(token: str) -> dict[str, Any]:
    try:
        key = json.loads(base64.urlsafe_b64decode(token.encode()))
        if not isinstance(key, dict) or not {"kind", "pk"} <= set(key) <= {"kind", "pk", "sk"}:
            raise ValueError("unexpected keys")
        return key
    except (ValueError, binascii.Error, UnicodeDecodeError) as exc:
        raise InvalidInput(
            "invalid next_page_token: pass the nextPageToken of the previous page unchanged"
        ) from exc


def _model_from_item(item: dict[str, Any]) -> ModelRecord:
    file_config = item.get("file_config") or None
    return ModelRecord(
        name=item["name"],
        file_config=json.loads(file_config) if file_config else None,
        config_source=item.get("config_source", ""),
        config_error=item.get("config_error", ""),
        rejected_config=item.get("rejected_config", ""),
        overrides=json.loads(item["overrides"]) if item.get("overrides") else {},
        default_version=item.get("default_version"),
        unloaded=bool(item.get("unloaded", False)),
        config_observed_at=item.get("config_observed_at", 0),
        created_at=item.get("created_at", ""),
        updated_at=item.get("updated_at", ""),
    )


_JSON_VERSION_FIELDS = ("signature", "files")


def _version_to_item(record: VersionRecord) -> dict[str, Any]:
    plain: dict[str, Any] = {
        "pk": _model_pk(record.model),
        "sk": _VERSION_SK.format(record.version),
    }
    for name, value in record.__dict__.items():
        plain[name] = (
            json.dumps(list(value) if name == "files" else value)
            if (name in _JSON_VERSION_FIELDS)
            else value
        )
    return {key: _serializer.serialize(value) for key, value in plain.items()}


def _version_from_item(plain: dict[str, Any]) -> VersionRecord:
    fields = {name: plain[name] for name in VersionRecord.__dataclass_fields__ if name in plain}
    fields["signature"] = json.loads(fields.get("signature") or "{}")
    fields["files"] = tuple(json.loads(fields.get("files") or "[]"))
    return VersionRecord(**fields)
