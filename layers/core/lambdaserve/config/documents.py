"""Config files and API overrides as Triton's JSON document (``config.pbtxt`` or
``config.json``), parsed with Triton's own messages; ``model_config.build`` makes the
effective config from a document."""

from __future__ import annotations

import difflib
import json
import re
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
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InvalidInput(f"{filename} is not valid: {exc}") from exc
    except text_format.ParseError as exc:
        raise InvalidInput(f"{filename} is not valid: {with_suggestion(str(exc))}") from exc
    except json_format.ParseError as exc:
        raise InvalidInput(
            f"{filename} is not a valid Triton model config: {with_suggestion(str(exc))}"
        ) from exc
    return _to_document(message)


def parse_overrides(fields: dict[str, Any]) -> ConfigDocument:
    """Validate model-config fields given in Triton's JSON form (``PUT /models/{m}``)."""
    message = pb.ModelConfig()
    try:
        json_format.ParseDict(fields, message)
    except json_format.ParseError as exc:
        raise InvalidInput(f"not a valid Triton model config: {with_suggestion(str(exc))}") from exc
    document = _to_document(message)
    # Keep only the fields the caller set, so they replace just those on merge.
    return {key: value for key, value in document.items() if key in _normalised_keys(fields)}


_UNKNOWN_FIELD = re.compile(r'Message type "([\w.]+)" has no field named "(\w+)"')
_UNKNOWN_ENUM = re.compile(
    r'Enum type "([\w.]+)" has no value named (\w+)|Invalid enum value (\w+) for enum type ([\w.]+)'
)


def with_suggestion(error: str) -> str:
    """protobuf's parse error with "did you mean" from Triton's own field and enum names
    (the list of every field protobuf appends is dropped when there is a suggestion)."""
    pool = pb.ModelConfig.DESCRIPTOR.file.pool
    choices: list[str] = []
    wrong = ""
    try:
        if found := _UNKNOWN_FIELD.search(error):
            message, wrong = found.groups()
            fields = pool.FindMessageTypeByName(message).fields
            choices = [f.name for f in fields] + [f.json_name for f in fields]
        elif found := _UNKNOWN_ENUM.search(error):
            enum = found.group(1) or found.group(4)
            wrong = found.group(2) or found.group(3)
            choices = [v.name for v in pool.FindEnumTypeByName(enum).values]
    except KeyError:  # a type protobuf named that this pool does not hold
        return error
    close = difflib.get_close_matches(wrong, choices, n=1, cutoff=0.6) if choices else []
    if not close:
        return error
    first = error.split("\n", maxsplit=1)[0].rstrip(".")
    return f'{first}; did you mean "{close[0]}"?'


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
