"""What a Paddle inference program says about itself, read without PaddlePaddle.

A Paddle inference model's program (``__model__`` in Paddle 1.x's layout, ``*.pdmodel`` in
Paddle 2's) is a ``paddle.framework.proto.ProgramDesc`` protobuf. The manage function reads
it here, with no paddle installed: its feeds and fetches (the signature, in the feed and
fetch ops' ``col`` order), the operators it runs and the parameters it needs. Only the few
fields that says are decoded, straight from the wire format (framework.proto's field
numbers below); whether Paddle Inference runs it is learnt where it serves.
"""

from __future__ import annotations

from dataclasses import dataclass

from lambdaserve.errors import ModelRejected
from lambdaserve.runtimes.protobuf_wire import fields as _fields
from lambdaserve.runtimes.protobuf_wire import varint as _varint
from lambdaserve.tensors.signature import Signature, TensorSpec

# framework.proto's VarType.Type values for tensors, as v2 datatypes
_DATATYPES = {
    0: "BOOL",
    1: "INT16",
    2: "INT32",
    3: "INT64",
    4: "FP16",
    5: "FP32",
    6: "FP64",
    20: "UINT8",
    21: "INT8",
    22: "BF16",
}
_FEED_MINIBATCH, _FETCH_LIST = 9, 10


@dataclass(frozen=True)
class PaddleProgram:
    """The program's signature, its operator types and the parameters it loads."""

    signature: Signature
    ops: frozenset[str]
    parameters: tuple[str, ...]


def read_program(data: bytes, filename: str) -> PaddleProgram:
    """Decode ``data`` (a ProgramDesc) or raise ModelRejected naming ``filename``."""
    try:
        blocks = [b for field, b in _fields(data) if field == 1]
        if not blocks or not isinstance(blocks[0], bytes):
            raise ValueError("no block")
        return _program(blocks[0])
    except (ValueError, IndexError, UnicodeDecodeError) as exc:
        raise ModelRejected(
            f"{filename} is not a Paddle inference program ({exc}); save the model with "
            "paddle.static.save_inference_model or paddle.jit.save"
        ) from exc


def _program(block: bytes) -> PaddleProgram:
    variables: dict[str, tuple[int, str, tuple[int, ...], bool]] = {}
    feeds: list[tuple[int, str]] = []
    fetches: list[tuple[int, str]] = []
    ops: set[str] = set()
    for field, value in _fields(block):
        if field == 3 and isinstance(value, bytes):  # VarDesc
            name, kind, datatype, dims, persistable = _var(value)
            variables[name] = (kind, datatype, dims, persistable)
        elif field == 4 and isinstance(value, bytes):  # OpDesc
            op_type, inputs, outputs, col = _op(value)
            ops.add(op_type)
            if op_type == "feed":
                feeds += [(col, name) for name in outputs.get("Out", [])]
            elif op_type == "fetch":
                fetches += [(col, name) for name in inputs.get("X", [])]
    if not feeds or not fetches:
        raise ValueError("it has no feed or no fetch ops: not saved for inference")

    def spec(name: str) -> TensorSpec:
        if name not in variables:
            raise ValueError(f"the program has no variable {name!r}")
        _, datatype, dims, _ = variables[name]
        return TensorSpec(name, datatype, dims)

    parameters = tuple(
        sorted(
            name
            for name, (kind, _, _, persistable) in variables.items()
            if persistable and kind not in (_FEED_MINIBATCH, _FETCH_LIST)
        )
    )
    return PaddleProgram(
        Signature(
            inputs=tuple(spec(n) for _, n in sorted(feeds)),
            outputs=tuple(spec(n) for _, n in sorted(fetches)),
        ),
        frozenset(ops - {"feed", "fetch"}),
        parameters,
    )


def _var(data: bytes) -> tuple[str, int, str, tuple[int, ...], bool]:
    """VarDesc: name = 1, type = 2 (VarType), persistable = 3."""
    name, kind, datatype, persistable = "", -1, "", False
    dims: tuple[int, ...] = ()
    for field, value in _fields(data):
        if field == 1 and isinstance(value, bytes):
            name = value.decode()
        elif field == 2 and isinstance(value, bytes):
            kind, datatype, dims = _var_type(value)
        elif field == 3 and isinstance(value, int):
            persistable = bool(value)
    return name, kind, datatype, dims, persistable


def _var_type(data: bytes) -> tuple[int, str, tuple[int, ...]]:
    """VarType: type = 1, lod_tensor = 3 (LoDTensorDesc: tensor = 1, a TensorDesc)."""
    kind, datatype = -1, ""
    dims: tuple[int, ...] = ()
    for field, value in _fields(data):
        if field == 1 and isinstance(value, int):
            kind = value
        elif field == 3 and isinstance(value, bytes):
            for inner, tensor in _fields(value):
                if inner == 1 and isinstance(tensor, bytes):
                    datatype, dims = _tensor_desc(tensor)
    return kind, datatype, dims


def _tensor_desc(data: bytes) -> tuple[str, tuple[int, ...]]:
    """TensorDesc: data_type = 1, dims = 2 (repeated int64, packed or not)."""
    code, dims = -1, []
    for field, value in _fields(data):
        if field == 1 and isinstance(value, int):
            code = value
        elif field == 2 and isinstance(value, int):
            dims.append(_signed(value))
        elif field == 2 and isinstance(value, bytes):
            position = 0
            while position < len(value):
                number, position = _varint(value, position)
                dims.append(_signed(number))
    return _DATATYPES.get(code, f"PADDLE_TYPE_{code}"), tuple(max(d, -1) for d in dims)


def _op(data: bytes) -> tuple[str, dict[str, list[str]], dict[str, list[str]], int]:
    """OpDesc: inputs = 1, outputs = 2 (Var: parameter = 1, arguments = 2), type = 3,
    attrs = 4 (Attr: name = 1, i = 3): the feed and fetch ops' ``col``."""
    op_type, col = "", 0
    inputs: dict[str, list[str]] = {}
    outputs: dict[str, list[str]] = {}
    for field, value in _fields(data):
        if field in (1, 2) and isinstance(value, bytes):
            parameter, arguments = "", []
            for inner, item in _fields(value):
                if inner == 1 and isinstance(item, bytes):
                    parameter = item.decode()
                elif inner == 2 and isinstance(item, bytes):
                    arguments.append(item.decode())
            (inputs if field == 1 else outputs)[parameter] = arguments
        elif field == 3 and isinstance(value, bytes):
            op_type = value.decode()
        elif field == 4 and isinstance(value, bytes):
            attr = dict(_fields(value))
            if attr.get(1) == b"col" and isinstance(attr.get(3), int):
                col = _signed(int(attr[3]))
    return op_type, inputs, outputs, col


def _signed(value: int) -> int:
    """int32/int64 fields: negatives travel as 64-bit two's complement."""
    return value - (1 << 64) if value >= 1 << 63 else value
