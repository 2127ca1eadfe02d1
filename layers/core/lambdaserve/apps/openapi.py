"""The OpenAPI documents, true to what the apps answer.

FastAPI documents 422s the apps never send (they answer 400) and leaves out the hot routes,
which are plain Starlette routes, and the bodies the management routes read themselves.
This adds them, with the ``{"error": ...}`` answers each operation can give.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi

from lambdaserve.apps.openapi_parameters import PATH_SCHEMAS, correct_parameters

ERROR = {
    "type": "object",
    "required": ["error"],
    "properties": {"error": {"type": "string", "description": "what is wrong and how to fix it"}},
}
_ERRORS = {
    "400": "malformed or invalid request (the message names the field or tensor)",
    "404": "unknown model, version or request id",
    "405": "method not allowed (the Allow header lists the ones that are)",
    "408": "the request did not arrive in time",
    "409": "the request contradicts the current state",
    "413": "the body is over the size limit",
    "503": "the model or version is not ready (the message says why)",
}
DATATYPES = [
    "BOOL",
    "UINT8",
    "UINT16",
    "UINT32",
    "UINT64",
    "INT8",
    "INT16",
    "INT32",
    "INT64",
    "FP16",
    "FP32",
    "FP64",
    "BYTES",
]
_SHAPE = {"type": "array", "items": {"type": "integer", "minimum": 0}, "maxItems": 64}
_PARAMETERS = {"type": "object", "additionalProperties": True}
V2_REQUEST = {
    "type": "object",
    "required": ["inputs"],
    "properties": {
        "id": {"type": "string"},
        "parameters": _PARAMETERS,
        "inputs": {
            "type": "array",
            "minItems": 1,
            "items": {
                "type": "object",
                "required": ["name", "datatype", "shape"],
                "properties": {
                    "name": {"type": "string", "minLength": 1},
                    "datatype": {"type": "string", "enum": DATATYPES},
                    "shape": _SHAPE,
                    "data": {"description": "row-major values, flat or nested"},
                    "parameters": _PARAMETERS,
                },
            },
        },
        "outputs": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["name"],
                "properties": {"name": {"type": "string"}, "parameters": _PARAMETERS},
            },
        },
    },
}
V2_RESPONSE = {
    "type": "object",
    "required": ["model_name", "model_version", "outputs"],
    "properties": {
        "model_name": {"type": "string"},
        "model_version": {"type": "string"},
        "id": {"type": "string"},
        "outputs": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["name", "datatype", "shape"],
                "properties": {
                    "name": {"type": "string"},
                    "datatype": {"type": "string"},
                    "shape": _SHAPE,
                    "data": {"type": "array"},
                    "parameters": _PARAMETERS,
                },
            },
        },
    },
}
ACCEPTED = {
    "type": "object",
    "required": ["id", "status_url"],
    "properties": {"id": {"type": "string"}, "status_url": {"type": "string"}},
}


# Triton's load takes the config as a string of JSON (an object is taken too): the standard
# contentMediaType/contentSchema say so, though generators read them as any string
LOAD_CONFIG = {
    "description": "model-config fields in Triton's JSON form, as a JSON string or an object",
    "oneOf": [
        {"type": "object"},
        {
            "type": "string",
            "contentMediaType": "application/json",
            "contentSchema": {"type": "object"},
        },
    ],
}
# operations kept for TorchServe's clients that refuse every request, saying what to do instead
REFUSED = {
    ("post", "/models"): (
        "TorchServe's registration from a URL: not supported, always 400 naming how to "
        "publish instead (upload to the model bucket)"
    ),
    ("post", "/workflows"): (
        "TorchServe's workflow registration: not supported, always 400 naming how to "
        "publish instead (upload the .war to the model bucket)"
    ),
}


def json_body(schema: dict[str, Any], required: bool = True) -> dict[str, Any]:
    return {"required": required, "content": {"application/json": {"schema": schema}}}


def _path_parameters(path: str) -> list[dict[str, Any]]:
    names = [part[1:-1] for part in path.split("/") if part.startswith("{")]
    return [
        {
            "name": name,
            "in": "path",
            "required": True,
            "schema": PATH_SCHEMAS.get(name, {"type": "string"}),
        }
        for name in names
    ]


def _infer_paths() -> dict[str, Any]:
    paths: dict[str, Any] = {}
    for path in ("/v2/models/{model}/infer", "/v2/models/{model}/versions/{version}/infer"):
        paths[path] = {
            "post": {
                "summary": "KServe v2 inference (JSON, or Triton's binary tensor extension)",
                "operationId": "infer" + ("_version" if "version" in path else ""),
                "parameters": [
                    *_path_parameters(path),
                    {
                        "name": "Inference-Header-Content-Length",
                        "in": "header",
                        "required": False,
                        "schema": {"type": "string", "pattern": "^[0-9]{1,15}$"},
                    },
                    {
                        "name": "Prefer",
                        "in": "header",
                        "required": False,
                        "schema": {"type": "string", "enum": ["respond-async"]},
                    },
                ],
                "requestBody": json_body(V2_REQUEST),
                "responses": {
                    "200": {
                        "description": "the outputs",
                        "content": {"application/json": {"schema": V2_RESPONSE}},
                    },
                    "202": {
                        "description": "accepted (Prefer: respond-async): poll status_url",
                        "content": {"application/json": {"schema": ACCEPTED}},
                    },
                },
            }
        }
    for path in ("/predictions/{model}", "/predictions/{model}/{version}"):
        suffix = "_version" if "version" in path else ""
        body = json_body({"oneOf": [{"type": "array"}, {"type": "object"}]})
        body["content"]["application/octet-stream"] = {
            "schema": {"type": "string", "format": "binary"}
        }
        body["content"]["multipart/form-data"] = {
            # no fields at all is refused: the handler would get no data
            "schema": {
                "type": "object",
                "additionalProperties": {"type": "string"},
                "minProperties": 1,
            }
        }
        operation = {
            "summary": (
                "TorchServe-style prediction: JSON (a nested list, or {input: list}) for "
                "tensor models; a raw body or multipart fields for handlers and models with "
                "one BYTES input"
            ),
            "parameters": _path_parameters(path),
            "requestBody": body,
            "responses": {
                "200": {"description": "the output(s) as JSON, or what the handler returned"}
            },
        }
        paths[path] = {
            "post": {**operation, "operationId": "predictions" + suffix},
            "put": {**operation, "operationId": "predictions_put" + suffix},
        }
    return paths


def document_api(
    app: FastAPI,
    extra_paths: dict[str, Any] | None = None,
    bodies: dict[tuple[str, str], dict[str, Any]] | None = None,
) -> None:
    """Install the document builder on ``app``: FastAPI's, corrected and completed."""

    def build() -> dict[str, Any]:
        if app.openapi_schema:
            return app.openapi_schema
        schema = get_openapi(title=app.title, version=app.version, routes=app.routes)
        schema["paths"].update(extra_paths or {})
        for path, operations in schema["paths"].items():
            for method, operation in operations.items():
                body = (bodies or {}).get((method, path))
                if body is not None:
                    operation["requestBody"] = body
                correct_parameters(method, path, operation)
                _correct_responses(operation)
                if (method, path) in REFUSED:
                    operation["description"] = REFUSED[method, path]
                    operation["responses"].pop("200", None)
        schema.setdefault("components", {}).setdefault("schemas", {})["Error"] = ERROR
        for name in ("HTTPValidationError", "ValidationError"):
            schema["components"]["schemas"].pop(name, None)
        app.openapi_schema = schema
        return schema

    app.openapi = build  # type: ignore[method-assign]


