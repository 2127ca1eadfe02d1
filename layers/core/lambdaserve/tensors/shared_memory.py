"""Triton's system shared memory: regions a client on the same host registers by POSIX
shared-memory key, read for inputs and written for outputs instead of carrying tensors in
the request (Triton's shared-memory extension, as ``SharedMemoryManager`` keeps them).

Only where a client can share memory with the server: ``serve`` and ``dev``, one process
(each ``serve --workers`` replica keeps its own regions). A region is the key's file under
``/dev/shm`` (what ``shm_open`` names), mapped from ``offset`` for ``byte_size`` bytes;
keys are one path segment, so nothing outside ``/dev/shm`` can be named.
"""

from __future__ import annotations

import mmap
import os
import re
import threading
from dataclasses import dataclass
from pathlib import Path

from lambdaserve.errors import InvalidInput

SHM_DIRECTORY = Path("/dev/shm")
_KEY = re.compile(r"/?[A-Za-z0-9._-]{1,200}")


@dataclass(frozen=True)
class Region:
    name: str
    key: str
    offset: int
    byte_size: int


@dataclass(frozen=True)
class RegionSlice:
    """Where a tensor lives: a registered region, from ``offset`` for ``byte_size`` bytes."""

    region: str
    byte_size: int
    offset: int = 0


class SystemSharedMemory:
    """The registered regions of this process, each mapped once."""

    def __init__(self, directory: Path = SHM_DIRECTORY) -> None:
        self._directory = directory
        self._regions: dict[str, tuple[Region, mmap.mmap]] = {}
        self._lock = threading.Lock()

    def register(self, name: str, key: str, offset: int, byte_size: int) -> None:
        with self._lock:
            if name in self._regions:
                raise InvalidInput(f"shared memory region '{name}' already in manager")
            if any(region.key == key for region, _ in self._regions.values()):
                raise InvalidInput(
                    f'registering an active shared memory key, "{key}", under a different '
                    "name is not currently supported"
                )
            self._regions[name] = (
                Region(name, key, offset, byte_size),
                self._map(name, key, offset, byte_size),
            )

    def _map(self, name: str, key: str, offset: int, byte_size: int) -> mmap.mmap:
        if not _KEY.fullmatch(key) or key.strip("/") in ("", ".", ".."):
            raise InvalidInput(f"Unable to open shared memory region: '{key}'")
        try:
            descriptor = os.open(self._directory / key.lstrip("/"), os.O_RDWR)
        except OSError:
            raise InvalidInput(f"Unable to open shared memory region: '{key}'") from None
        try:
            size = os.fstat(descriptor).st_size
            if offset < 0 or byte_size < 0 or offset + byte_size > size:
                raise InvalidInput(
                    f"failed to register shared memory region '{name}': invalid args"
                )
            # mapped from the file's start: an mmap offset must be page-aligned, a region's need not
            return mmap.mmap(descriptor, offset + byte_size)
        finally:
            os.close(descriptor)

    def unregister(self, name: str = "") -> None:
        """Region ``name`` (every region when empty) unmapped; an unknown name is no error."""
        with self._lock:
            names = [name] if name else list(self._regions)
            for each in names:
                found = self._regions.pop(each, None)
                if found is not None:
                    found[1].close()

    def status(self, name: str = "") -> list[Region]:
        with self._lock:
            if not name:
                return [region for region, _ in self._regions.values()]
            if name not in self._regions:
                raise InvalidInput(f"Unable to find system shared memory region: '{name}'")
            return [self._regions[name][0]]

    def read(self, where: RegionSlice) -> bytes:
        """A copy of the slice's bytes (the client may reuse the region at once)."""
        region, mapping = self._slice(where)
        start = region.offset + where.offset
        return bytes(mapping[start : start + where.byte_size])

    def write(self, where: RegionSlice, data: bytes | memoryview, output: str) -> None:
        region, mapping = self._slice(where)
        if len(data) > where.byte_size:
            raise InvalidInput(
                f"shared memory size specified with the request for output '{output}' "
                f"({where.byte_size} bytes) should be at least {len(data)} bytes to hold "
                "the results"
            )
        start = region.offset + where.offset
        mapping[start : start + len(data)] = bytes(data)

    def _slice(self, where: RegionSlice) -> tuple[Region, mmap.mmap]:
        with self._lock:
            found = self._regions.get(where.region)
        if found is None:
            raise InvalidInput(f"Unable to find shared memory region: '{where.region}'")
        region, mapping = found
        # Triton's two checks (shared_memory_manager.cc), in its words: the offset, then
        # offset + byte size
        if where.offset < 0 or where.offset > max(region.byte_size - 1, 0):
            raise InvalidInput(f"Invalid offset for shared memory region: '{where.region}'")
        if where.offset + where.byte_size > region.byte_size:
            raise InvalidInput(
                f"Invalid offset + byte size for shared memory region: '{where.region}'"
            )
        return region, mapping


def region_slice(parameters: dict[str, object], where: str) -> RegionSlice | None:
    """A tensor's ``shared_memory_region`` parameters (Triton's), or None when it has none."""
    name = parameters.get("shared_memory_region")
    if name is None:
        return None
    size = parameters.get("shared_memory_byte_size")
    offset = parameters.get("shared_memory_offset", 0)
    if not isinstance(name, str) or not name:
        raise InvalidInput(f"{where}: shared_memory_region must be a region's name")
    if not isinstance(size, int) or isinstance(size, bool) or size < 0:
        raise InvalidInput(f"{where}: shared_memory_byte_size must be given, in bytes")
    if not isinstance(offset, int) or isinstance(offset, bool) or offset < 0:
        raise InvalidInput(f"{where}: shared_memory_offset must be a byte offset")
    return RegionSlice(name, size, offset)


def no_shared_memory(where: str) -> InvalidInput:
    """A tensor in shared memory where this server shares none with its clients."""
    return InvalidInput(
        f"{where} is in shared memory, which this server does not share with its clients "
        "(Lambda, or a serve task behind a load balancer): send the tensor in the request "
        "(binary tensors are the compact form)"
    )
