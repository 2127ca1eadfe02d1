"""Batch assembly and splitting (pure), shared by the SQS batcher and the in-process one.

Requests join one batch only when they can be concatenated along the batch dimension:
the same input names, datatypes and inner shapes, and the same requested outputs.
Requests of other shapes form separate batches, but for the inputs a config lets batch
ragged (``allow_ragged_batch``). A batch never exceeds ``max_batch_size`` (the sum
of the members' batch dimensions) and, like Triton's dynamic batcher, prefers the largest
``preferred_batch_size`` that the waiting rows can fill.
"""

from __future__ import annotations

from collections.abc import Collection, Hashable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from lambdaserve.errors import InferenceError, LambdaServeError
from lambdaserve.protocol.v2 import InferInput, InferRequest

Arrays = dict[str, np.ndarray[Any, Any]]


@dataclass(frozen=True)
class BatchResult:
    """Outputs or the error of one batch item (never both)."""

    outputs: dict[str, np.ndarray[Any, Any]] | None = None
    version: int | None = None
    error: LambdaServeError | None = None
    # the version that answered, as the server resolved it (serving's ServedVersion): what
    # the door asks of it afterwards (its capture setting) needs no second lookup
    served: Any = None


@dataclass(frozen=True)
class Batch:
    """Members (indexes into the assembled sequence) and their batch sizes, in order."""

    members: tuple[int, ...]
    sizes: tuple[int, ...]

    @property
    def size(self) -> int:
        return sum(self.sizes)


def batch_dim(request: InferRequest) -> int | None:
    """The common first dimension of every input, or None when there is none."""
    firsts = {tensor.data.shape[0] if tensor.data.ndim else None for tensor in request.inputs}
    if len(firsts) != 1:
        return None
    first = firsts.pop()
    return first if first else None


def compatibility_key(request: InferRequest, ragged: Collection[str] = ()) -> Hashable:
    """Requests with equal keys can be concatenated (a ``ragged`` input whatever its shape:
    Triton's allow_ragged_batch, joined in one dimension by ``batching.ragged``)."""
    inputs = tuple(
        sorted(
            (t.name, t.datatype, None if t.name in ragged else t.data.shape[1:])
            for t in request.inputs
        )
    )
    outputs = tuple(o.name for o in request.outputs)
    return inputs, outputs


def assemble(
    requests: Sequence[InferRequest],
    max_batch_size: int,
    preferred_sizes: Sequence[int] = (),
    ragged: Collection[str] = (),
) -> list[Batch]:
    """Partition ``requests`` into batches; every request lands in exactly one."""
    batches: list[Batch] = []
    groups: dict[Hashable, list[tuple[int, int]]] = {}
    for index, request in enumerate(requests):
        size = batch_dim(request)
        if max_batch_size <= 0 or size is None or size >= max_batch_size:
            batches.append(Batch((index,), (size or 1,)))
            continue
        groups.setdefault(compatibility_key(request, ragged), []).append((index, size))
    preferred = sorted({p for p in preferred_sizes if 0 < p <= max_batch_size}, reverse=True)
    for members in groups.values():
        batches.extend(_fill(members, max_batch_size, preferred))
    batches.sort(key=lambda b: b.members[0])
    return batches


def _fill(members: list[tuple[int, int]], max_batch_size: int, preferred: list[int]) -> list[Batch]:
    batches = []
    remaining = list(members)
    while remaining:
        available = sum(size for _, size in remaining)
        target = next((p for p in preferred if p <= available), min(available, max_batch_size))
        taken: list[tuple[int, int]] = []
        total = 0
        for index, size in remaining:
            if total + size > target:
                continue  # a smaller request further on may still fit
            taken.append((index, size))
            total += size
            if total == target:
                break
        if not taken:  # nothing fits the preferred target: take what the max allows
            taken = [remaining[0]]
        chosen = {index for index, _ in taken}
        remaining = [m for m in remaining if m[0] not in chosen]
        batches.append(Batch(tuple(i for i, _ in taken), tuple(s for _, s in taken)))
    return batches


def concatenate(requests: Sequence[InferRequest]) -> InferRequest:
    """One request whose inputs are the members' inputs stacked along the batch dimension."""
    if len(requests) == 1:
        return requests[0]
    first = requests[0]
    inputs = []
    for tensor in first.inputs:
        parts = [_input(r, tensor.name).data for r in requests]
        data = np.concatenate(parts, axis=0)
        inputs.append(InferInput(tensor.name, tensor.datatype, data.shape, data))
    return InferRequest(inputs=tuple(inputs), outputs=first.outputs)


def split(outputs: Arrays, sizes: Sequence[int]) -> list[Arrays]:
    """Cut each output along the batch dimension back into per-request outputs."""
    total = sum(sizes)
    for name, array in outputs.items():
        if array.ndim == 0 or array.shape[0] != total:
            raise InferenceError(
                f"output {name!r} has shape {list(array.shape)}; a batch of {total} rows needs "
                "the batch dimension first"
            )
    offsets = np.cumsum(sizes)[:-1]
    pieces = {name: np.split(array, offsets) for name, array in outputs.items()}
    results = [{name: parts[i] for name, parts in pieces.items()} for i in range(len(sizes))]
    check_invariant(len(sizes), results)
    return results


def check_invariant(expected: int, results: Sequence[object]) -> None:
    """N requests in, N results out; anything else is a bug, never a silent loss."""
    if len(results) != expected:
        raise AssertionError(f"batch returned {len(results)} results for {expected} requests")


def _input(request: InferRequest, name: str) -> InferInput:
    for tensor in request.inputs:
        if tensor.name == name:
            return tensor
    raise InferenceError(f"input {name!r} is missing from a batch member")
