"""TF Serving's REST API as a codec over the v2 domain: ``:predict`` bodies in the row
(``instances``) and columnar (``inputs``) formats to an ``InferRequest``, outputs back to
``predictions`` / ``outputs``, and the model status and metadata documents.

Strings travel as JSON strings or ``{"b64": "..."}``; string outputs whose names end in
``_bytes`` are answered base64-encoded, as TF Serving does.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from lambdaserve.errors import InvalidInput
from lambdaserve.protocol.v2 import InferInput, InferRequest
from lambdaserve.tensors.encoding import array_from_json
from lambdaserve.tensors.signature import Signature, SignatureDef, TensorSpec

Format = Literal["row", "columnar"]
SIGNATURE = "serving_default"
_TF_DTYPES = {
    "BOOL": "DT_BOOL",
    "UINT8": "DT_UINT8",
    "UINT16": "DT_UINT16",
    "UINT32": "DT_UINT32",
    "UINT64": "DT_UINT64",
    "INT8": "DT_INT8",
    "INT16": "DT_INT16",
    "INT32": "DT_INT32",
    "INT64": "DT_INT64",
    "FP16": "DT_HALF",
    "BF16": "DT_BFLOAT16",
    "FP32": "DT_FLOAT",
    "FP64": "DT_DOUBLE",
    "BYTES": "DT_STRING",
}


@dataclass(frozen=True)
class PredictRequest:
    """The request, its format, and how many trailing 1-dims were added to fit its inputs
    to the signature (TF Serving's reshape of ``[1.0, 2.0]`` to a ``[-1, 1]`` input): the
    outputs lose as many, as TensorFlow's graph would have answered."""

    request: InferRequest
    format: Format
    added_dims: int = 0


def signature_name(document: Any) -> str:
    """The body's ``signature_name`` ("" when absent: the default signature)."""
    name = document.get("signature_name", "") if isinstance(document, dict) else ""
    if not isinstance(name, str):
        raise InvalidInput(f'"signature_name" must be a string, got {name!r}')
    return name


def parse_predict(document: Any, signature: Signature) -> PredictRequest:
    """A ``:predict`` body for a signature's tensors; 400s say what TF Serving would."""
    if not isinstance(document, dict):
        raise InvalidInput('the body must be a JSON object with "instances" or "inputs"')
    has_rows, has_columns = "instances" in document, "inputs" in document
    if has_rows == has_columns:
        raise InvalidInput(
            'Missing "instances" or "inputs" key (exactly one: "instances" is the row format, '
            '"inputs" the columnar one)'
        )
    specs = {spec.name: spec for spec in signature.inputs}
    if has_rows:
        values = _rows_to_columns(document["instances"], specs)
        return _fitted(_request(values, specs), "row", specs)
    inputs = document["inputs"]
    if not (isinstance(inputs, dict) and set(inputs) <= set(specs) and inputs):
        inputs = {_only_input(specs): inputs}
    return _fitted(_request(inputs, specs), "columnar", specs)


def _fitted(
    request: InferRequest, format: Format, specs: Mapping[str, TensorSpec]
) -> PredictRequest:
    """Inputs one rank short of a signature whose last dims are 1 take them, every input
    alike (TensorFlow feeds ``[2.0, 3.0]`` to a ``[-1, 1]`` tensor as ``[[2.0], [3.0]]``)."""
    if len(request.inputs) == 1:  # the common request: one tensor of the signature's rank
        only = request.inputs[0]
        if len(only.shape) >= len(specs[only.name].shape):
            return PredictRequest(request, format)
    added = {_added_dims(i.shape, specs[i.name].shape) for i in request.inputs}
    if len(added) != 1 or not (count := added.pop()):
        return PredictRequest(request, format)
    inputs = tuple(
        InferInput(
            i.name, i.datatype, i.shape + (1,) * count, i.data.reshape(i.shape + (1,) * count)
        )
        for i in request.inputs
    )
    return PredictRequest(
        InferRequest(
            inputs, request.outputs, request.id, request.binary_output, request.parameters
        ),
        format,
        count,
    )


def _added_dims(got: tuple[int, ...], expected: tuple[int, ...]) -> int:
    extra = len(expected) - len(got)
    if extra <= 0 or any(d != 1 for d in expected[len(got) :]):
        return 0
    fits = all(e in (-1, g) for g, e in zip(got, expected[: len(got)], strict=True))
    return extra if fits else 0


def encode_predict(
    outputs: Mapping[str, np.ndarray[Any, Any]], format: Format, added_dims: int = 0
) -> dict[str, Any]:
    """``{"predictions": ...}`` (row) or ``{"outputs": ...}`` (columnar); outputs ending in
    ``added_dims`` 1-dims lose them (``PredictRequest.added_dims``)."""
    if added_dims:
        outputs = {name: _squeezed(array, added_dims) for name, array in outputs.items()}
    values = {name: _to_json(name, array) for name, array in outputs.items()}
    if format == "columnar":
        return {"outputs": next(iter(values.values())) if len(values) == 1 else values}
    if len(values) == 1:
        return {"predictions": next(iter(values.values()))}
    sizes = {len(v) if isinstance(v, list) else -1 for v in values.values()}
    if len(sizes) != 1 or -1 in sizes:
        raise InvalidInput(
            "the outputs do not share a batch dimension, so they cannot be answered as rows; "
            'send the columnar format ("inputs") instead'
        )
    count = sizes.pop()
    return {"predictions": [{name: v[i] for name, v in values.items()} for i in range(count)]}


def version_status(versions: Sequence[tuple[int, str, str]]) -> dict[str, Any]:
    """``GET /v1/models/{m}``: (version, lambdaserve state, reason) as TF Serving states."""
    return {
        "model_version_status": [
            {
                "version": str(version),
                "state": _TF_STATES.get(state, "END"),
                "status": {
                    "error_code": "OK" if state in ("READY", "LOADING") else "UNKNOWN",
                    "error_message": "" if state in ("READY", "LOADING") else reason,
                },
            }
            for version, state, reason in versions
        ]
    }


_TF_STATES = {"READY": "AVAILABLE", "LOADING": "LOADING", "UNLOADING": "UNLOADING"}


def metadata(
    model: str, version: int, signatures: Signature | Mapping[str, SignatureDef]
) -> dict[str, Any]:
    """``GET /v1/models/{m}[/versions/{v}]/metadata``: every signature (a lone Signature is
    ``serving_default``'s, a predict one) as a ``signature_def``, as TF Serving writes it."""
    if isinstance(signatures, Signature):
        signatures = {SIGNATURE: SignatureDef("tensorflow/serving/predict", signatures)}
    return {
        "model_spec": {"name": model, "signature_name": "", "version": str(version)},
        "metadata": {
            "signature_def": {
                "signature_def": {
                    key: {
                        "inputs": {t.name: _tensor_info(t, d) for t in d.signature.inputs},
                        "outputs": {t.name: _tensor_info(t, d) for t in d.signature.outputs},
                        "method_name": d.method,
                        "defaults": {},
                    }
                    for key, d in signatures.items()
                }
            }
        },
    }


def _squeezed(array: np.ndarray[Any, Any], count: int) -> np.ndarray[Any, Any]:
    if array.ndim > count and all(d == 1 for d in array.shape[-count:]):
        return array.reshape(array.shape[:-count])
    return array


def _tensor_info(spec: TensorSpec, definition: SignatureDef) -> dict[str, Any]:
    unknown = spec.name in definition.unknown_rank
    return {
        "dtype": _TF_DTYPES.get(spec.datatype, "DT_INVALID"),
        "tensor_shape": {
            "dim": [] if unknown else [{"size": str(d), "name": ""} for d in spec.shape],
            "unknown_rank": unknown,
        },
        "name": definition.tensor_names.get(spec.name, spec.name),
    }


def _rows_to_columns(instances: Any, specs: Mapping[str, TensorSpec]) -> dict[str, list[Any]]:
    if not isinstance(instances, list) or not instances:
        raise InvalidInput('"instances" must be a non-empty list (one element per row)')
    named = all(isinstance(row, dict) and "b64" not in row for row in instances)
    if not named:
        return {_only_input(specs): instances}
    columns: dict[str, list[Any]] = {}
    for index, row in enumerate(instances):
        unknown = set(row) - set(specs)
        if unknown:
            raise InvalidInput(
                f"instance {index} names {sorted(unknown)}; the model takes {sorted(specs)}"
            )
        if index and set(row) != set(columns):
            raise InvalidInput(
                f"instance {index} has inputs {sorted(row)}, instance 0 has {sorted(columns)}: "
                "every instance names the same inputs"
            )
        for name, value in row.items():
            columns.setdefault(name, []).append(value)
    return columns


def _only_input(specs: Mapping[str, TensorSpec]) -> str:
    if len(specs) != 1:
        raise InvalidInput(
            f"the model takes {len(specs)} inputs {sorted(specs)}: name them "
            '(row format: [{"name": value, ...}]; columnar: {"inputs": {"name": value}})'
        )
    return next(iter(specs))


def _request(values: Mapping[str, Any], specs: Mapping[str, TensorSpec]) -> InferRequest:
    inputs = []
    for name, value in values.items():
        spec = specs.get(name)
        if spec is None:
            raise InvalidInput(f"unknown input {name!r}; the model takes {sorted(specs)}")
        array = _array(name, spec.datatype, value)
        inputs.append(InferInput(name, spec.datatype, tuple(array.shape), array))
    return InferRequest(tuple(inputs))


def _array(name: str, datatype: str, value: Any) -> np.ndarray[Any, Any]:
    if datatype == "BYTES":
        return np.array(_strings(value), dtype=object)
    return array_from_json(name, datatype, value)


def _strings(value: Any) -> Any:
    if isinstance(value, list):
        return [_strings(v) for v in value]
    if isinstance(value, dict) and set(value) == {"b64"} and isinstance(value["b64"], str):
        try:
            return base64.b64decode(value["b64"], validate=True)
        except binascii.Error:
            raise InvalidInput(f"not base64: {value['b64'][:40]!r}") from None
    if isinstance(value, str):
        return value.encode()
    raise InvalidInput(f'a string tensor takes strings or {{"b64": ...}}, got {value!r}')


def _to_json(name: str, array: np.ndarray[Any, Any]) -> Any:
    if array.dtype.kind not in ("O", "S", "U"):
        return array.tolist()
    as_b64 = name.endswith("_bytes")
    flat = [_string_json(v, as_b64) for v in array.reshape(-1)]
    return np.array(flat, dtype=object).reshape(array.shape).tolist()


def _string_json(value: Any, as_b64: bool) -> Any:
    raw = value if isinstance(value, bytes) else str(value).encode()
    if as_b64:
        return {"b64": base64.b64encode(raw).decode()}
    try:
        return raw.decode()
    except UnicodeDecodeError:
        return {"b64": base64.b64encode(raw).decode()}
