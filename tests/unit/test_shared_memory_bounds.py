"""A tensor's place in a registered system shared memory region is checked as Triton checks it
(shared_memory_manager.cc): the offset first, then offset + byte size, each in Triton's words."""

from __future__ import annotations

from pathlib import Path

import pytest

from lambdaserve.errors import InvalidInput
from lambdaserve.tensors.shared_memory import RegionSlice, SystemSharedMemory


@pytest.fixture
def memory(tmp_path: Path) -> SystemSharedMemory:
    # Given a 64-byte file with a 32-byte region registered 16 bytes in
    (tmp_path / "shm_file").write_bytes(bytes(range(64)))
    regions = SystemSharedMemory(tmp_path)
    regions.register("output_data", "/shm_file", 16, 32)
    return regions


def test_a_slice_within_the_region_is_read_from_the_regions_start(memory):
    assert memory.read(RegionSlice("output_data", 4, offset=28)) == bytes(range(44, 48))


@pytest.mark.parametrize(
    ("offset", "byte_size", "said"),
    [
        (32, 1, "Invalid offset for shared memory region: 'output_data'"),
        (-1, 4, "Invalid offset for shared memory region: 'output_data'"),
        (0, 33, "Invalid offset + byte size for shared memory region: 'output_data'"),
        (29, 4, "Invalid offset + byte size for shared memory region: 'output_data'"),
    ],
)
def test_an_out_of_bounds_slice_is_refused_in_tritons_words(memory, offset, byte_size, said):
    with pytest.raises(InvalidInput) as refused:
        memory.read(RegionSlice("output_data", byte_size, offset=offset))
    assert refused.value.message == said
    with pytest.raises(InvalidInput, match="Invalid offset"):
        memory.write(RegionSlice("output_data", byte_size, offset=offset), b"", "OUTPUT0")
