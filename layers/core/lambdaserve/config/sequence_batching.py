"""Triton's ``sequence_batching`` block as lambdaserve applies it.

Control inputs (``CONTROL_SEQUENCE_START``/``_END``/``_READY`` in their int32, fp32 or bool
``false_true`` forms, ``CONTROL_SEQUENCE_CORRID`` as UINT64, INT64, UINT32, INT32 or STRING),
the strategy (``direct`` or ``oldest``), ``max_sequence_idle_microseconds`` (1 s when unset,
as Triton's) and implicit ``state`` with its initial value. Read from Triton's own message, so
anything Triton's parser refuses is refused before this; this refuses what Triton's
sequence batcher refuses at load (a control without a value pair, a CORRID of another type).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from lambdaserve.config.triton_proto import pb
from lambdaserve.errors import InvalidInput

ControlKind = Literal["START", "END", "READY", "CORRID"]
DEFAULT_IDLE_US = 1_000_000  # Triton's default max_sequence_idle_microseconds
_CORRID_TYPES = {
    "TYPE_UINT64": "UINT64",
    "TYPE_INT64": "INT64",
    "TYPE_UINT32": "UINT32",
    "TYPE_INT32": "INT32",
    "TYPE_STRING": "BYTES",
}
_KINDS: dict[str, ControlKind] = {
    "CONTROL_SEQUENCE_START": "START",
    "CONTROL_SEQUENCE_END": "END",
    "CONTROL_SEQUENCE_READY": "READY",
    "CONTROL_SEQUENCE_CORRID": "CORRID",
}


@dataclass(frozen=True)
class SequenceControl:
    """One control tensor: its ``kind``, the model's input it fills, that input's v2 datatype
    and, for the boolean kinds, the values meaning false and true."""

    kind: ControlKind
    tensor: str
    datatype: str
    false_true: tuple[Any, Any] = (0, 1)


@dataclass(frozen=True)
class ImplicitState:
    """One ``state`` entry: the model's input that reads it, the output that writes it."""

    input_name: str
    output_name: str
    datatype: str
    dims: tuple[int, ...]
    data_file: str = ""  # under <model>/initial_state/; "" is zero_data (or no initial_state)
    # the initial_state entry as written (its name, TYPE_ data type and dims), for the echo
    initial: tuple[str, str, tuple[int, ...]] | None = None


@dataclass(frozen=True)
class SequenceBatching:
    controls: tuple[SequenceControl, ...] = ()
    states: tuple[ImplicitState, ...] = ()
    strategy: Literal["direct", "oldest"] = "direct"
    max_sequence_idle_us: int = DEFAULT_IDLE_US
    max_candidate_sequences: int = 0
    preferred_batch_size: tuple[int, ...] = ()
    max_queue_delay_us: int = 0

    def control(self, kind: ControlKind) -> SequenceControl | None:
        return next((c for c in self.controls if c.kind == kind), None)

    @property
    def tensors(self) -> frozenset[str]:
        """The model's inputs the server fills (controls and states), never the client."""
        return frozenset([c.tensor for c in self.controls] + [s.input_name for s in self.states])

    def to_document(self) -> dict[str, Any]:
        """Triton's JSON form of the block, as ``GET .../config`` returns it."""
        controls = []
        for c in self.controls:
            kind: dict[str, Any]
            if c.kind == "CORRID":
                kind = {
                    "data_type": "TYPE_STRING" if c.datatype == "BYTES" else f"TYPE_{c.datatype}"
                }
            else:
                kind = {f"{c.datatype.lower()}_false_true": list(c.false_true)}
            controls.append(
                {"name": c.tensor, "control": [{"kind": f"CONTROL_SEQUENCE_{c.kind}", **kind}]}
            )
        document: dict[str, Any] = {
            "max_sequence_idle_microseconds": self.max_sequence_idle_us,
            "control_input": controls,
            "state": [
                {
                    "input_name": s.input_name,
                    "output_name": s.output_name,
                    "data_type": "TYPE_STRING" if s.datatype == "BYTES" else f"TYPE_{s.datatype}",
                    "dims": list(s.dims),
                }
                | _initial_document(s)
                for s in self.states
            ],
        }
        if self.strategy == "oldest":
            document["oldest"] = {
                "max_candidate_sequences": self.max_candidate_sequences,
                "preferred_batch_size": list(self.preferred_batch_size),
                "max_queue_delay_microseconds": self.max_queue_delay_us,
            }
        else:
            document["direct"] = {}
        return document


