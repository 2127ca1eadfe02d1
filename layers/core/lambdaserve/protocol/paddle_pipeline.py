"""Paddle Serving's pipeline HTTP API as a codec: ``{"key": [...], "value": [...]}`` in,
``{"err_no": 0, "err_msg": "", "key": [...], "value": [...]}`` out.

Values are strings, as Paddle's ``PipelineClient`` sends them: a numpy repr
(``array([[1., 2.]], dtype=float32)``), a JSON or Python list literal, or comma-separated
numbers; read as JSON after Python's and numpy's spellings (tuples, ``1.``, nan, inf,
None), never ``eval``. A key names a model input; a value with the input's elements but
not its rank gets a batch dimension of one. Outputs are JSON
text. Errors keep HTTP 200 with Paddle's error numbers, as its gateway answers.

A model whose inputs are BYTES ``key`` and ``value`` (a Paddle pipeline: web_service.py with
its Ops) gets the lists as they came, and answers with its own ``key``, ``value``, ``err_no``
and ``err_msg``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

import numpy as np
import orjson

from lambdaserve.errors import InvalidInput, LambdaServeError, ModelNotFound, ModelNotReady
from lambdaserve.protocol.v2 import InferInput, InferRequest
from lambdaserve.tensors.encoding import array_from_json, element_count
from lambdaserve.tensors.signature import Signature, TensorSpec

# Paddle Serving's CustomExceptionCode values
OK, NO_SERVICE, INPUT_PARAMS_ERROR, UNKNOWN = 0, 3002, 5000, 10000
_NUMPY_REPR = re.compile(r"^\s*array\((?P<body>.*?)(?:,\s*dtype=[\w.]+)?\)\s*$", re.S)
MAX_VALUE_CHARS = 8 * 1024**2


def parse_request(document: Any, signature: Signature) -> InferRequest:
    if not isinstance(document, dict):
        raise InvalidInput('the body must be a JSON object with "key" and "value" lists')
    keys, values = document.get("key"), document.get("value")
    if not isinstance(keys, list) or not isinstance(values, list) or len(keys) != len(values):
        raise InvalidInput('"key" and "value" must be lists of the same length')
    request_id = _log_id(document.get("logid"))
    if takes_key_value(signature):
        return _key_value_request(keys, values, request_id)
    specs = {spec.name: spec for spec in signature.inputs}
    inputs = []
    for key, value in zip(keys, values, strict=True):
        spec = specs.get(key)
        if spec is None:
            raise InvalidInput(f"key {key!r} is not an input; the model takes {sorted(specs)}")
        if not isinstance(value, str):
            raise InvalidInput(f"value of {key!r} must be a string, as PipelineClient sends it")
        array = _fit(spec, _array(spec, value))
        inputs.append(InferInput(key, spec.datatype, tuple(array.shape), array))
    missing = set(specs) - set(keys)
    if missing:
        raise InvalidInput(f"missing keys {sorted(missing)}; the model takes {sorted(specs)}")
    return InferRequest(tuple(inputs), id=request_id)


def _log_id(logid: Any) -> str | None:
    """Paddle's ``logid`` (an int64 its client sets to follow a request through the logs) is
    the request's id: in model code's failure log and its trace, as v2's ``id`` is."""
    if logid is None or logid == 0:
        return None  # the proto's default: the client set none
    if isinstance(logid, bool) or not isinstance(logid, int):
        raise InvalidInput(
            f'"logid" must be an integer, as Paddle\'s client sends it; got {logid!r}'
        )
    return str(logid)


def takes_key_value(signature: Signature) -> bool:
    """A pipeline's own face: Paddle's key and value lists, unparsed."""
    return [(s.name, s.datatype) for s in signature.inputs] == PIPELINE_INPUTS


PIPELINE_INPUTS = [("key", "BYTES"), ("value", "BYTES")]
PIPELINE_OUTPUTS = frozenset({"key", "value", "err_no", "err_msg"})


def _key_value_request(keys: list[Any], values: list[Any], request_id: str | None) -> InferRequest:
    if not all(isinstance(v, str) for v in [*keys, *values]):
        raise InvalidInput('"key" and "value" must be lists of strings, as PipelineClient sends')
    inputs = tuple(
        InferInput(name, "BYTES", (len(items),), np.array([i.encode() for i in items], object))
        for name, items in (("key", keys), ("value", values))
    )
    return InferRequest(inputs, id=request_id)


