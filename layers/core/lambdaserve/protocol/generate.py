"""Triton's generate extension (``POST .../generate`` and ``.../generate_stream``): a flat
JSON object whose keys are the model's inputs (``{"text_input": "...", "max_tokens": 8}``)
and ``parameters``; each answer a flat object of the outputs, one element as a scalar.
Used by LLM-style clients and by decoupled models streaming their responses."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from lambdaserve.errors import InvalidInput
from lambdaserve.protocol.v2 import InferInput, InferRequest
from lambdaserve.tensors.encoding import numpy_dtype
from lambdaserve.tensors.signature import Signature


def parse_generate(document: Any, signature: Signature) -> InferRequest:
    if not isinstance(document, dict):
        raise InvalidInput('the body must be a JSON object: {"<input name>": value, ...}')
    parameters = document.get("parameters") or {}
    if not isinstance(parameters, dict):
        raise InvalidInput('"parameters" must be an object')
    specs = {spec.name: spec for spec in signature.inputs}
    unknown = sorted(k for k in document if k not in specs and k not in ("id", "parameters"))
    if unknown:
        raise InvalidInput(f"{unknown[0]!r} is not an input; the model takes {sorted(specs)}")
    missing = sorted(set(specs) - set(document))
    if missing:
        raise InvalidInput(f"missing input {missing[0]!r}; the model takes {sorted(specs)}")
    inputs = []
    for name, spec in specs.items():
        array = _array(document[name], spec.datatype, name)
        # a value fills the input's dims; the leading (batch or dynamic) dims are 1
        while array.ndim < len(spec.shape):
            array = array[np.newaxis]
        inputs.append(InferInput(name, spec.datatype, tuple(array.shape), array))
    request_id = document.get("id")
    return InferRequest(
        inputs=tuple(inputs),
        id=str(request_id) if request_id is not None else None,
        parameters=parameters,
    )


def encode_generate(
    model: str, version: int, outputs: Mapping[str, np.ndarray[Any, Any]]
) -> dict[str, Any]:
    answer: dict[str, Any] = {"model_name": model, "model_version": str(version)}
    for name, array in outputs.items():
        values = [_plain(v) for v in np.asarray(array).reshape(-1)]
        answer[name] = values[0] if len(values) == 1 else values
    return answer


def _array(value: Any, datatype: str, name: str) -> np.ndarray[Any, Any]:
    if datatype == "BYTES":
        items = value if isinstance(value, list) else [value]
        return np.array(
            [v.encode() if isinstance(v, str) else str(v).encode() for v in items], dtype=object
        )
    try:
        return np.asarray(value, dtype=numpy_dtype(datatype))
    except (TypeError, ValueError) as exc:
        raise InvalidInput(f"input {name!r} ({datatype}) cannot hold {value!r}: {exc}") from None


def _plain(value: Any) -> Any:
    if isinstance(value, bytes):
        return value.decode(errors="replace")
    return value.item() if isinstance(value, np.generic) else value
