"""Matching a request's tensors to a model's signature."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from lambdaserve.errors import InvalidInput
from lambdaserve.protocol.v2 import InferRequest
from lambdaserve.tensors.encoding import shape_fits
from lambdaserve.tensors.signature import Signature


def bind_inputs(request: InferRequest, signature: Signature) -> dict[str, np.ndarray[Any, Any]]:
    """Match request tensors to the signature; errors name the tensor, expected and got."""
    provided = {tensor.name: tensor for tensor in request.inputs}
    if len(provided) != len(request.inputs):
        raise InvalidInput("an input name appears more than once")
    expected = {spec.name: spec for spec in signature.inputs}
    for name in provided:
        if name not in expected:
            raise InvalidInput(f"unknown input {name!r}; the model takes {sorted(expected)}")
    bound = {}
    for spec in signature.inputs:
        tensor = provided.get(spec.name)
        if tensor is None and spec.optional:
            continue  # Triton's input.optional: the model gets no tensor, as its backends do
        if tensor is None:
            raise InvalidInput(f"missing input {spec.name!r} ({spec.datatype} {list(spec.shape)})")
        if tensor.datatype != spec.datatype:
            raise InvalidInput(
                f"input {spec.name!r}: expected datatype {spec.datatype}, got {tensor.datatype}"
            )
        if not signature.runtime_checks_shapes and not shape_fits(tensor.shape, spec.shape):
            raise InvalidInput(
                f"input {spec.name!r}: expected shape {list(spec.shape)}, got {list(tensor.shape)}"
            )
        bound[spec.name] = tensor.data
    return bound


def check_batch_size(
    inputs: Mapping[str, np.ndarray[Any, Any]], model: str, max_batch_size: int
) -> None:
    """Triton's limit on one request: its batch dimension at most the config's
    ``max_batch_size`` (0: the model does not batch, and the dims are the whole shape)."""
    first = next(iter(inputs.values()), None)
    if max_batch_size <= 0 or first is None or not first.ndim:
        return
    rows = int(first.shape[0])
    if rows > max_batch_size:
        raise InvalidInput(
            f"inference request batch-size must be <= {max_batch_size} for '{model}': this "
            f"request has {rows} rows; send at most {max_batch_size} per request, or raise "
            "max_batch_size in the model's config"
        )


def select_outputs(request: InferRequest, signature: Signature) -> list[str]:
    names = [spec.name for spec in signature.outputs]
    if not request.outputs:
        return names
    for output in request.outputs:
        if output.name not in names:
            raise InvalidInput(f"unknown output {output.name!r}; the model has {names}")
    return [output.name for output in request.outputs]
