"""v2 datatypes <-> numpy, and the JSON and binary tensor codecs (KServe v2 / Triton).

Binary tensors are read with ``np.frombuffer`` (zero-copy views on the request body)
and written with ``memoryview`` of C-contiguous arrays. BYTES elements travel as a
4-byte little-endian length followed by the bytes, as Triton serializes them. BF16 is
``ml_dtypes.bfloat16`` (what tritonclient uses), imported only when a BF16 tensor appears.
"""

from __future__ import annotations

import functools
import struct
from collections.abc import Sequence
from typing import Any

import numpy as np
import orjson

from lambdaserve.errors import InvalidInput

_V2_TO_NUMPY: dict[str, Any] = {
    "BOOL": np.bool_,
    "UINT8": np.uint8,
    "UINT16": np.uint16,
    "UINT32": np.uint32,
    "UINT64": np.uint64,
    "INT8": np.int8,
    "INT16": np.int16,
    "INT32": np.int32,
    "INT64": np.int64,
    "FP16": np.float16,
    "FP32": np.float32,
    "FP64": np.float64,
    "BF16": None,  # ml_dtypes.bfloat16, imported on first use
    "BYTES": np.object_,
}
_NUMPY_TO_V2 = {np.dtype(v): k for k, v in _V2_TO_NUMPY.items() if v is not None and k != "BYTES"}
MAX_RANK = 64  # numpy arrays have at most 64 dimensions
# Triton refuses a request whose JSON nests deeper than 100 levels; ``data`` sits 3 deep in
# it (the body, "inputs", the input object), so its lists may nest 97 deep
MAX_DATA_DEPTH = 100 - 3
_TOO_DEEP = "JSON nesting depth exceeds maximum allowed limit (100): flatten data"
_LENGTH = struct.Struct("<I")
_FLOATS = frozenset({"FP16", "FP32", "FP64", "BF16"})


def numpy_dtype(datatype: str, tensor: str | None = None) -> np.dtype[Any]:
    """The numpy dtype of a v2 datatype, or InvalidInput naming the supported ones."""
    try:
        dtype = _V2_TO_NUMPY[datatype]
        return bfloat16() if dtype is None else np.dtype(dtype)
    except KeyError:
        where = f"input {tensor!r}: " if tensor else ""
        raise InvalidInput(
            f"{where}unsupported datatype {datatype!r}; use one of {', '.join(_V2_TO_NUMPY)}"
        ) from None


@functools.cache
def bfloat16() -> np.dtype[Any]:
    import ml_dtypes

    dtype: np.dtype[Any] = np.dtype(ml_dtypes.bfloat16)
    return dtype


def v2_datatype(array: np.ndarray[Any, Any]) -> str:
    """The v2 datatype of a numpy array (object and string arrays are BYTES)."""
    known = _NUMPY_TO_V2.get(array.dtype)  # first: numpy computes ``dtype.name`` in Python
    if known is not None:
        return known
    if array.dtype.kind in ("O", "S", "U"):
        return "BYTES"
    if array.dtype.name == "bfloat16":
        return "BF16"
    raise InvalidInput(f"no v2 datatype for numpy {array.dtype}")


_UINT64_MAX = 2**64 - 1


def shape_fits(got: Sequence[int], expected: Sequence[int]) -> bool:
    """Whether a tensor of shape ``got`` fits a declared shape (-1: any size there)."""
    return len(got) == len(expected) and all(
        e in (-1, g) for g, e in zip(got, expected, strict=True)
    )


def element_count(shape: Sequence[int]) -> int:
    count = 1
    for dim in shape:
        count *= dim
    return count


def check_shape(name: str, shape: Any) -> tuple[int, ...]:
    if not isinstance(shape, list | tuple) or not all(
        isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape
    ):
        raise InvalidInput(f"input {name!r}: shape must be a list of non-negative integers")
    if len(shape) > MAX_RANK:
        raise InvalidInput(
            f"input {name!r}: shape has {len(shape)} dimensions; at most {MAX_RANK} are supported"
        )
    return tuple(shape)


