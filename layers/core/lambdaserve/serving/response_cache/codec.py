"""A cached answer's bytes: the output tensors of one request, as the model produced them.

No pickle: entries are read back from a shared store (Redis) that other processes write, so
the format is data only: ``LSRC1``, a 4-byte header length, a JSON header naming each output
(name, v2 datatype, shape, byte length) and the tensors' bytes in Triton's binary tensor
encoding. Decoding checks every length; a malformed entry is a miss, never an answer.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import orjson

from lambdaserve.errors import LambdaServeError
from lambdaserve.tensors.encoding import from_binary, to_binary, v2_datatype

MAGIC = b"LSRC1"
SEQUENCE = b"LSRS1"  # a decoupled model's responses: a count, then each entry with its length
_LENGTH = struct.Struct("<I")
_SIZE = struct.Struct("<Q")


class MalformedEntry(LambdaServeError):
    """A stored entry that is not one this codec wrote."""


def encode_outputs(outputs: Mapping[str, np.ndarray[Any, Any]]) -> bytes:
    """The outputs as one bytes value (their order kept: encoders answer in that order)."""
    header = []
    payloads = []
    for name, array in outputs.items():
        raw = tensor_bytes(array)
        header.append(
            {
                "name": name,
                "datatype": v2_datatype(array),
                "shape": list(array.shape),
                "size": len(raw),
            }
        )
        payloads.append(raw)
    document = orjson.dumps(header)
    return b"".join([MAGIC, _LENGTH.pack(len(document)), document, *payloads])


def encode_sequence(responses: Sequence[Mapping[str, np.ndarray[Any, Any]]]) -> bytes:
    parts = [SEQUENCE, _LENGTH.pack(len(responses))]
    for outputs in responses:
        entry = encode_outputs(outputs)
        parts += [_SIZE.pack(len(entry)), entry]
    return b"".join(parts)


def decode_sequence(entry: bytes) -> list[dict[str, np.ndarray[Any, Any]]]:
    """The responses ``encode_sequence`` wrote; MalformedEntry for anything else."""
    if not entry.startswith(SEQUENCE) or len(entry) < len(SEQUENCE) + _LENGTH.size:
        raise MalformedEntry("not a cached response sequence")
    (count,) = _LENGTH.unpack_from(entry, len(SEQUENCE))
    offset = len(SEQUENCE) + _LENGTH.size
    responses = []
    for _ in range(count):
        if offset + _SIZE.size > len(entry):
            raise MalformedEntry("a sequence shorter than its count says")
        (size,) = _SIZE.unpack_from(entry, offset)
        offset += _SIZE.size
        if offset + size > len(entry):
            raise MalformedEntry("a sequence shorter than its entries say")
        responses.append(decode_outputs(entry[offset : offset + size]))
        offset += size
    if offset != len(entry):
        raise MalformedEntry("a sequence longer than its entries say")
    return responses


def tensor_bytes(array: np.ndarray[Any, Any]) -> bytes:
    """A tensor's bytes in Triton's binary encoding (empty tensors too)."""
    if array.dtype.kind in ("O", "S", "U"):
        return bytes(to_binary(array))
    return np.ascontiguousarray(array).tobytes()


def decode_outputs(entry: bytes) -> dict[str, np.ndarray[Any, Any]]:
    """The outputs ``encode_outputs`` wrote; MalformedEntry for anything else."""
    if not entry.startswith(MAGIC) or len(entry) < len(MAGIC) + _LENGTH.size:
        raise MalformedEntry("not a response cache entry")
    start = len(MAGIC) + _LENGTH.size
    (length,) = _LENGTH.unpack_from(entry, len(MAGIC))
    try:
        header = orjson.loads(entry[start : start + length])
    except orjson.JSONDecodeError as exc:
        raise MalformedEntry(f"unreadable header: {exc}") from exc
    # one copy, so the arrays are writable: ensemble steps and BLS callers may write them
    view = memoryview(bytearray(entry))
    offset = start + length
    outputs: dict[str, np.ndarray[Any, Any]] = {}
    try:
        for tensor in header:
            size = int(tensor["size"])
            if offset + size > len(entry):
                raise MalformedEntry("an entry shorter than its header says")
            outputs[str(tensor["name"])] = from_binary(
                str(tensor["name"]),
                str(tensor["datatype"]),
                tuple(int(d) for d in tensor["shape"]),
                view[offset : offset + size],
            )
            offset += size
    except MalformedEntry:
        raise
    except (KeyError, TypeError, ValueError, LambdaServeError) as exc:
        raise MalformedEntry(f"unreadable tensor: {exc}") from exc
    if offset != len(entry):
        raise MalformedEntry("an entry longer than its header says")
    return outputs
