"""What a TF SavedModel's ``saved_model.pb`` says of its signatures, read from protobuf's wire
format without TensorFlow (the manage function has none): each signature's key and method.

OpenVINO's TensorFlow frontend converts the ``serving_default`` signature only, so a version's
notes name the signatures it serves and those it does not; and a graph OpenVINO refuses for
its lookup tables (``tf.lookup``) is told where it can serve, since re-saving changes nothing.
"""

from __future__ import annotations

from lambdaserve.runtimes.protobuf_wire import fields as _fields

SERVED = "serving_default"
# SavedModel.meta_graphs = 2; MetaGraphDef.signature_def = 5 (map: key = 1, value = 2);
# SignatureDef.method_name = 3 (tensorflow/core/protobuf/saved_model.proto, meta_graph.proto)
_META_GRAPHS, _SIGNATURE_DEF, _KEY, _VALUE, _METHOD = 2, 5, 1, 2, 3
_LOOKUP_OPS = ("HashTable", "LookupTable", "MutableHashTable", "MutableDenseHashTable")


def signatures(saved_model_pb: bytes) -> list[tuple[str, str]]:
    """``(key, method name)`` of every signature of the first meta graph, in file order;
    empty when the bytes are not a SavedModel."""
    try:
        graphs = [value for number, value in _fields(saved_model_pb) if number == _META_GRAPHS]
        if not graphs or not isinstance(graphs[0], bytes):
            return []
        found = []
        for number, entry in _fields(graphs[0]):
            if number != _SIGNATURE_DEF or not isinstance(entry, bytes):
                continue
            fields = dict(_fields(entry))
            key, value = fields.get(_KEY, b""), fields.get(_VALUE, b"")
            method = dict(_fields(value)).get(_METHOD, b"") if isinstance(value, bytes) else b""
            found.append((_text(key), _text(method)))
        return found
    except (IndexError, ValueError):
        return []


def signature_note(saved_model_pb: bytes) -> str:
    """The version's note: which signatures it serves and which it does not ("" when
    ``serving_default`` is its only one)."""
    others = [
        f"{key!r} ({method.rsplit('/', 1)[-1] or 'no method'})"
        for key, method in signatures(saved_model_pb)
        if key != SERVED and not key.startswith("__")  # __saved_model_init_op: TF's own
    ]
    if not others:
        return ""
    return (
        f"serves signature {SERVED!r} (through OpenVINO); not served: {', '.join(others)}: "
        "OpenVINO converts serving_default only"
    )


def lookup_table_fix(reason: str) -> str:
    """Where a SavedModel refused for its lookup tables can serve, or "" for other reasons."""
    if not any(op in reason for op in _LOOKUP_OPS):
        return ""
    return (
        "its graph uses lookup tables (tf.lookup), which OpenVINO does not convert, so "
        'saving it again changes nothing: let TensorFlow serve it (backend: "tensorflow" in '
        "its config, or no backend line: TensorFlow serves what OpenVINO refuses; "
        "docs/from-tfserving.md)"
    )


def _text(raw: bytes | int) -> str:
    return raw.decode("utf-8", "replace") if isinstance(raw, bytes) else ""