def array_from_json(name: str, datatype: str, data: Any) -> np.ndarray[Any, Any]:
    """Nested JSON lists as a numeric or BOOL array shaped by their nesting (TF Serving's and
    Paddle's bodies, which carry no shape); 400 for ragged rows, nulls and non-numbers."""
    dtype = numpy_dtype(datatype, name)
    try:
        array = np.asarray(data, dtype=dtype)
    except (ValueError, TypeError, OverflowError) as exc:
        raise InvalidInput(
            f"input {name!r}: not a {datatype} tensor with rows of one shape: {exc}"
        ) from None
    # as in from_json: a NaN came from a null or a string, False may have come from a null
    if (datatype in _FLOATS and np.isnan(array).any()) or dtype.kind == "b":
        _check_elements(name, datatype, data)
    return array


def from_json(name: str, datatype: str, shape: tuple[int, ...], data: Any) -> np.ndarray[Any, Any]:
    """Decode a JSON ``data`` field (flat or nested, row-major) into an array of ``shape``."""
    dtype = numpy_dtype(datatype, name)
    _check_size(name, datatype, shape, dtype)
    try:
        if datatype == "BYTES":
            flat = np.array([_as_bytes(v) for v in _flatten(data)], dtype=object)
        else:
            flat = _numbers(name, data, dtype)
    except (ValueError, TypeError, OverflowError) as exc:
        raise InvalidInput(f"input {name!r}: data is not {datatype}: {exc}") from None
    # JSON has no NaN, so a NaN here came from a null or a string; False from a null too.
    if (datatype in _FLOATS and np.isnan(flat).any()) or dtype.kind == "b":
        _check_elements(name, datatype, data)
    expected = element_count(shape)
    if flat.size != expected:
        # Triton's exact texts: its qa/L0_http matches the whole {"error": ...} body
        raise InvalidInput(_SHORTER if flat.size < expected else _LONGER)
    return flat.reshape(shape)


# Triton's answers to ``data`` with fewer or more values than ``shape`` takes
_SHORTER = "Failed to parse 'data' field: shape does not match true shape"
_LONGER = "Unable to parse 'data': Shape does not match true shape of 'data' field"


def _numbers(name: str, data: Any, dtype: np.dtype[Any]) -> np.ndarray[Any, Any]:
    """A numeric ``data`` field as a flat array of ``dtype``."""
    depth = _check_nesting(name, data)
    if depth == 1 and dtype.kind in "fiu":
        # A flat list read element by element: half the time of ``np.asarray``, which first
        # scans the list for its shape and type. Where that fails, ``np.asarray`` decides, with
        # its own answer or error, as before.
        try:
            return np.fromiter(data, dtype=dtype, count=len(data))
        except (ValueError, TypeError, OverflowError):
            pass
    # nesting past numpy's 64 dimensions is flattened first, as Triton reads it
    return np.asarray(_flatten(data) if depth >= MAX_RANK else data, dtype=dtype).reshape(-1)


def _check_size(name: str, datatype: str, shape: tuple[int, ...], dtype: np.dtype[Any]) -> None:
    """A shape whose element count or byte size does not fit 64 bits, in Triton's words."""
    count = element_count(shape)
    if count > _UINT64_MAX:
        raise InvalidInput(
            f"input {name!r}: shape {list(shape)} causes total element count to exceed maximum "
            f"size of {_UINT64_MAX}"
        )
    if datatype != "BYTES" and count * dtype.itemsize > _UINT64_MAX:
        raise InvalidInput(
            f"input {name!r}: byte size overflow for input {name!r}: shape {list(shape)} of "
            f"{datatype} is {count * dtype.itemsize} bytes"
        )


def to_json(array: np.ndarray[Any, Any]) -> list[Any]:
    """Flatten an array for a JSON ``data`` field (BYTES as UTF-8 strings where they decode)."""
    if array.dtype.kind in ("O", "S", "U"):
        return [_as_text(v) for v in array.reshape(-1)]
    values: list[Any] = array.reshape(-1).tolist()
    return values


