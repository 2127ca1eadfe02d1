"""The shared areas tensors cross between the serving process and a worker."""

from __future__ import annotations

import numpy as np

from lambdaserve.workers.shared_area import Area


def test_tensors_cross_a_shared_area_and_the_reader_follows_its_growth(tmp_path):
    """Given a writer's area of 64 bytes and a reader mapping the same file,
    When tensors of several dtypes (BYTES among them) that need more room are written,
    Then the writer grows the file and the reader remaps it and reads equal copies."""
    path = tmp_path / "area"
    writer = Area.create(path, 64)
    reader = Area.open(path)
    arrays = [
        ("f", np.arange(12, dtype=np.float32).reshape(3, 4)),
        ("i", np.array([[-1, 2**40]], dtype=np.int64)),
        ("b", np.array([True, False])),
        ("s", np.array([[b"", b"\x00x"], [b"long " * 50, "\u00e9t\u00e9".encode()]], dtype=object)),
        ("h", np.ones((2, 2), np.float16)[:, :1]),  # not contiguous
        ("e", np.zeros((0, 3), np.uint8)),
    ]
    descriptors, end = writer.write_tensors(arrays, 0)
    assert end > 64 and writer.size >= end

    got = reader.read_tensors(descriptors)

    assert reader.size >= end
    for name, array in arrays:
        assert got[name].dtype == array.dtype and got[name].shape == array.shape
        assert got[name].tolist() == array.tolist()
    writer.write_tensors([("f", np.full((3, 4), 7, np.float32))], 0)
    assert got["f"].tolist() == arrays[0][1].tolist()  # copies: the next write leaves them be
    writer.close()
    reader.close()
