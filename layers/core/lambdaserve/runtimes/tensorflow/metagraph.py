"""What a SavedModel's ``saved_model.pb`` says of its signatures, read without TensorFlow.

The manage function has no TensorFlow: it reads each signature's key, method name, inputs
and outputs (keys, dtypes, shapes) from the SavedModel protobuf's wire format, as Paddle's
ProgramDesc is read (``protobuf_wire``). Field numbers are those of
tensorflow/core/protobuf/saved_model.proto, meta_graph.proto and
tensorflow/core/framework/tensor_shape.proto, types.proto.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from lambdaserve.errors import ModelRejected
from lambdaserve.runtimes.protobuf_wire import fields as _fields
from lambdaserve.tensors.signature import Signature, SignatureDef, TensorSpec

DEFAULT = "serving_default"
# SavedModel.meta_graphs = 2; MetaGraphDef: saver_def = 3, signature_def = 5 (a map:
# key = 1, value = 2);
# SignatureDef: inputs = 1, outputs = 2 (maps of TensorInfo), method_name = 3;
# TensorInfo: name = 1, dtype = 2, tensor_shape = 3;
# TensorShapeProto: dim = 2 (size = 1), unknown_rank = 3
_META_GRAPHS, _SAVER_DEF, _SIGNATURE_DEF, _KEY, _VALUE = 2, 3, 5, 1, 2
_INPUTS, _OUTPUTS, _METHOD = 1, 2, 3
_NAME, _DTYPE, _SHAPE, _DIM, _SIZE, _UNKNOWN_RANK = 1, 2, 3, 2, 1, 3
# types.proto's DataType values, as v2 datatypes
DATATYPES = {
    1: "FP32",
    2: "FP64",
    3: "INT32",
    4: "UINT8",
    5: "INT16",
    6: "INT8",
    7: "BYTES",
    9: "INT64",
    10: "BOOL",
    14: "BF16",
    17: "UINT16",
    19: "FP16",
    22: "UINT32",
    23: "UINT64",
}


@dataclass(frozen=True)
class SavedSignature:
    """One SignatureDef: its key, method name (``tensorflow/serving/predict``...) and tensors,
    named by the signature's keys (what TF Serving's clients send). An unknown rank reads as
    one dimension of any size (a batch of serialized Examples, as TF1's parse_example takes)."""

    key: str
    method: str
    signature: Signature
    tensor_names: dict[str, str] = field(default_factory=dict)  # key -> graph tensor ("x:0")
    unknown_rank: frozenset[str] = frozenset()

    def definition(self) -> SignatureDef:
        return SignatureDef(self.method, self.signature, self.tensor_names, self.unknown_rank)


def read_signatures(saved_model_pb: bytes) -> tuple[SavedSignature, ...]:
    """Every signature of the first meta graph (``serving_default`` first, then by key),
    TF's own ``__saved_model_init_op`` left out; ModelRejected when the bytes are not a
    SavedModel."""
    try:
        graphs = [value for number, value in _fields(saved_model_pb) if number == _META_GRAPHS]
        if not graphs or not isinstance(graphs[0], bytes):
            raise ValueError("it has no meta graph")
        found = []
        for number, entry in _fields(graphs[0]):
            if number != _SIGNATURE_DEF or not isinstance(entry, bytes):
                continue
            pair = dict(_fields(entry))
            key, value = _text(pair.get(_KEY, b"")), pair.get(_VALUE, b"")
            if not key.startswith("__") and isinstance(value, bytes):
                found.append(_signature_def(key, value))
    except (IndexError, ValueError, UnicodeDecodeError) as exc:
        raise ModelRejected(
            f"saved_model.pb is not a TF SavedModel ({exc}); save it with "
            "tf.saved_model.save and upload the whole directory (saved_model.pb, variables/)"
        ) from exc
    return tuple(sorted(found, key=lambda s: (s.key != DEFAULT, s.key)))


def has_saver(saved_model_pb: bytes) -> bool:
    """Whether the first meta graph restores variables (a ``saver_def``, field 3): then
    ``variables/variables.index`` must be beside ``saved_model.pb``."""
    try:
        graphs = [value for number, value in _fields(saved_model_pb) if number == _META_GRAPHS]
        return (
            bool(graphs)
            and isinstance(graphs[0], bytes)
            and any(number == _SAVER_DEF for number, _ in _fields(graphs[0]))
        )
    except (IndexError, ValueError):
        return False


def served_signature(signatures: tuple[SavedSignature, ...]) -> SavedSignature:
    """The signature a request without ``signature_name`` gets: ``serving_default``, else
    the only one; ModelRejected otherwise."""
    if signatures and signatures[0].key == DEFAULT:
        return signatures[0]
    if len(signatures) == 1:
        return signatures[0]
    keys = [s.key for s in signatures]
    raise ModelRejected(
        f"the SavedModel has no {DEFAULT!r} signature and {len(keys)} others {keys}: save it "
        f"with signatures={{'{DEFAULT}': ...}} so that requests without signature_name have one"
    )


def _signature_def(key: str, data: bytes) -> SavedSignature:
    inputs: list[TensorSpec] = []
    outputs: list[TensorSpec] = []
    names: dict[str, str] = {}
    unknown: set[str] = set()
    method = ""
    for number, value in _fields(data):
        if number in (_INPUTS, _OUTPUTS) and isinstance(value, bytes):
            pair = dict(_fields(value))
            name, info = _text(pair.get(_KEY, b"")), pair.get(_VALUE, b"")
            spec, graph_name, unknown_rank = _tensor_info(
                name, info if isinstance(info, bytes) else b""
            )
            (inputs if number == _INPUTS else outputs).append(spec)
            names[name] = graph_name
            if unknown_rank:
                unknown.add(name)
        elif number == _METHOD and isinstance(value, bytes):
            method = _text(value)
    by_name = lambda spec: spec.name  # noqa: E731 (protobuf maps carry no order)
    signature = Signature(tuple(sorted(inputs, key=by_name)), tuple(sorted(outputs, key=by_name)))
    return SavedSignature(key, method, signature, names, frozenset(unknown))


def _tensor_info(name: str, data: bytes) -> tuple[TensorSpec, str, bool]:
    """The tensor's spec, its graph tensor's name (TensorInfo.name = 1) and whether its
    rank is unknown."""
    dtype, dims, unknown_rank, graph_name = 0, [], False, ""
    for number, value in _fields(data):
        if number == _NAME and isinstance(value, bytes):
            graph_name = _text(value)
        elif number == _DTYPE and isinstance(value, int):
            dtype = value
        elif number == _SHAPE and isinstance(value, bytes):
            for inner, item in _fields(value):
                if inner == _DIM and isinstance(item, bytes):
                    size = dict(_fields(item)).get(_SIZE, 0)
                    dims.append(_signed(size) if isinstance(size, int) else -1)
                elif inner == _UNKNOWN_RANK and item:
                    unknown_rank = True
    shape = (-1,) if unknown_rank else tuple(max(d, -1) for d in dims)
    return (
        TensorSpec(name, DATATYPES.get(dtype, f"TF_TYPE_{dtype}"), shape),
        graph_name,
        unknown_rank,
    )


def _signed(value: int) -> int:
    return value - (1 << 64) if value >= 1 << 63 else value


def _text(raw: bytes | int) -> str:
    return raw.decode() if isinstance(raw, bytes) else ""