def from_binary(
    name: str, datatype: str, shape: tuple[int, ...], buffer: memoryview
) -> np.ndarray[Any, Any]:
    """Decode one binary tensor (Triton's binary data extension); zero-copy for numbers."""
    expected = element_count(shape)
    if datatype == "BYTES":
        return _bytes_from_binary(name, buffer, expected).reshape(shape)
    dtype = numpy_dtype(datatype, name)
    if len(buffer) != expected * dtype.itemsize:
        raise InvalidInput(
            f"input {name!r}: shape {list(shape)} of {datatype} needs "
            f"{expected * dtype.itemsize} bytes, binary_data_size is {len(buffer)}"
        )
    return np.frombuffer(buffer, dtype=dtype).reshape(shape)


def to_binary(array: np.ndarray[Any, Any]) -> bytes | memoryview:
    """Serialize an array for the binary extension (a view where no copy is needed)."""
    if array.dtype.kind in ("O", "S", "U"):
        parts = []
        for value in array.reshape(-1):
            raw = _as_bytes(value)
            parts.append(_LENGTH.pack(len(raw)))
            parts.append(raw)
        return b"".join(parts)
    contiguous = np.ascontiguousarray(array)
    if contiguous.dtype.kind == "V":  # bfloat16: the buffer protocol knows no such format
        contiguous = contiguous.view(np.uint8)
    return memoryview(contiguous).cast("B")  # type: ignore[arg-type]


def _bytes_from_binary(name: str, buffer: memoryview, expected: int) -> np.ndarray[Any, Any]:
    values: list[bytes] = []
    offset = 0
    while offset < len(buffer):
        if offset + 4 > len(buffer):
            raise InvalidInput(f"input {name!r}: truncated BYTES element length")
        (length,) = _LENGTH.unpack_from(buffer, offset)
        offset += 4
        if offset + length > len(buffer):
            raise InvalidInput(f"input {name!r}: BYTES element runs past binary_data_size")
        values.append(bytes(buffer[offset : offset + length]))
        offset += length
    if len(values) != expected:
        raise InvalidInput(f"input {name!r}: expected {expected} BYTES elements, got {len(values)}")
    return np.array(values, dtype=object)


def _flatten(data: Any, limit: int = MAX_DATA_DEPTH) -> list[Any]:
    """Row-major elements of nested lists at most ``limit`` deep (iteratively). As Triton's,
    the nesting need not follow the shape: ``[[["a"]]]`` is one element for shape [1]."""
    out: list[Any] = []
    stack: list[tuple[Any, int]] = [(data, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, list | tuple):
            if depth >= limit:
                raise ValueError(_TOO_DEEP)
            stack.extend((child, depth + 1) for child in reversed(item))
        else:
            out.append(item)
    return out


def _check_nesting(name: str, data: Any) -> int:
    """Triton's JSON depth limit on numeric data, along the first elements (cheap: a numeric
    tensor's rows are all as deep, or numpy refuses them as ragged)."""
    depth, item = 0, data
    while isinstance(item, list | tuple):
        depth += 1
        if depth > MAX_DATA_DEPTH:
            raise InvalidInput(f"input {name!r}: {_TOO_DEEP}")
        item = item[0] if item else None
    return depth


def _check_elements(name: str, datatype: str, data: Any) -> None:
    """Name the first element that is not a JSON number (or boolean for BOOL)."""
    try:
        elements = _flatten(data)
    except ValueError as exc:
        raise InvalidInput(f"input {name!r}: {exc}") from None
    for index, value in enumerate(elements):
        if datatype == "BOOL":
            ok = isinstance(value, bool)
        else:
            ok = isinstance(value, int | float) and not isinstance(value, bool)
        if not ok:
            wanted = "true or false" if datatype == "BOOL" else "a number"
            raise InvalidInput(
                f"input {name!r}: element {index} is {orjson.dumps(value).decode()}, not "
                f"{wanted} ({datatype}); JSON null is not a value"
            )


def _as_bytes(value: Any) -> bytes:
    if isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode("utf-8")
    if isinstance(value, np.bytes_ | np.str_):
        return _as_bytes(value.item())
    raise TypeError(f"{type(value).__name__} is not a string")


def _as_text(value: Any) -> Any:
    raw = _as_bytes(value)
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return list(raw)
