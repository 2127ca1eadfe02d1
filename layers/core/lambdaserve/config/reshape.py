"""Triton's ``reshape``: clients see a tensor's config ``dims``, the model its ``reshape``.

``input { name: "x" dims: [16] reshape { shape: [1, 16] } }`` takes ``[batch, 16]`` from
clients and hands the model ``[batch, 1, 16]``; an output's reshape works the other way
round. The signature recorded at publish holds the clients' shapes, so requests are checked
against what clients send; the loaded model is wrapped to reshape on the way in and out.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal

from lambdaserve.errors import InvalidInput
from lambdaserve.tensors.encoding import element_count
from lambdaserve.tensors.signature import Signature

Role = Literal["input", "output"]


@dataclass(frozen=True)
class Reshape:
    """One tensor's two shapes, each with the batch dimension (-1) when the model batches."""

    role: Role
    name: str
    client_shape: tuple[int, ...]
    model_shape: tuple[int, ...]


def reshapes_of(message: Any, batched: bool) -> tuple[Reshape, ...]:
    """The reshapes a Triton ``ModelConfig`` message declares (an empty shape is a scalar)."""
    found = []
    roles: tuple[tuple[Role, Any], ...] = (("input", message.input), ("output", message.output))
    for role, tensors in roles:
        for tensor in tensors:
            if not tensor.HasField("reshape"):
                continue
            dims = tuple(int(d) for d in tensor.dims)
            shape = tuple(int(d) for d in tensor.reshape.shape)
            if any(d < -1 or d == 0 for d in shape):
                raise InvalidInput(
                    f"{role} {tensor.name!r}: reshape dims are positive or -1, got {list(shape)}"
                )
            held, declared = element_count(shape), element_count(dims)
            if -1 not in dims and -1 not in shape and declared != held:
                raise InvalidInput(
                    f"{role} {tensor.name!r}: reshape {list(shape)} has {held} elements "
                    f"but dims {list(dims)} have {declared}; both must hold the same elements"
                )
            batch = (-1,) if batched else ()
            found.append(Reshape(role, tensor.name, (*batch, *dims), (*batch, *shape)))
    return tuple(found)


def model_side(reshapes: Sequence[Reshape], role: str, name: str) -> tuple[int, ...] | None:
    """The shape the model itself has for a reshaped tensor, None when not reshaped."""
    return next((r.model_shape for r in reshapes if r.role == role and r.name == name), None)


def client_signature(signature: Signature, reshapes: Sequence[Reshape]) -> Signature:
    """The model's signature as clients see it: reshaped tensors carry their config dims."""
    if not reshapes:
        return signature
    client = {(r.role, r.name): r.client_shape for r in reshapes}
    return Signature(
        inputs=tuple(
            replace(t, shape=client.get(("input", t.name), t.shape)) for t in signature.inputs
        ),
        outputs=tuple(
            replace(t, shape=client.get(("output", t.name), t.shape)) for t in signature.outputs
        ),
    )
