"""Ragged batches (pure), as Triton's backends form them: the members' ragged inputs joined
into one 1-D tensor, their other inputs stacked along the batch dimension, the batch inputs
computed from the members' shapes (core's BackendInputCollector: BatchInputShape and
ProcessBatchInput), and the batch outputs scattered back by each member's input shape."""

from __future__ import annotations

from collections.abc import Sequence
from math import prod
from typing import Any

import numpy as np

from lambdaserve.config.ragged_batching import BatchInput, RaggedBatching
from lambdaserve.errors import InferenceError

Arrays = dict[str, np.ndarray[Any, Any]]
_NUMPY = {"FP32": np.float32, "INT32": np.int32}


def model_inputs(spec: RaggedBatching, members: Sequence[Arrays]) -> Arrays:
    """One execution's inputs from ``members`` (each a request's bound inputs)."""
    merged: Arrays = {}
    for name in members[0]:
        parts = [member[name] for member in members]
        if name in spec.ragged:
            merged[name] = np.concatenate([part.reshape(-1) for part in parts])
        else:
            merged[name] = np.concatenate(parts, axis=0) if len(parts) > 1 else parts[0]
    for batch_input in spec.inputs:
        merged[batch_input.target] = batch_input_tensor(
            batch_input, [member[batch_input.source].shape for member in members]
        )
    return merged


def batch_input_tensor(batch_input: BatchInput, shapes: Sequence[tuple[int, ...]]) -> Any:
    """The tensor of ``batch_input`` for members whose source inputs have ``shapes``."""
    dtype = _NUMPY[batch_input.datatype]
    counts = [prod(shape) for shape in shapes]
    kind = batch_input.kind
    if kind == "BATCH_ELEMENT_COUNT":
        return np.array(counts, dtype)
    if kind == "BATCH_ACCUMULATED_ELEMENT_COUNT":
        return np.cumsum(counts).astype(dtype)
    if kind == "BATCH_ACCUMULATED_ELEMENT_COUNT_WITH_ZERO":
        return np.concatenate([[0], np.cumsum(counts)]).astype(dtype)
    if kind == "BATCH_MAX_ELEMENT_COUNT_AS_SHAPE":
        return np.zeros(max(counts), dtype)  # its shape is what it says, as in Triton
    # BATCH_ITEM_SHAPE: each batch item's shape less the batch dimension, one row per item;
    # _FLATTEN: the same values in one dimension
    rows = [shape[1:] for shape in shapes for _ in range(shape[0] if shape else 1)]
    widths = {len(row) for row in rows}
    if len(widths) > 1:
        raise InferenceError(
            f"batch_input {batch_input.target!r}: the batch's {batch_input.source!r} tensors "
            "differ in rank; BATCH_ITEM_SHAPE needs one rank"
        )
    items = np.array(rows, dtype).reshape(len(rows), widths.pop() if widths else 0)
    return items.reshape(-1) if kind == "BATCH_ITEM_SHAPE_FLATTEN" else items


def member_outputs(
    spec: RaggedBatching, outputs: Arrays, members: Sequence[Arrays], sizes: Sequence[int]
) -> list[Arrays]:
    """Each member's outputs: a batch output scattered by its source input's shape in that
    member (BATCH_SCATTER_WITH_INPUT_SHAPE), every other output cut along the batch
    dimension by the members' ``sizes``."""
    scattered = {o.target: o.source for o in spec.outputs}
    results: list[Arrays] = [{} for _ in members]
    for name, array in outputs.items():
        source = scattered.get(name)
        if source is None:
            for result, part in zip(results, _split(name, array, sizes), strict=True):
                result[name] = part
            continue
        flat = array.reshape(-1)
        shapes = [member[source].shape for member in members]
        if flat.size != sum(prod(shape) for shape in shapes):
            raise InferenceError(
                f"batch_output {name!r} has {flat.size} elements; scattered with the shape "
                f"of {source!r} it needs {sum(prod(shape) for shape in shapes)}"
            )
        offset = 0
        for result, shape in zip(results, shapes, strict=True):
            result[name] = flat[offset : offset + prod(shape)].reshape(shape)
            offset += prod(shape)
    return results


def _split(name: str, array: Any, sizes: Sequence[int]) -> list[Any]:
    if len(sizes) == 1:
        return [array]
    total = sum(sizes)
    if array.ndim == 0 or array.shape[0] != total:
        raise InferenceError(
            f"output {name!r} has shape {list(array.shape)}; a batch of {total} rows needs "
            "the batch dimension first"
        )
    return list(np.split(array, np.cumsum(sizes)[:-1]))
