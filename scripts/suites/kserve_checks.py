"""One check per endpoint and behaviour that KServe's v2 ``required_api.md`` states (HTTP/REST).

Each check is a function ``(api) -> str``: it returns a note when the server behaves as the
document says and raises ``AssertionError`` naming what differs otherwise. They run against
the demo model of ``lambdaserve dev`` (``demo-mlp``: FP32 ``INPUT__0`` [-1, 4] →
``OUTPUT__0`` [-1, 3], version 1).
"""

from __future__ import annotations

import json
import math
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

MODEL, VERSION, INPUT = "demo-mlp", "1", "INPUT__0"
DATATYPES = {
    "BOOL", "UINT8", "UINT16", "UINT32", "UINT64", "INT8", "INT16", "INT32", "INT64",
    "FP16", "FP32", "FP64", "BYTES", "BF16",
}  # fmt: skip
ROW = [0.1, 0.2, 0.3, 0.4]


@dataclass
class Api:
    base: str
    schemas: dict[str, Any] = field(default_factory=dict)  # from rest_predict_v2.yaml

    def call(
        self, method: str, path: str, body: Any = None, raw: bytes | None = None
    ) -> tuple[int, bytes]:
        data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
        request = urllib.request.Request(self.base + path, data=data, method=method)
        request.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                return response.status, response.read()
        except urllib.error.HTTPError as error:
            return error.code, error.read()

    def json(
        self, method: str, path: str, body: Any = None, raw: bytes | None = None
    ) -> tuple[int, Any]:
        status, text = self.call(method, path, body, raw)
        try:
            return status, json.loads(text) if text else None
        except ValueError:
            return status, text.decode(errors="replace")

    def conforms(self, answer: Any, schema: str) -> None:
        """Validate against the OpenAPI document's component schema, when it was given."""
        if schema not in self.schemas:
            return
        import jsonschema

        document = {"components": {"schemas": self.schemas}} | self.schemas[schema]
        try:
            jsonschema.validate(answer, document)
        except jsonschema.ValidationError as error:
            raise AssertionError(
                f"not a {schema} (rest_predict_v2.yaml): {error.message}"
            ) from None


def infer_body(rows: int = 1, **extra: Any) -> dict[str, Any]:
    return {
        "inputs": [{"name": INPUT, "shape": [rows, 4], "datatype": "FP32", "data": ROW * rows}]
    } | extra


def expect(status: int, wanted: int | range, answer: Any) -> None:
    ok = status in wanted if isinstance(wanted, range) else status == wanted
    if not ok:
        raise AssertionError(f"status {status}, expected {wanted}; answer {str(answer)[:200]}")


def error_object(status: int, answer: Any) -> str:
    """A failed request: an HTTP error status and ``{"error": <string>}``."""
    expect(status, range(400, 500), answer)
    if not (isinstance(answer, dict) and isinstance(answer.get("error"), str) and answer["error"]):
        raise AssertionError(f"body is not {{'error': <string>}}: {str(answer)[:200]}")
    return f"{status} {answer['error'][:90]}"


def tensor_metadata(tensor: dict[str, Any]) -> None:
    if not isinstance(tensor.get("name"), str) or tensor.get("datatype") not in DATATYPES:
        raise AssertionError(f"bad $metadata_tensor {tensor}")
    if not all(isinstance(d, int) and d >= -1 for d in tensor.get("shape", [None])):
        raise AssertionError(f"shape must be integers, -1 for variable: {tensor}")


def response_outputs(answer: dict[str, Any], rows: int) -> None:
    for output in answer["outputs"]:
        if not {"name", "shape", "datatype", "data"} <= set(output):
            raise AssertionError(f"$response_output lacks fields: {sorted(output)}")
        flat = _flatten(output["data"])
        if len(flat) != math.prod(output["shape"]) or output["shape"][0] != rows:
            raise AssertionError(f"shape {output['shape']} does not match {len(flat)} elements")


def _flatten(data: Any) -> list[Any]:
    return [x for item in data for x in _flatten(item)] if isinstance(data, list) else [data]