def sequence_batching_of(message: Any, v2_datatype: dict[str, str]) -> SequenceBatching | None:
    """The block of a ``pb.ModelConfig`` (None when it has none). ``v2_datatype``: Triton's
    TYPE_* names to v2's."""
    if not message.HasField("sequence_batching"):
        return None
    block = message.sequence_batching
    if block.iterative_sequence:
        raise InvalidInput(
            "sequence_batching iterative_sequence is not supported: a request cannot be "
            "rescheduled here; send each step of the sequence as its own request"
        )
    oldest = block.WhichOneof("strategy_choice") == "oldest"
    return SequenceBatching(
        controls=tuple(_control(c) for c in block.control_input),
        states=tuple(_state(s, v2_datatype) for s in block.state),
        strategy="oldest" if oldest else "direct",
        max_sequence_idle_us=block.max_sequence_idle_microseconds or DEFAULT_IDLE_US,
        max_candidate_sequences=block.oldest.max_candidate_sequences if oldest else 0,
        preferred_batch_size=tuple(block.oldest.preferred_batch_size) if oldest else (),
        max_queue_delay_us=block.oldest.max_queue_delay_microseconds if oldest else 0,
    )


def _control(control_input: Any) -> SequenceControl:
    name = control_input.name
    if len(control_input.control) != 1:
        raise InvalidInput(
            f"sequence_batching control_input {name!r} must have exactly one control, has "
            f"{len(control_input.control)}"
        )
    control = control_input.control[0]
    kind = _KINDS.get(pb.ModelSequenceBatching.Control.Kind.Name(control.kind))
    if kind is None:
        raise InvalidInput(f"sequence_batching control_input {name!r}: unknown control kind")
    if kind == "CORRID":
        data_type = pb.DataType.Name(control.data_type)
        if data_type not in _CORRID_TYPES:
            raise InvalidInput(
                f"sequence_batching control_input {name!r}: CONTROL_SEQUENCE_CORRID must be "
                f"TYPE_UINT64, TYPE_INT64, TYPE_UINT32, TYPE_INT32 or TYPE_STRING, not {data_type}"
            )
        return SequenceControl(kind, name, _CORRID_TYPES[data_type])
    forms = [
        ("INT32", tuple(control.int32_false_true)),
        ("FP32", tuple(control.fp32_false_true)),
        ("BOOL", tuple(control.bool_false_true)),
    ]
    given = [(datatype, pair) for datatype, pair in forms if pair]
    if len(given) != 1 or len(given[0][1]) != 2:
        raise InvalidInput(
            f"sequence_batching control_input {name!r}: a {kind} control needs exactly one of "
            "int32_false_true, fp32_false_true or bool_false_true, with two values"
        )
    datatype, pair = given[0]
    return SequenceControl(kind, name, datatype, (pair[0], pair[1]))


def _state(state: Any, v2_datatype: dict[str, str]) -> ImplicitState:
    data_type = pb.DataType.Name(state.data_type)
    if data_type not in v2_datatype:
        raise InvalidInput(f"sequence_batching state {state.input_name!r}: no data_type")
    dims = tuple(int(d) for d in state.dims)
    if any(d < 0 for d in dims):
        raise InvalidInput(
            f"sequence_batching state {state.input_name!r}: dims {list(dims)} must be fixed "
            "(a growable state is not supported)"
        )
    files = [i.data_file for i in state.initial_state if i.WhichOneof("state_data") == "data_file"]
    if len(state.initial_state) > 1:
        raise InvalidInput(
            f"sequence_batching state {state.input_name!r}: one initial_state at most"
        )
    initial = None
    if state.initial_state:
        written = state.initial_state[0]
        initial = (
            written.name,
            pb.DataType.Name(written.data_type),
            tuple(int(d) for d in written.dims),
        )
    return ImplicitState(
        state.input_name,
        state.output_name,
        v2_datatype[data_type],
        dims,
        files[0] if files else "",
        initial,
    )


def _initial_document(state: ImplicitState) -> dict[str, Any]:
    """A state's ``initial_state`` as Triton echoes it (none where the config has none)."""
    if state.initial is None:
        return {}
    name, data_type, dims = state.initial
    source: dict[str, Any] = (
        {"data_file": state.data_file} if state.data_file else {"zero_data": True}
    )
    return {"initial_state": [{"name": name, "data_type": data_type, "dims": list(dims)} | source]}
