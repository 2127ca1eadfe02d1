from __future__ import annotations

import numpy as np
import pytest

from lambdaserve.errors import InvalidInput
from lambdaserve.tensors import encoding

SAMPLES = {
    "BOOL": np.array([[True, False, True]]),
    "UINT8": np.array([[0, 7, 255]], np.uint8),
    "INT8": np.array([[-128, 0, 127]], np.int8),
    "INT32": np.array([[-5, 0, 2**31 - 1]], np.int32),
    "INT64": np.array([[-(2**40), 0, 2**40]], np.int64),
    "UINT64": np.array([[0, 1, 2**63]], np.uint64),
    "FP16": np.array([[0.5, -1.25, 2.0]], np.float16),
    "FP32": np.array([[0.1, -2.5, 3e8]], np.float32),
    "FP64": np.array([[0.1, -2.5, 3e300]], np.float64),
    "BYTES": np.array([[b"cat", "d\xf6g".encode(), b""]], dtype=object),
}


@pytest.mark.parametrize("datatype", list(SAMPLES))
def test_json_round_trip_per_datatype(datatype):
    array = SAMPLES[datatype]
    decoded = encoding.from_json("x", datatype, array.shape, encoding.to_json(array))
    assert encoding.v2_datatype(decoded) == datatype
    assert decoded.tolist() == array.tolist()


@pytest.mark.parametrize("datatype", list(SAMPLES))
def test_binary_round_trip_per_datatype(datatype):
    array = SAMPLES[datatype]
    blob = bytes(encoding.to_binary(array))
    decoded = encoding.from_binary("x", datatype, array.shape, memoryview(blob))
    assert decoded.tolist() == array.tolist()


def test_binary_numbers_are_zero_copy_views_of_the_body():
    body = bytearray(np.arange(12, dtype=np.float32).tobytes())
    decoded = encoding.from_binary("x", "FP32", (3, 4), memoryview(body))
    assert np.shares_memory(decoded, np.frombuffer(body, np.uint8))


def test_bytes_use_tritons_length_prefix():
    assert bytes(encoding.to_binary(np.array([b"ab", b"c"], dtype=object))) == (
        b"\x02\x00\x00\x00ab\x01\x00\x00\x00c"
    )


def test_nested_and_flat_json_data_are_both_accepted():
    flat = encoding.from_json("x", "INT32", (2, 2), [1, 2, 3, 4])
    nested = encoding.from_json("x", "INT32", (2, 2), [[1, 2], [3, 4]])
    assert flat.tolist() == nested.tolist() == [[1, 2], [3, 4]]


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: encoding.from_json("x", "INT64", (1,), ["a"]), "data is not INT64"),
        (lambda: encoding.from_json("x", "FP31", (1,), [1]), "unsupported datatype 'FP31'"),
        (lambda: encoding.from_binary("x", "FP32", (2,), memoryview(b"\0" * 7)), "needs 8 bytes"),
        (
            lambda: encoding.from_binary("x", "BYTES", (1,), memoryview(b"\x09\0\0\0ab")),
            "runs past",
        ),
        (lambda: encoding.check_shape("x", [2, -1]), "non-negative integers"),
        # Triton's words for shapes past 64 bits (its qa test_buffer_size_overflow)
        (
            lambda: encoding.from_json("x", "FP32", (2**4, 2**60 + 2), [1.0]),
            "causes total element count to exceed maximum size of",
        ),
        (
            lambda: encoding.from_json("x", "FP32", (2**2, 2**60 + 2), [1.0]),
            "byte size overflow for input 'x'",
        ),
    ],
)
def test_errors_name_the_tensor_and_say_what_is_wrong(call, message):
    with pytest.raises(InvalidInput, match=message) as error:
        call()
    assert "'x'" in error.value.message


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ([1, 2, 3], "Failed to parse 'data' field: shape does not match true shape"),
        (
            [1, 2, 3, 4, 5],
            "Unable to parse 'data': Shape does not match true shape of 'data' field",
        ),
    ],
)
def test_data_shorter_or_longer_than_the_shape_is_refused_in_tritons_exact_words(data, message):
    """Given FP32 data of 3 or 5 values for shape [2, 2]
    When it is decoded
    Then the message is Triton's alone: qa/L0_http's test.sh matches the whole body."""
    with pytest.raises(InvalidInput) as error:
        encoding.from_json("x", "FP32", (2, 2), data)
    assert error.value.message == message