# -- the checks -----------------------------------------------------------------------------


def health(path: str) -> Callable[[Api], str]:
    def check(api: Api) -> str:
        status, text = api.call("GET", path)
        expect(status, 200, text)
        return "200" + (
            "" if not text else f" (body {text[:40]!r}; the document says it should be empty)"
        )

    return check


def not_ready(path: str) -> Callable[[Api], str]:
    def check(api: Api) -> str:
        status, text = api.call("GET", path)
        expect(status, range(400, 500), text)
        return f"{status}: false"

    return check


def server_metadata(path: str) -> Callable[[Api], str]:
    def check(api: Api) -> str:
        status, answer = api.json("GET", path)
        expect(status, 200, answer)
        api.conforms(answer, "metadata_server_response")
        if not (isinstance(answer.get("name"), str) and isinstance(answer.get("version"), str)):
            raise AssertionError(f"name and version must be strings: {answer}")
        if not all(isinstance(e, str) for e in answer.get("extensions", [None])):
            raise AssertionError(f"extensions must be a list of strings: {answer}")
        return f"{answer['name']} {answer['version']}"

    return check


def model_metadata(path: str) -> Callable[[Api], str]:
    def check(api: Api) -> str:
        status, answer = api.json("GET", path)
        expect(status, 200, answer)
        api.conforms(answer, "metadata_model_response")
        if answer.get("name") != MODEL or not isinstance(answer.get("platform"), str):
            raise AssertionError(f"name/platform: {answer}")
        if VERSION not in answer.get("versions", []) or not all(
            isinstance(v, str) for v in answer["versions"]
        ):
            raise AssertionError(
                f"versions must be strings naming {VERSION}: {answer.get('versions')}"
            )
        for tensor in answer["inputs"] + answer["outputs"]:
            tensor_metadata(tensor)
        return f"versions {answer['versions']}, platform {answer['platform']}"

    return check


def infer_ok(
    path: str, body: dict[str, Any], rows: int = 1, outputs: list[str] | None = None
) -> Callable[[Api], str]:
    def check(api: Api) -> str:
        status, answer = api.json("POST", path, body)
        expect(status, 200, answer)
        api.conforms(answer, "inference_response")
        if answer.get("model_name") != MODEL or not isinstance(
            answer.get("model_version", ""), str
        ):
            raise AssertionError(f"model_name/model_version: {answer}")
        if "id" in body and answer.get("id") != body["id"]:
            raise AssertionError(f"id {body['id']!r} not returned: {answer.get('id')!r}")
        if outputs is not None and [o["name"] for o in answer["outputs"]] != outputs:
            raise AssertionError(
                f"outputs {[o['name'] for o in answer['outputs']]}, asked {outputs}"
            )
        response_outputs(answer, rows)
        return f"200, outputs {[(o['name'], o['shape']) for o in answer['outputs']]}"

    return check


def same_answer_nested_and_flat(api: Api) -> str:
    nested = {"inputs": [{"name": INPUT, "shape": [2, 4], "datatype": "FP32", "data": [ROW, ROW]}]}
    flat = infer_body(rows=2)
    a, b = (
        api.json("POST", f"/v2/models/{MODEL}/infer", nested),
        api.json("POST", f"/v2/models/{MODEL}/infer", flat),
    )
    expect(a[0], 200, a[1])
    expect(b[0], 200, b[1])
    if _flatten(a[1]["outputs"][0]["data"]) != _flatten(b[1]["outputs"][0]["data"]):
        raise AssertionError("the natural and the flattened representation answer differently")
    return "same outputs"


def error_check(
    method: str, path: str, body: Any = None, raw: bytes | None = None
) -> Callable[[Api], str]:
    def check(api: Api) -> str:
        status, answer = api.json(method, path, body, raw)
        return error_object(status, answer)

    return check


def bad_input(**change: Any) -> dict[str, Any]:
    body = infer_body()
    body["inputs"][0] |= change
    return body


