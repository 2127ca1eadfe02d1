"""Tensors across processes by shared memory: each worker has a request area and a response
area, shared-memory files both processes map. The writer grows an area (ftruncate)
when a message does not fit; the reader remaps when a header names an end past its mapping.
The files have no name (memfd): their descriptors pass to the child, so a killed pair leaves
nothing behind.

What goes in the header beside the bytes: per tensor ``[name, dtype, shape, offset,
length]``. BYTES (object) tensors are length-prefixed elements (4-byte little-endian length,
then the bytes), as Triton's own BYTES serialization; nothing is pickled.
"""

from __future__ import annotations

import mmap
import os
import struct
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

Descriptor = list[Any]  # [name, dtype, shape, offset, length]
_LENGTH = struct.Struct("<I")
_ALIGN = 64


def anonymous_file(name: str) -> int:
    """A shared-memory file with no name left on disk: a memfd on Linux, else a temporary
    file unlinked at once. Its descriptor passes to the child, so nothing can leak."""
    if hasattr(os, "memfd_create"):
        return os.memfd_create(name)  # close-on-exec: only the child named in pass_fds gets it
    fd, path = tempfile.mkstemp(prefix=name)
    os.unlink(path)
    return fd


class Area:
    """One mapped file: written by one side, read by the other."""

    def __init__(self, fd: int, size: int = 0) -> None:
        self.fd = fd
        if size:
            os.ftruncate(fd, size)
        self._map = mmap.mmap(fd, max(size, os.fstat(fd).st_size))

    @classmethod
    def create(cls, path: Path, size: int) -> Area:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
        return cls(fd, size)

    @classmethod
    def open(cls, path: Path) -> Area:
        return cls(os.open(path, os.O_RDWR))

    @classmethod
    def anonymous(cls, name: str, size: int) -> Area:
        return cls(anonymous_file(name), size)

    @property
    def size(self) -> int:
        return len(self._map)

    def ensure(self, end: int, *, grow: bool) -> None:
        """Map at least ``end`` bytes: grow the file (the writer) or remap it (the reader)."""
        if end <= len(self._map):
            return
        if grow:
            os.ftruncate(self.fd, max(end, 2 * len(self._map)))
        self._map.close()
        self._map = mmap.mmap(self.fd, os.fstat(self.fd).st_size)

    def write_tensors(
        self, arrays: Sequence[tuple[str, np.ndarray[Any, Any]]], start: int = 0
    ) -> tuple[list[Descriptor], int]:
        """``arrays`` written from ``start``; their descriptors and the end offset."""
        payloads = [(name, array, _payload(array)) for name, array in arrays]
        end = start
        for _, _, payload in payloads:
            end = _aligned(end) + len(payload)
        self.ensure(end, grow=True)
        descriptors, offset = [], start
        for name, array, payload in payloads:
            offset = _aligned(offset)
            self._map[offset : offset + len(payload)] = payload
            descriptors.append([name, _dtype_name(array), list(array.shape), offset, len(payload)])
            offset += len(payload)
        return descriptors, end

    def write_bytes(self, data: bytes, start: int) -> tuple[int, int]:
        """Raw bytes (a TorchServe body) at ``start`` aligned: their offset and the end."""
        offset = _aligned(start)
        self.ensure(offset + len(data), grow=True)
        self._map[offset : offset + len(data)] = data
        return offset, offset + len(data)

    def read_bytes(self, offset: int, length: int) -> bytes:
        self.ensure(offset + length, grow=False)
        return self._map[offset : offset + length]

    def read_tensors(self, descriptors: Sequence[Descriptor]) -> dict[str, np.ndarray[Any, Any]]:
        """Copies of the tensors: the area is overwritten by the next message."""
        if descriptors:
            self.ensure(max(d[3] + d[4] for d in descriptors), grow=False)
        return {d[0]: _array(self._map, *d[1:]) for d in descriptors}

    def close(self) -> None:
        self._map.close()
        os.close(self.fd)


def _aligned(offset: int) -> int:
    return (offset + _ALIGN - 1) // _ALIGN * _ALIGN


def _dtype_name(array: np.ndarray[Any, Any]) -> str:
    return "BYTES" if array.dtype == object or array.dtype.kind in "SU" else array.dtype.str


def _payload(array: np.ndarray[Any, Any]) -> bytes | memoryview:
    if array.dtype == object or array.dtype.kind in "SU":
        parts = []
        for element in array.reshape(-1):
            raw = element if isinstance(element, bytes | bytearray) else str(element).encode()
            parts.append(_LENGTH.pack(len(raw)))
            parts.append(bytes(raw))
        return b"".join(parts)
    flat: Any = np.ascontiguousarray(array).reshape(-1).view(np.uint8)
    return memoryview(flat)


def _array(
    buffer: mmap.mmap, dtype: str, shape: list[int], offset: int, length: int
) -> np.ndarray[Any, Any]:
    if dtype == "BYTES":
        data, elements, position = buffer[offset : offset + length], [], 0
        while position < length:
            (size,) = _LENGTH.unpack_from(data, position)
            elements.append(data[position + 4 : position + 4 + size])
            position += 4 + size
        out = np.empty(len(elements), dtype=object)
        out[:] = elements
        return out.reshape(shape)
    kind = np.dtype(dtype)
    count = length // kind.itemsize if kind.itemsize else 0
    return np.frombuffer(buffer, kind, count, offset).reshape(shape).copy()


def arrays_of(inputs: Mapping[str, np.ndarray[Any, Any]]) -> list[tuple[str, np.ndarray[Any, Any]]]:
    return [(name, np.asarray(array)) for name, array in inputs.items()]
