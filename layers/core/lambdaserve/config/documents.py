"""Config files and API overrides as Triton's JSON document (``config.pbtxt`` or
``config.json``), parsed with Triton's own messages; ``model_config.build`` makes the
effective config from a document."""

from __future__ import annotations

import json
from typing import Any

from google.protobuf import json_format, text_format

from lambdaserve.config.triton_proto import pb
from lambdaserve.errors import InvalidInput

ConfigDocument = dict[str, Any]


def parse_document(filename: str, body: bytes) -> ConfigDocument:
    """Parse a config file into Triton's JSON form, or raise InvalidInput saying why."""
    message = pb.ModelConfig()
    try:
        text = body.decode("utf-8")
        if filename.endswith(".pbtxt"):
            text_format.Parse(text, message)
        else:
            json_format.ParseDict(json.loads(text), message)
    except (UnicodeDecodeError, json.JSONDecodeError, text_format.ParseError) as exc:
        raise InvalidInput(f"{filename} is not valid: {exc}") from exc
    except json_format.ParseError as exc:
        raise InvalidInput(f"{filename} is not a valid Triton model config: {exc}") from exc
    return _to_document(message)


def parse_overrides(fields: dict[str, Any]) -> ConfigDocument:
    """Validate model-config fields given in Triton's JSON form (``PUT /models/{m}``)."""
    message = pb.ModelConfig()
    try:
        json_format.ParseDict(fields, message)
    except json_format.ParseError as exc:
        raise InvalidInput(f"not a valid Triton model config: {exc}") from exc
    document = _to_document(message)
    # Keep only the fields the caller set, so they replace just those on merge.
    return {key: value for key, value in document.items() if key in _normalised_keys(fields)}


def _normalised_keys(fields: dict[str, Any]) -> set[str]:
    """Accept both proto field names and their lowerCamelCase JSON names."""
    by_json_name = {f.json_name: f.name for f in pb.ModelConfig.DESCRIPTOR.fields}
    return {by_json_name.get(key, key) for key in fields}


def _to_document(message: Any) -> ConfigDocument:
    document: ConfigDocument = json_format.MessageToDict(message, preserving_proto_field_name=True)
    if message.HasField("version_policy"):
        # MessageToDict drops empty messages such as ``all {}``; keep the choice.
        document["version_policy"] = {
            message.version_policy.WhichOneof("policy_choice"): document.get(
                "version_policy", {}
            ).get(message.version_policy.WhichOneof("policy_choice"), {})
        }
    return document


def merge(file_document: ConfigDocument | None, overrides: ConfigDocument | None) -> ConfigDocument:
    """Overrides from the management API replace whole top-level fields of the file."""
    return {**(file_document or {}), **(overrides or {})}