M, MV = f"/v2/models/{MODEL}", f"/v2/models/{MODEL}/versions/{VERSION}"
CHECKS: list[tuple[str, Callable[[Api], str]]] = [
    ("health: server live GET /v2/health/live is 200", health("/v2/health/live")),
    ("health: server ready GET /v2/health/ready is 200", health("/v2/health/ready")),
    ("health: model ready GET /v2/models/{m}/ready is 200", health(f"{M}/ready")),
    ("health: model ready with version .../versions/{v}/ready is 200", health(f"{MV}/ready")),
    (
        "health: model ready, unknown model is 4xx (false)",
        not_ready("/v2/models/no-such-model/ready"),
    ),
    ("health: model ready, unknown version is 4xx (false)", not_ready(f"{M}/versions/999/ready")),
    ("server metadata: GET /v2 is $metadata_server_response", server_metadata("/v2")),
    ("server metadata: GET /v2/ (the OpenAPI path) answers too", server_metadata("/v2/")),
    ("model metadata: GET /v2/models/{m} is $metadata_model_response", model_metadata(M)),
    ("model metadata: GET .../versions/{v} is $metadata_model_response", model_metadata(MV)),
    (
        "model metadata: unknown model is an error status + {error}",
        error_check("GET", "/v2/models/no-such-model"),
    ),
    (
        "model metadata: unknown version is an error status + {error}",
        error_check("GET", f"{M}/versions/999"),
    ),
    (
        "infer: $inference_request with id → 200, id returned",
        infer_ok(f"{M}/infer", infer_body(id="req-1")),
    ),
    ("infer: with version in the URL → 200", infer_ok(f"{MV}/infer", infer_body(id="req-2"))),
    ("infer: without id (optional) → 200", infer_ok(f"{M}/infer", infer_body())),
    (
        "infer: batched input, full batch shape → 200",
        infer_ok(f"{M}/infer", infer_body(rows=3), rows=3),
    ),
    (
        "infer: outputs requested by name → those outputs",
        infer_ok(f"{M}/infer", infer_body(outputs=[{"name": "OUTPUT__0"}]), outputs=["OUTPUT__0"]),
    ),
    (
        "infer: $parameters on the request, an input and an output → 200",
        infer_ok(
            f"{M}/infer",
            infer_body(
                parameters={"a": "b", "n": 1, "t": True},
                outputs=[{"name": "OUTPUT__0", "parameters": {}}],
            )
            | {"inputs": [infer_body()["inputs"][0] | {"parameters": {"x": 1}}]},
        ),
    ),
    (
        "tensor data: natural (nested) and flattened forms are the same tensor",
        same_answer_nested_and_flat,
    ),
    (
        "infer error: wrong shape → 400 + {error}",
        error_check("POST", f"{M}/infer", bad_input(shape=[1, 5], data=[*ROW, 0.5])),
    ),
    (
        "infer error: unknown input name → 400 + {error}",
        error_check("POST", f"{M}/infer", bad_input(name="nope")),
    ),
    (
        "infer error: wrong datatype → 400 + {error}",
        error_check("POST", f"{M}/infer", bad_input(datatype="INT64")),
    ),
    (
        "infer error: unexpected element value (string in FP32) → 400 + {error}",
        error_check("POST", f"{M}/infer", bad_input(data=["a", 1, 2, 3])),
    ),
    (
        "infer error: data does not match the shape → 400 + {error}",
        error_check("POST", f"{M}/infer", bad_input(data=[1.0, 2.0])),
    ),
    (
        "infer error: malformed JSON → 400 + {error}",
        error_check("POST", f"{M}/infer", raw=b'{"inputs": ['),
    ),
    ("infer error: no inputs → 400 + {error}", error_check("POST", f"{M}/infer", {"id": "x"})),
    (
        "infer error: unknown model → 4xx + {error}",
        error_check("POST", "/v2/models/no-such-model/infer", infer_body()),
    ),
    (
        "infer error: unknown version → 4xx + {error}",
        error_check("POST", f"{M}/versions/999/infer", infer_body()),
    ),
]
