"""TorchServe-style ``/predictions``: a nested list, or ``{"input_name": nested list}``."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import orjson

from lambdaserve.errors import InvalidInput
from lambdaserve.protocol.v2 import InferInput, InferRequest
from lambdaserve.tensors import encoding
from lambdaserve.tensors.signature import TensorSpec


@dataclass(frozen=True)
class Prediction:
    """The request, and whether a batch dimension was added for a single instance."""

    request: InferRequest
    single_instance: bool


def parse_prediction(body: bytes, inputs: Sequence[TensorSpec]) -> Prediction:
    """Map a TorchServe-style body onto the model's inputs."""
    try:
        body.decode("utf-8")
    except UnicodeDecodeError:
        raise InvalidInput(
            _takes(inputs, f"the body is binary ({len(body)} bytes), not JSON")
        ) from None
    try:
        document = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise InvalidInput(_takes(inputs, f"the request is not valid JSON: {exc}")) from None
    if isinstance(document, dict):
        named = document
    elif len(inputs) == 1:
        named = {inputs[0].name: document}
    else:
        raise InvalidInput(
            f"this model has {len(inputs)} inputs; send an object keyed by "
            f"{[spec.name for spec in inputs]}"
        )
    by_name = {spec.name: spec for spec in inputs}
    parsed, added = [], []
    for name, value in named.items():
        spec = by_name.get(name)
        if spec is None:
            raise InvalidInput(f"unknown input {name!r}; the model takes {sorted(by_name)}")
        tensor, batched = _tensor(spec, value)
        parsed.append(tensor)
        added.append(batched)
    return Prediction(InferRequest(inputs=tuple(parsed)), bool(added) and all(added))


def _takes(inputs: Sequence[TensorSpec], problem: str) -> str:
    """``problem``, then what this tensor model takes, so the sender knows what to send."""
    wanted = ", ".join(f"{s.name} ({s.datatype} {list(s.shape)})" for s in inputs)
    example = "a JSON nested list" if len(inputs) == 1 else "a JSON object keyed by input name"
    return (
        f"{problem}; this model takes tensors: {wanted}, as {example}. Images and raw bytes "
        "go to models with a handler (a .mar or handler.py) or a BYTES input"
    )


def encode_prediction(
    outputs: Mapping[str, np.ndarray[Any, Any]], single_instance: bool = False
) -> bytes:
    """One output: its nested list. Several: a dict of nested lists.

    A single instance sent to a batched model gets its answer without the batch dim.
    """
    values = {
        name: _nested(array[0] if single_instance and array.ndim and len(array) == 1 else array)
        for name, array in outputs.items()
    }
    if len(values) == 1:
        return orjson.dumps(next(iter(values.values())))
    return orjson.dumps(values)


def _tensor(spec: TensorSpec, value: Any) -> tuple[InferInput, bool]:
    dtype = encoding.numpy_dtype(spec.datatype)
    try:
        if spec.datatype == "BYTES":
            array = np.array(value, dtype=object)
        else:
            array = np.asarray(value, dtype=dtype)
    except (ValueError, TypeError) as exc:
        raise InvalidInput(
            f"input {spec.name!r}: not a nested list of {spec.datatype}: {exc}"
        ) from None
    added = len(spec.shape) == array.ndim + 1 and spec.shape[0] == -1
    if added:
        array = array[np.newaxis, ...]  # one instance of a batched model
    return InferInput(spec.name, spec.datatype, tuple(array.shape), array), added


def _nested(array: np.ndarray[Any, Any]) -> Any:
    if array.dtype.kind in ("O", "S", "U"):
        return np.array(encoding.to_json(array), dtype=object).reshape(array.shape).tolist()
    return array.tolist()
