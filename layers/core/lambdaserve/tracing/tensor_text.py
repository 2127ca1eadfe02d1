"""A tensor as Triton's TENSORS trace level writes it: its values comma-separated in one
string (floats as C++ streams them, six significant digits; BYTES elements quoted; FP16 and
BF16 left empty, as Triton leaves them), its shape "1,16" and Triton's datatype name."""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from lambdaserve.errors import InvalidInput
from lambdaserve.tensors.encoding import v2_datatype


def tensor_record(trace_id: int, activity: str, name: str, array: np.ndarray[Any, Any]) -> str:
    try:
        dtype = v2_datatype(array)
    except InvalidInput:  # a trace never fails its request
        dtype = str(array.dtype)
    record = {
        "id": trace_id,
        "activity": activity,
        "tensor": {
            "name": name,
            "data": _data(array, dtype),
            "shape": ",".join(str(d) for d in array.shape),
            "dtype": dtype,
        },
    }
    return json.dumps(record, separators=(",", ":"))


def _data(array: np.ndarray[Any, Any], dtype: str) -> str:
    flat = array.reshape(-1)
    if dtype in ("FP16", "BF16"):
        return ""
    if dtype == "BYTES":
        return ",".join(f'"{_text(v)}"' for v in flat)
    if dtype == "BOOL":
        return ",".join("1" if v else "0" for v in flat)
    if dtype in ("FP32", "FP64"):
        return ",".join(format(float(v), "g") for v in flat)
    return ",".join(str(int(v)) for v in flat)


def _text(value: object) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)