def encode_response(outputs: Mapping[str, np.ndarray[Any, Any]]) -> dict[str, Any]:
    if set(outputs) >= PIPELINE_OUTPUTS:
        return {
            "err_no": int(np.asarray(outputs["err_no"]).reshape(-1)[0]),
            "err_msg": _decoded(outputs["err_msg"])[0],
            "key": _decoded(outputs["key"]),
            "value": _decoded(outputs["value"]),
        }
    return {
        "err_no": OK,
        "err_msg": "",
        "key": list(outputs),
        "value": [_text(array) for array in outputs.values()],
    }


def error_response(error: LambdaServeError) -> dict[str, Any]:
    if isinstance(error, (ModelNotFound, ModelNotReady)):
        code = NO_SERVICE
    elif isinstance(error, InvalidInput):
        code = INPUT_PARAMS_ERROR
    else:
        code = UNKNOWN
    return {"err_no": code, "err_msg": error.message, "key": [], "value": []}


def _array(spec: TensorSpec, value: str) -> np.ndarray[Any, Any]:
    if spec.datatype == "BYTES":
        return np.array([value.encode()], dtype=object)
    if len(value) > MAX_VALUE_CHARS:
        raise InvalidInput(f"value of {spec.name!r} is over {MAX_VALUE_CHARS} characters")
    repr_match = _NUMPY_REPR.match(value)
    text = repr_match["body"] if repr_match else value
    try:
        parsed = json.loads(_as_json(text.strip()))
    except (ValueError, RecursionError):
        parsed = _separated(spec.name, text)
    return array_from_json(spec.name, spec.datatype, parsed)


def _as_json(literal: str) -> str:
    """A Python list/tuple literal of numbers as JSON (Python's nan and inf as json reads
    them): no ast.literal_eval, which builds AST objects and is not safe beside other
    threads' parsing on CPython 3.11."""
    for python, written in _PYTHON_TOKENS:
        literal = python.sub(written, literal)
    return literal


_PYTHON_TOKENS = (
    (re.compile(r"\("), "["),
    (re.compile(r"\)"), "]"),
    (re.compile(r",\s*\]"), "]"),  # (1,) and [1, 2,]
    (re.compile(r"(\d)\.(?![\d])"), r"\1.0"),  # numpy's 1. and 2.
    (re.compile(r"(?<![\d])\.(\d)"), r"0.\1"),  # .5
    (re.compile(r"\bnan\b"), "NaN"),
    (re.compile(r"\bNone\b"), "null"),
    (re.compile(r"\binf\b"), "Infinity"),
    (re.compile(r"\bTrue\b"), "true"),
    (re.compile(r"\bFalse\b"), "false"),
)


def _separated(name: str, text: str) -> list[float]:
    try:
        return [float(part) for part in re.split(r"[,\s]+", text.strip()) if part]
    except ValueError:
        raise InvalidInput(
            f"value of {name!r} is neither a list literal, a numpy repr nor comma-separated numbers"
        ) from None


def _fit(spec: TensorSpec, array: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """The input's rank: a value without the batch dimension gets one."""
    if array.ndim == len(spec.shape):
        return array
    fixed = [d for d in spec.shape[1:] if d > 0]
    if spec.shape[:1] == (-1,) and -1 not in spec.shape[1:] and array.size == element_count(fixed):
        return array.reshape((1, *spec.shape[1:]))
    if -1 not in spec.shape and array.size == element_count(spec.shape):
        return array.reshape(spec.shape)
    raise InvalidInput(
        f"value of {spec.name!r} has shape {list(array.shape)}; the input is {list(spec.shape)}"
    )


def _text(array: np.ndarray[Any, Any]) -> str:
    if array.dtype.kind in ("O", "S", "U"):
        values = [
            v.decode(errors="replace") if isinstance(v, bytes) else str(v)
            for v in array.reshape(-1)
        ]
        return orjson.dumps(np.array(values, dtype=object).reshape(array.shape).tolist()).decode()
    return orjson.dumps(array.tolist()).decode()


def _decoded(array: np.ndarray[Any, Any]) -> list[str]:
    return [
        v.decode(errors="replace") if isinstance(v, bytes) else str(v)
        for v in np.asarray(array).reshape(-1).tolist()
    ]
