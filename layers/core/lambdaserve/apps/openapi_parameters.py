"""The documents' parameters as the server checks them: names, versions and labels from
``protocol.names`` (one source for both), TF Serving's targets, and the query parameters
whose FastAPI-made schemas (any string) said less than the server enforces."""

from __future__ import annotations

from typing import Any

from lambdaserve.protocol.names import (
    LABEL_PATTERN,
    MODEL_NAME_PATTERN,
    RESERVED_LABELS,
    VERSION_PATTERN,
)

MODEL = {
    "type": "string",
    "pattern": MODEL_NAME_PATTERN,
    "description": "1-128 characters from [A-Za-z0-9_.-], starting with a letter or digit",
}
VERSION = {"type": "string", "pattern": VERSION_PATTERN, "description": "a positive integer"}
_NOT_A_LABEL = "|".join(["[0-9]+", *sorted(RESERVED_LABELS)])
LABEL = {
    "type": "string",
    "pattern": LABEL_PATTERN,
    # all digits would read as a version; "all" is TorchServe's /models/{m}/all, "rollouts"
    # the model's rollouts
    "not": {"pattern": f"^({_NOT_A_LABEL})$"},
    "description": "a version label such as stable or 1.0: not all digits, not 'all' or 'rollouts'",
}
VERSION_REF = {
    "anyOf": [VERSION, LABEL],
    "description": "a version number, or one of the model's version labels",
}
# ECMA-262 and Python agree on these lookaheads; the segment ends at '/', ':' or the end
_SEGMENT_END = "(?:[/:]|$)"
_LABEL_IN_TARGET = (
    f"(?![0-9]+{_SEGMENT_END})"
    + "".join(f"(?!{label}{_SEGMENT_END})" for label in sorted(RESERVED_LABELS))
    + LABEL_PATTERN[1:-1]
)
_TARGET = (
    f"^{MODEL_NAME_PATTERN[1:-1]}"
    f"(/versions/{VERSION_PATTERN[1:-1]}|/labels/({VERSION_PATTERN[1:-1]}|{_LABEL_IN_TARGET}))?"
)
# GET: status, or /metadata; POST: :predict (a POST with no verb is a 404). :classify and
# :regress answer only a signature taking serialized tf.Examples (SavedModels TensorFlow
# serves; a 400 for every other model), so the document describes :predict alone.
TARGET_GET = {
    "type": "string",
    "pattern": _TARGET + "(/metadata)?$",
    "description": "<model>[/versions/<n>|/labels/<label>][/metadata]",
}
TARGET_POST = {
    "type": "string",
    "pattern": _TARGET + ":predict$",
    "description": "<model>[/versions/<n>|/labels/<label>]:predict",
}
PATH_SCHEMAS: dict[str, dict[str, Any]] = {
    "model": MODEL,
    "name": MODEL,
    "workflow": MODEL,
    "version": VERSION_REF,
    "label": LABEL,
}

_DEFAULT_VERSION = {"type": "string", "maxLength": 0, "description": "the default version"}
_NOT_CUSTOMIZED = {
    "type": "boolean",
    "enum": [False],
    "default": False,
    "description": (
        "TorchServe's customized=true runs the handler's describe_handle: model code, which "
        "runs only where models serve, so it is refused here (400)"
    ),
}
# query parameter name -> its schema, and whether it is required
QUERY_SCHEMAS: dict[str, tuple[dict[str, Any], bool]] = {
    "version": ({"anyOf": [_DEFAULT_VERSION, VERSION_REF]}, False),
    "customized": (_NOT_CUSTOMIZED, False),
    "limit": (
        {
            "type": "string",
            "pattern": "^(-?[0-9]{1,18})?$",
            "description": "page size; empty is 100, outside 1-1000 is 100 (as TorchServe)",
        },
        False,
    ),
    "next_page_token": (
        {
            "type": "string",
            "pattern": "^(-?[0-9]{1,9})?$",
            "description": (
                "an offset (TorchServe's tokens), or the nextPageToken of the previous page "
                "passed unchanged (opaque, so not described by this pattern)"
            ),
        },
        False,
    ),
}
# operations whose parameters mean something else than above
_BY_OPERATION = {
    ("get", "/v1/models/{target}", "target"): (TARGET_GET, True),
    ("post", "/v1/models/{target}", "target"): (TARGET_POST, True),
    ("put", "/models/{model}/labels/{label}", "version"): (
        {
            **VERSION,
            "description": (
                'the version the label points at; a body {"version": n} may say it instead'
            ),
        },
        True,
    ),
}


def correct_parameters(method: str, path: str, operation: dict[str, Any]) -> None:
    """Give each path and query parameter the schema of what the server accepts."""
    for parameter in operation.get("parameters", []):
        name, where = parameter["name"], parameter.get("in")
        known = _BY_OPERATION.get((method, path, name))
        if known is None and where == "path" and name in PATH_SCHEMAS:
            known = PATH_SCHEMAS[name], True
        elif known is None and where == "query":
            known = QUERY_SCHEMAS.get(name)
        if known is not None:
            parameter["schema"], parameter["required"] = known
