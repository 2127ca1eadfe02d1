"""Triton's ragged batching as a config declares it: inputs with ``allow_ragged_batch`` (batched
without a shape check, given to the model as one 1-D tensor), the ``batch_input`` tensors the
server makes once a batch is formed, and the ``batch_output`` scattered back by an input's
shape (docs/user_guide/ragged_batching.md, model_config.proto). Read from Triton's own
message; this refuses what Triton refuses at load (a batch input or output naming no input,
a kind it does not know, a data type other than FP32 or INT32)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from lambdaserve.config.triton_proto import pb
from lambdaserve.errors import InvalidInput
from lambdaserve.tensors.signature import Signature, TensorSpec

BATCH_INPUT_KINDS = (
    "BATCH_ELEMENT_COUNT",
    "BATCH_ACCUMULATED_ELEMENT_COUNT",
    "BATCH_ACCUMULATED_ELEMENT_COUNT_WITH_ZERO",
    "BATCH_MAX_ELEMENT_COUNT_AS_SHAPE",
    "BATCH_ITEM_SHAPE",
    "BATCH_ITEM_SHAPE_FLATTEN",
)
BATCH_OUTPUT_KINDS = ("BATCH_SCATTER_WITH_INPUT_SHAPE",)
_DATATYPES = {"TYPE_FP32": "FP32", "TYPE_INT32": "INT32"}  # what Triton's backends fill


@dataclass(frozen=True)
class BatchInput:
    """A tensor the server gives the model, made from the formed batch: ``kind`` of
    ``source`` (one of the model's inputs), named ``target``, of ``datatype``."""

    kind: str
    target: str
    datatype: str
    source: str


@dataclass(frozen=True)
class BatchOutput:
    """An output the model gives for the whole batch, cut back per request as ``kind`` says
    (BATCH_SCATTER_WITH_INPUT_SHAPE: each request's part has the shape of its ``source``)."""

    kind: str
    target: str
    source: str


@dataclass(frozen=True)
class RaggedBatching:
    ragged: tuple[str, ...] = ()
    inputs: tuple[BatchInput, ...] = ()
    outputs: tuple[BatchOutput, ...] = ()

    def to_document(self) -> dict[str, Any]:
        doc: dict[str, Any] = {}
        if self.inputs:
            doc["batch_input"] = [
                {
                    "kind": i.kind,
                    "target_name": [i.target],
                    "data_type": f"TYPE_{i.datatype}",
                    "source_input": [i.source],
                }
                for i in self.inputs
            ]
        if self.outputs:
            doc["batch_output"] = [
                {"kind": o.kind, "target_name": [o.target], "source_input": [o.source]}
                for o in self.outputs
            ]
        return doc


def ragged_batching_of(message: Any) -> RaggedBatching | None:
    """The config's ragged inputs, batch inputs and batch outputs; None when it has none."""
    ragged = tuple(t.name for t in message.input if t.allow_ragged_batch)
    names = {t.name for t in message.input}
    inputs = tuple(_batch_input(b, names) for b in message.batch_input)
    outputs = tuple(_batch_output(b, names) for b in message.batch_output)
    if not (ragged or inputs or outputs):
        return None
    if message.max_batch_size <= 0:
        raise InvalidInput(
            "allow_ragged_batch, batch_input and batch_output need batching: set max_batch_size"
        )
    return RaggedBatching(ragged, inputs, outputs)


def _batch_input(entry: Any, inputs: set[str]) -> BatchInput:
    kind = pb.BatchInput.Kind.Name(entry.kind)
    datatype = pb.DataType.Name(entry.data_type)
    if len(entry.target_name) != 1 or len(entry.source_input) != 1:
        raise InvalidInput(f"batch_input {kind} needs exactly one target_name and one source_input")
    target, source = entry.target_name[0], entry.source_input[0]
    if source not in inputs:
        raise InvalidInput(
            f"batch_input {target!r}: source_input {source!r} is not one of the config's "
            f"inputs {sorted(inputs)}"
        )
    if target in inputs:
        raise InvalidInput(
            f"batch_input {target!r} is also a declared input: the server makes it, a "
            "request does not send it; leave it out of input"
        )
    if datatype not in _DATATYPES:
        raise InvalidInput(
            f"batch_input {target!r}: data_type {datatype} is not one Triton fills; use "
            "TYPE_FP32 or TYPE_INT32"
        )
    return BatchInput(kind, target, _DATATYPES[datatype], source)


def _batch_output(entry: Any, inputs: set[str]) -> BatchOutput:
    kind = pb.BatchOutput.Kind.Name(entry.kind)
    if len(entry.source_input) != 1 or not entry.target_name:
        raise InvalidInput(f"batch_output {kind} needs a target_name and one source_input")
    source = entry.source_input[0]
    if source not in inputs:
        raise InvalidInput(
            f"batch_output {list(entry.target_name)}: source_input {source!r} is not one of "
            f"the config's inputs {sorted(inputs)}"
        )
    if len(entry.target_name) != 1:
        raise InvalidInput("batch_output: give each target_name its own batch_output entry")
    return BatchOutput(kind, entry.target_name[0], source)


def client_view(
    signature: Signature, ragged: RaggedBatching | None, batched: Mapping[str, TensorSpec]
) -> Signature:
    """What a request sends to a model of ``signature`` (the model's own): a ragged input with
    the config's batched shape (the model takes it 1-D), and no batch input (the server makes
    them). ``batched``: the config's inputs by name."""
    if ragged is None:
        return signature
    made = {b.target for b in ragged.inputs}
    inputs = tuple(
        replace(spec, shape=batched[spec.name].shape)
        if spec.name in ragged.ragged and spec.name in batched
        else spec
        for spec in signature.inputs
        if spec.name not in made
    )
    return replace(signature, inputs=inputs)
