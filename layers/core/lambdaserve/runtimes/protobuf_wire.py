"""protobuf's wire format read without generated classes: the Paddle ProgramDesc and the TF
SavedModel are read at publish, where neither framework is installed (the manage function)."""

from __future__ import annotations

from collections.abc import Iterator

_MAX_VARINT_BYTES = 10


def fields(data: bytes) -> Iterator[tuple[int, int | bytes]]:
    """(field number, value) of each field: varints as ints, length-delimited as bytes."""
    position = 0
    while position < len(data):
        key, position = varint(data, position)
        field, wire = key >> 3, key & 7
        if wire == 0:
            value, position = varint(data, position)
            yield field, value
        elif wire == 2:
            size, position = varint(data, position)
            if position + size > len(data):
                raise ValueError("truncated")
            yield field, data[position : position + size]
            position += size
        elif wire in (1, 5):  # fixed64 / fixed32 (floats among attrs): skipped
            position += 8 if wire == 1 else 4
        else:
            raise ValueError(f"wire type {wire} at byte {position}")


def varint(data: bytes, position: int) -> tuple[int, int]:
    """The varint at ``position`` and the position after it."""
    result = shift = 0
    for _ in range(_MAX_VARINT_BYTES):
        byte = data[position]
        position += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, position
        shift += 7
    raise ValueError("varint too long")