def _correct_responses(operation: dict[str, Any]) -> None:
    responses = operation.setdefault("responses", {})
    responses.pop("422", None)
    for code, description in _ERRORS.items():
        responses.setdefault(
            code,
            {
                "description": description,
                "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}},
            },
        )


def inference_paths() -> dict[str, Any]:
    return _infer_paths()


def inference_bodies() -> dict[tuple[str, str], dict[str, Any]]:
    """The bodies the inference app's own routes read themselves."""
    predict = {
        "type": "object",
        "description": "TF Serving's predict: row (instances) or columnar (inputs) format",
        "properties": {
            "signature_name": {"type": "string"},
            "instances": {"type": "array"},
            "inputs": {},
        },
        "oneOf": [{"required": ["instances"]}, {"required": ["inputs"]}],
    }
    return {("post", "/v1/models/{target}"): json_body(predict)}


def management_bodies() -> dict[tuple[str, str], dict[str, Any]]:
    config = {"type": "object", "description": "model-config fields in Triton's JSON form"}
    load = {
        "type": "object",
        "properties": {
            "parameters": {
                "type": "object",
                "properties": {"config": LOAD_CONFIG},
            }
        },
    }
    index = {"type": "object", "properties": {"ready": {"type": "boolean"}}}
    weight = {"type": "integer", "minimum": 1, "maximum": 100}
    rollout = {
        "type": "object",
        "required": ["label", "to"],
        "additionalProperties": False,
        "properties": {
            "label": {"type": "string", "minLength": 1},
            "to": {"type": "integer", "minimum": 1},
            "steps": {"type": "array", "items": weight, "minItems": 1},
            "bake_seconds": {"type": "integer", "minimum": 0},
            "analysis": {"type": "object", "description": "the gates (docs/rollouts.md)"},
        },
    }
    return {
        ("post", "/models/{model}/rollouts"): json_body(rollout),
        ("put", "/models/{model}"): json_body(config),
        ("post", "/v2/repository/index"): json_body(index, required=False),
        ("post", "/v2/repository/models/{model}/load"): json_body(load, required=False),
        ("post", "/v2/repository/models/{model}/unload"): json_body(
            {"type": "object"}, required=False
        ),
    }
