"""Triton's raw binary request: ``Inference-Header-Content-Length: 0`` and a body that is
nothing but the one input's tensor data, its datatype and shape taken from the model."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from lambdaserve import tensors
from lambdaserve.errors import InvalidInput
from lambdaserve.modelconfig import TensorSpec
from lambdaserve.protocol.v2 import InferInput, InferRequest

Array = np.ndarray[Any, Any]


def parse_raw_binary(body: bytes, inputs: tuple[TensorSpec, ...]) -> InferRequest:
    """The request a raw body stands for; every output answers in binary, as Triton does."""
    if len(inputs) != 1:
        raise InvalidInput(
            f"a raw binary request (Inference-Header-Content-Length: 0) needs a model with "
            f"one input; this one has {[spec.name for spec in inputs]}: send a JSON header"
        )
    spec = inputs[0]
    if spec.datatype == "BYTES":
        data = np.array([bytes(body)], dtype=object)
        shape = _shape(spec, 1)
        return _request(spec, shape, data.reshape(shape))
    dtype = tensors.numpy_dtype(spec.datatype)
    if len(body) % dtype.itemsize:
        raise InvalidInput(
            f"the raw body has {len(body)} bytes, not a whole number of {spec.datatype} "
            f"elements ({dtype.itemsize} bytes each) for input {spec.name!r}"
        )
    count = len(body) // dtype.itemsize
    shape = _shape(spec, count)
    return _request(spec, shape, np.frombuffer(body, dtype=dtype).reshape(shape))


def _shape(spec: TensorSpec, count: int) -> tuple[int, ...]:
    known = math.prod(d for d in spec.shape if d != -1)
    dynamic = [i for i, d in enumerate(spec.shape) if d == -1]
    if len(dynamic) > 1 or known == 0 or count % known:
        raise InvalidInput(
            f"input {spec.name!r} has shape {list(spec.shape)}: {count} raw elements do not "
            "fit it; send a JSON header naming the shape"
        )
    shape = list(spec.shape)
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
