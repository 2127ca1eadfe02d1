"""Catalog items: the records the table holds, and their DynamoDB encoding."""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass, field
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

from boto3.dynamodb.types import TypeDeserializer, TypeSerializer

from lambdaserve.errors import InvalidInput

MODEL_SK = "#MODEL"
# Bumped after every write of a fact the version states derive from (see Catalog).
REVISION_SK = "#REVISION"
VERSION_SK = "V#{:020d}"
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
    # What the config asks for that is accepted and not applied, one entry per field.
    config_warnings: tuple[str, ...] = ()
    # Output name -> class labels, read from the files the config's label_filename names.
    class_labels: dict[str, list[str]] = field(default_factory=dict)
    # State input name -> its initial value's bytes (base64), read from the file the
    # config's sequence_batching state initial_state data_file names (initial_state/<file>).
    initial_states: dict[str, str] = field(default_factory=dict)
    # Version labels (``stable``, ``canary``, TorchServe's ``1.0``) -> integer versions.
    version_labels: dict[str, int] = field(default_factory=dict)
    # Weighted labels -> {"versions": {"1": 90, "2": 10}, "sticky": header} (label_weights.py)
    label_weights: dict[str, dict[str, Any]] = field(default_factory=dict)
    overrides: dict[str, Any] = field(default_factory=dict)
    # What the model's auto_complete_config filled in (Triton JSON fields), under overrides
    auto_completed: dict[str, Any] = field(default_factory=dict)
    default_version: int | None = None
    unloaded: bool = False
    # Load the default version before a SnapStart snapshot (PUT /models/{m} {"preload": true}).
    preload: bool = False
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
    # What the version's auto_complete_config filled into the config (Triton JSON fields)
    auto_completed: dict[str, Any] = field(default_factory=dict)
    # The version's Python environment (publishing.environments): digest, key, sha256, size,
    # unpacked_bytes, packages; empty when it has none. Items written before have none.
    environment: dict[str, Any] = field(default_factory=dict)


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


def model_pk(name: str) -> str:
    return f"MODEL#{name}"


def key(pk: str, sk: str) -> dict[str, Any]:
    return {"pk": {"S": pk}, "sk": {"S": sk}}


def values(**named: Any) -> dict[str, Any]:
    """ExpressionAttributeValues for ``:name`` placeholders."""
    return {f":{name}": _serializer.serialize(value) for name, value in named.items()}


def plain(item: dict[str, Any]) -> dict[str, Any]:
    return {key: _number(_deserializer.deserialize(value)) for key, value in item.items()}


def _number(value: Any) -> Any:
    if isinstance(value, Decimal):
        return int(value) if value == value.to_integral_value() else float(value)
    return value


def encode_token(key: dict[str, Any]) -> str:
    return base64.urlsafe_b64encode(json.dumps(key).encode()).decode()


def decode_token(token: str) -> dict[str, Any]:
    try:
        key = json.loads(base64.urlsafe_b64decode(token.encode()))
        if not isinstance(key, dict) or not {"kind", "pk"} <= set(key) <= {"kind", "pk", "sk"}:
            raise ValueError("unexpected keys")
        return key
    except (ValueError, binascii.Error, UnicodeDecodeError) as exc:
        raise InvalidInput(
            "invalid next_page_token: pass the nextPageToken of the previous page unchanged"
        ) from exc


def warnings_from(stored: str) -> tuple[str, ...]:
    """The stored warnings: a JSON list (an item written before they were a list holds one
    "; "-joined text, whose messages contain "; " themselves: it stays one entry)."""
    if not stored:
        return ()
    if stored.startswith("["):
        return tuple(str(w) for w in json.loads(stored))
    return (stored,)


def model_from_item(item: dict[str, Any]) -> ModelRecord:
    file_config = item.get("file_config") or None
    return ModelRecord(
        # from the key where the name is not (yet) there: an item another writer is
        # creating right now (the local emulator shows one half-made to a concurrent read)
        name=item.get("name") or str(item["pk"]).removeprefix("MODEL#"),
        file_config=json.loads(file_config) if file_config else None,
        config_source=item.get("config_source", ""),
        config_error=item.get("config_error", ""),
        rejected_config=item.get("rejected_config", ""),
        config_warnings=warnings_from(item.get("config_warnings", "")),
        class_labels=json.loads(item["class_labels"]) if item.get("class_labels") else {},
        initial_states=json.loads(item["initial_states"]) if item.get("initial_states") else {},
        version_labels=json.loads(item["version_labels"]) if item.get("version_labels") else {},
        label_weights=json.loads(item["label_weights"]) if item.get("label_weights") else {},
        overrides=json.loads(item["overrides"]) if item.get("overrides") else {},
        auto_completed=json.loads(item["auto_completed"]) if item.get("auto_completed") else {},
        default_version=item.get("default_version"),
        unloaded=bool(item.get("unloaded", False)),
        preload=bool(item.get("preload", False)),
        config_observed_at=item.get("config_observed_at", 0),
        created_at=item.get("created_at", ""),
        updated_at=item.get("updated_at", ""),
    )


_JSON_VERSION_FIELDS = ("signature", "files", "auto_completed", "environment")


def version_to_item(record: VersionRecord) -> dict[str, Any]:
    item: dict[str, Any] = {
        "pk": model_pk(record.model),
        "sk": VERSION_SK.format(record.version),
    }
    for name, value in record.__dict__.items():
        item[name] = (
            json.dumps(list(value) if name == "files" else value)
            if (name in _JSON_VERSION_FIELDS)
            else value
        )
    return {name: _serializer.serialize(value) for name, value in item.items()}


def version_from_item(fields_of_item: dict[str, Any]) -> VersionRecord:
    fields = {
        name: fields_of_item[name]
        for name in VersionRecord.__dataclass_fields__
        if name in fields_of_item
    }
    fields["signature"] = json.loads(fields.get("signature") or "{}")
    fields["files"] = tuple(json.loads(fields.get("files") or "[]"))
    fields["auto_completed"] = json.loads(fields.get("auto_completed") or "{}")
    fields["environment"] = json.loads(fields.get("environment") or "{}")
    return VersionRecord(**fields)
