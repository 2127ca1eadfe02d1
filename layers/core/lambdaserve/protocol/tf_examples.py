"""TF Serving's ``:classify`` and ``:regress`` over REST: the ``examples`` (and ``context``)
JSON to serialized ``tf.Example`` protobufs, the signature's input, and its outputs back to
TF Serving's ``results``.

A feature's value is a number, a string, ``{"b64": ...}`` or a list of one kind: integers
are an ``int64_list``, any other number a ``float_list``, strings and bytes a
``bytes_list`` (TF Serving's JSON mapping). ``context`` features go into every example,
an example's own feature of the same name winning. Encoded from protobuf's wire format
(example.proto, feature.proto): no TensorFlow here.
"""

from __future__ import annotations

import base64
import binascii
import struct
from collections.abc import Mapping
from typing import Any

import numpy as np

from lambdaserve.errors import InvalidInput

CLASSIFY, REGRESS = "classify", "regress"


def serialized_examples(document: Any) -> list[bytes]:
    """Each of ``examples`` (with ``context`` merged in) as a serialized tf.Example."""
    if not isinstance(document, dict) or not isinstance(document.get("examples"), list):
        raise InvalidInput(
            'the body must be a JSON object with "examples": a list of {"feature": value} '
            'objects (and optionally "context", features every example shares)'
        )
    context = document.get("context", {})
    if not isinstance(context, dict):
        raise InvalidInput('"context" must be an object of features')
    examples = document["examples"]  # none: the signature is checked first, then the examples
    serialized = []
    for index, example in enumerate(examples):
        if not isinstance(example, dict):
            raise InvalidInput(f"example {index} is not an object of features: {example!r}")
        features = {**context, **example}
        serialized.append(_message(1, _features(features, index)))
    return serialized


def classify_results(outputs: Mapping[str, np.ndarray[Any, Any]], count: int) -> dict[str, Any]:
    """``{"results": [[[label, score], ...] per example]}`` from ``classes`` and ``scores``
    (a missing one is "" labels, or no scores)."""
    classes, scores = outputs.get("classes"), outputs.get("scores")
    if classes is None and scores is None:
        raise InvalidInput(
            f"the signature has outputs {sorted(outputs)}; a classify signature gives "
            '"classes" and/or "scores": call :predict for this one'
        )
    reference = scores if scores is not None else classes
    assert reference is not None
    per_example = reference.reshape(count, -1) if reference.size else reference
    width = per_example.shape[1] if per_example.ndim == 2 else 0
    labels = classes.reshape(count, width) if classes is not None else None
    values = scores.reshape(count, width) if scores is not None else None
    results = []
    for row in range(count):
        pairs = []
        for column in range(width):
            label = _label(labels[row, column]) if labels is not None else ""
            if values is not None:
                pairs.append([label, float(values[row, column])])
            else:
                pairs.append([label])
        results.append(pairs)
    return {"results": results}


def regress_results(outputs: Mapping[str, np.ndarray[Any, Any]], count: int) -> dict[str, Any]:
    """``{"results": [value per example]}`` from ``outputs`` (or the only output)."""
    values = outputs.get("outputs")
    if values is None and len(outputs) == 1:
        values = next(iter(outputs.values()))
    if values is None or values.size != count:
        raise InvalidInput(
            f"the signature has outputs {sorted(outputs)}; a regress signature gives "
            '"outputs", one value per example: call :predict for this one'
        )
    return {"results": [float(v) for v in values.reshape(-1)]}


def _label(value: Any) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


def _features(features: dict[str, Any], index: int) -> bytes:
    entries = b"".join(
        _message(1, _message(1, name.encode()) + _message(2, _feature(name, value, index)))
        for name, value in sorted(features.items())
    )
    return entries


def _feature(name: str, value: Any, index: int) -> bytes:
    values = value if isinstance(value, list) else [value]
    if all(isinstance(v, bool) for v in values) and values:
        values = [int(v) for v in values]
    if all(isinstance(v, int) and not isinstance(v, bool) for v in values):
        packed = b"".join(_varint(v & 0xFFFFFFFFFFFFFFFF) for v in values)
        return _message(3, _message(1, packed))  # int64_list
    if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
        packed = struct.pack(f"<{len(values)}f", *values)
        return _message(2, _message(1, packed))  # float_list
    if all(isinstance(v, (str, dict)) for v in values):
        return _message(1, b"".join(_message(1, _bytes(name, v)) for v in values))
    raise InvalidInput(
        f"example {index}, feature {name!r}: {value!r} is not a number, a string, "
        '{"b64": ...} or a list of one of them'
    )


def _bytes(name: str, value: str | dict[str, Any]) -> bytes:
    if isinstance(value, str):
        return value.encode()
    encoded = value.get("b64")
    if set(value) != {"b64"} or not isinstance(encoded, str):
        raise InvalidInput(f'feature {name!r}: an object value must be {{"b64": "..."}}')
    try:
        return base64.b64decode(encoded, validate=True)
    except binascii.Error:
        raise InvalidInput(f"feature {name!r}: not base64: {encoded[:40]!r}") from None


def _message(field: int, payload: bytes) -> bytes:
    """A length-delimited field (wire type 2)."""
    return _varint(field << 3 | 2) + _varint(len(payload)) + payload


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)
