"""A step's request as the model sees it: the client's tensors plus the control inputs
(START, END, READY, CORRID) and the implicit state, as Triton's sequence batcher fills them."""

from __future__ import annotations

import base64
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from lambdaserve.config.sequence_batching import ImplicitState, SequenceBatching, SequenceControl
from lambdaserve.errors import InvalidInput
from lambdaserve.protocol.v2 import InferInput, InferRequest, RequestedOutput
from lambdaserve.runtimes.sequence_requests import SEQUENCE_END, SEQUENCE_START
from lambdaserve.tensors.encoding import numpy_dtype
from lambdaserve.tensors.signature import Signature, TensorSpec

_UINT64 = 1 << 64


@dataclass(frozen=True)
class SequenceFlags:
    """Triton's sequence parameters of one request."""

    sequence_id: int | str
    start: bool
    end: bool


def flags_of(model: str, parameters: Mapping[str, Any]) -> SequenceFlags:
    """``sequence_id`` (uint64 or string; 0 and "" are no sequence), ``sequence_start`` and
    ``sequence_end``, as KServe v2's parameters carry them over HTTP and gRPC."""
    raw = parameters.get("sequence_id", 0)
    if isinstance(raw, bool) or not isinstance(raw, int | str) or raw in (0, ""):
        raise InvalidInput(
            f"inference request to model '{model}' must specify a non-zero or non-empty "
            "correlation ID"
        )
    # a uint64 above 2**63 arrives in gRPC's int64_param as a negative number
    sequence_id: int | str = raw % _UINT64 if isinstance(raw, int) else raw
    return SequenceFlags(
        sequence_id,
        _flag(parameters, "sequence_start"),
        _flag(parameters, "sequence_end"),
    )


def request_flags(model: str, parameters: Mapping[str, Any]) -> tuple[int | str, int]:
    """A step's correlation id and Triton's request flags, as model code reads them."""
    flags = flags_of(model, parameters)
    bits = (SEQUENCE_START if flags.start else 0) | (SEQUENCE_END if flags.end else 0)
    return flags.sequence_id, bits


def _flag(parameters: Mapping[str, Any], name: str) -> bool:
    value = parameters.get(name, False)
    if not isinstance(value, bool):
        raise InvalidInput(f"parameter '{name}' must be a boolean, got {value!r}")
    return value


def initial_states(
    batching: SequenceBatching, batched: bool, files: Mapping[str, str] | None = None
) -> dict[str, np.ndarray[Any, Any]]:
    """Each state's value at START: its data file's (``files``: base64 by state input, read
    at publish), else zeros of its dims (Triton's zero_data)."""
    files = files or {}
    return {s.input_name: _initial(s, batched, files.get(s.input_name)) for s in batching.states}


def _initial(state: ImplicitState, batched: bool, data: str | None) -> np.ndarray[Any, Any]:
    shape = ((1,) if batched else ()) + state.dims
    if state.datatype == "BYTES":
        return np.full(shape, b"", dtype=object)
    dtype = numpy_dtype(state.datatype)
    if data is None:
        return np.zeros(shape, dtype=dtype)
    return np.frombuffer(base64.b64decode(data), dtype=dtype).reshape(shape).copy()


def warmup_inputs(
    batching: SequenceBatching, batched: bool, files: Mapping[str, str] | None = None
) -> dict[str, np.ndarray[Any, Any]]:
    """The control and state inputs of a one-step sequence (START and END, id 1): what a
    zero warm-up sends in their place, so the model warms on inputs it could be sent."""
    flags = SequenceFlags(1, start=True, end=True)
    inputs = {c.tensor: _control(c, flags, batched).data for c in batching.controls}
    return inputs | initial_states(batching, batched, files)


def with_sequence_tensors(
    signature: Signature, batching: SequenceBatching, batched: bool
) -> Signature:
    """``signature`` with the control and state tensors it lacks: a Python model's comes
    from its config's ``input``/``output``, which do not list them (Triton passes them to
    its ``execute`` all the same)."""
    lead = (-1,) if batched else ()
    inputs = {t.name for t in signature.inputs}
    outputs = {t.name for t in signature.outputs}
    added_in = [
        TensorSpec(c.tensor, c.datatype, (*lead, 1))
        for c in batching.controls
        if c.tensor not in inputs
    ]
    added_in += [
        TensorSpec(s.input_name, s.datatype, (*lead, *s.dims))
        for s in batching.states
        if s.input_name not in inputs
    ]
    added_out = [
        TensorSpec(s.output_name, s.datatype, (*lead, *s.dims))
        for s in batching.states
        if s.output_name not in outputs
    ]
    if not added_in and not added_out:
        return signature
    return Signature(
        inputs=(*signature.inputs, *added_in), outputs=(*signature.outputs, *added_out)
    )


def model_request(
    request: InferRequest,
    batching: SequenceBatching,
    flags: SequenceFlags,
    states: Mapping[str, np.ndarray[Any, Any]],
    batched: bool,
) -> InferRequest:
    """``request`` with the control and state inputs added, and the state outputs asked for
    when the client names its outputs."""
    given = {tensor.name for tensor in request.inputs}
    filled = batching.tensors & given
    if filled:
        raise InvalidInput(
            f"input {sorted(filled)[0]!r} is filled by the sequence batcher (a control or "
            "state input); do not send it"
        )
    added = [_control(c, flags, batched) for c in batching.controls]
    for state in batching.states:
        value = states[state.input_name]
        added.append(InferInput(state.input_name, state.datatype, value.shape, value))
    outputs = request.outputs
    if outputs:
        named = {o.name for o in outputs}
        outputs += tuple(
            RequestedOutput(s.output_name) for s in batching.states if s.output_name not in named
        )
    return replace(request, inputs=request.inputs + tuple(added), outputs=outputs)


def _control(control: SequenceControl, flags: SequenceFlags, batched: bool) -> InferInput:
    shape = (1, 1) if batched else (1,)
    if control.kind == "CORRID":
        value = _corrid(control, flags.sequence_id)
        dtype = object if control.datatype == "BYTES" else numpy_dtype(control.datatype)
        data = np.full(shape, value, dtype=dtype)
        return InferInput(control.tensor, control.datatype, shape, data)
    on = {"START": flags.start, "END": flags.end, "READY": True}[control.kind]
    value = control.false_true[1 if on else 0]
    data = np.full(shape, value, dtype=numpy_dtype(control.datatype))
    return InferInput(control.tensor, control.datatype, shape, data)


def _corrid(control: SequenceControl, sequence_id: int | str) -> Any:
    if control.datatype == "BYTES":
        return str(sequence_id).encode()
    try:
        number = int(sequence_id)
    except ValueError:
        raise InvalidInput(
            f"sequence id {sequence_id!r} is a string, but the model's CORRID control "
            f"{control.tensor!r} is {control.datatype}: send a numeric sequence_id"
        ) from None
    info = np.iinfo(numpy_dtype(control.datatype))
    if not info.min <= number <= info.max:
        raise InvalidInput(
            f"sequence id {number} does not fit the model's CORRID control "
            f"{control.tensor!r} ({control.datatype})"
        )
    return number
