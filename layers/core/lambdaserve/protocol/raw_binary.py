"""Triton's raw binary request: ``Inference-Header-Content-Length: 0`` and a body that is
nothing but the one input's tensor data, its datatype and shape taken from the model."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from lambdaserve.errors import InvalidInput
from lambdaserve.protocol.v2 import InferInput, InferRequest
from lambdaserve.tensors import encoding
from lambdaserve.tensors.signature import TensorSpec

Array = np.ndarray[Any, Any]


def parse_raw_binary(
    body: bytes, inputs: tuple[TensorSpec, ...], model: str = "", batched: bool = False
) -> InferRequest:
    """The request a raw body stands for; every output answers in binary, as Triton does.

    ``batched`` (the config's ``max_batch_size > 0``): the body is one row, batch size 1, as
    Triton reads it; otherwise the one dynamic dimension of the model's shape is deduced.
    The errors carry Triton's own sentences, so clients that match on them keep working."""
    if len(inputs) != 1:
        raise InvalidInput(
            f"Raw request must only have 1 input (found 1) to be deduced but got "
            f"{len(inputs)} inputs in '{model}' model configuration "
            f"({[spec.name for spec in inputs]}): a raw binary request "
            "(Inference-Header-Content-Length: 0) needs a model with one input; send a JSON header"
        )
    spec = inputs[0]
    dims = spec.shape[1:] if batched and spec.shape else spec.shape
    if spec.datatype == "BYTES":  # one element: Triton's rule for a batching model
        if batched and any(d != 1 for d in dims):
            raise InvalidInput(
                f"For BYTE datatype raw input '{spec.name}', the model must have input shape "
                f"[1] (it has {list(dims)}): send a JSON header naming the shape"
            )
        shape = (1, *dims) if batched else _shape(spec, spec.shape, 1)
        data = np.array([bytes(body)], dtype=object)
        return _request(spec, shape, data.reshape(shape))
    dtype = encoding.numpy_dtype(spec.datatype)
    if len(body) % dtype.itemsize:
        raise InvalidInput(
            f"the raw body has {len(body)} bytes, not a whole number of {spec.datatype} "
            f"elements ({dtype.itemsize} bytes each) for input {spec.name!r}"
        )
    count = len(body) // dtype.itemsize
    shape = (1, *_shape(spec, dims, count)) if batched else _shape(spec, dims, count)
    return _request(spec, shape, np.frombuffer(body, dtype=dtype).reshape(shape))


def _shape(spec: TensorSpec, dims: tuple[int, ...], count: int) -> tuple[int, ...]:
    known = math.prod(d for d in dims if d != -1)
    dynamic = [i for i, d in enumerate(dims) if d == -1]
    if len(dynamic) > 1:
        raise InvalidInput(
            f"The shape of the raw input '{spec.name}' can not be deduced because there are "
            f"more than one variable-sized dimension (shape {list(spec.shape)}): send a JSON "
            "header naming the shape"
        )
    if known == 0 or count % known:
        raise InvalidInput(
            f"input {spec.name!r} has shape {list(spec.shape)}: {count} raw elements do not "
            "fit it; send a JSON header naming the shape"
        )
    shape = list(dims)
    if dynamic:
        shape[dynamic[0]] = count // known
    elif count != known:
        raise InvalidInput(
            f"input {spec.name!r} takes {known} elements of {spec.datatype}; the raw body has "
            f"{count}"
        )
    return tuple(shape)


def _request(spec: TensorSpec, shape: tuple[int, ...], data: Array) -> InferRequest:
    tensor = InferInput(spec.name, spec.datatype, shape, data)
    return InferRequest(inputs=(tensor,), binary_output=True)
