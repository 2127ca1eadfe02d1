"""The rest of ``triton_python_backend_utils`` as Python models use it: BYTES tensor
(de)serialization, type names, ``Logger`` and custom metrics (``MetricFamily``), written from
the module's public behaviour. ``pb_utils`` re-exports these names."""

from __future__ import annotations

import logging
import struct
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from lambdaserve.metrics.custom import COUNTER, CUSTOM_METRICS, GAUGE, HISTOGRAM, CustomMetrics

_logger = logging.getLogger("lambdaserve.python_model")

# Triton's data type enum (TRITONSERVER_DataType) as python_backend numbers it: what
# numpy_to_triton_type answers and triton_to_numpy_type reads
_TRITON_TYPE_NUMBERS: dict[Any, int] = {
    np.bool_: 1,
    np.uint8: 2,
    np.uint16: 3,
    np.uint32: 4,
    np.uint64: 5,
    np.int8: 6,
    np.int16: 7,
    np.int32: 8,
    np.int64: 9,
    np.float16: 10,
    np.float32: 11,
    np.float64: 12,
    np.object_: 13,
    np.bytes_: 13,
}
_NUMPY_OF_NUMBER = {number: kind for kind, number in _TRITON_TYPE_NUMBERS.items()}
_NUMPY_OF_NUMBER[13] = np.object_

# The config's type names as python_backend maps them (``TYPE_STRING`` is an object array)
TRITON_STRING_TO_NUMPY: dict[str, Any] = {
    "TYPE_BOOL": bool,
    "TYPE_UINT8": np.uint8,
    "TYPE_UINT16": np.uint16,
    "TYPE_UINT32": np.uint32,
    "TYPE_UINT64": np.uint64,
    "TYPE_INT8": np.int8,
    "TYPE_INT16": np.int16,
    "TYPE_INT32": np.int32,
    "TYPE_INT64": np.int64,
    "TYPE_FP16": np.float16,
    "TYPE_FP32": np.float32,
    "TYPE_FP64": np.float64,
    "TYPE_STRING": np.object_,
}

# A request's release flags (python_backend's set_release_flags)
TRITONSERVER_REQUEST_RELEASE_ALL = 1
TRITONSERVER_REQUEST_RELEASE_RESCHEDULE = 2


class TritonModelException(Exception):
    """Raised by pb_utils calls that fail inside a model."""

    def message(self) -> str:
        return str(self)


def serialize_byte_tensor(input_tensor: np.ndarray[Any, Any]) -> Any:
    """Triton's wire form of a BYTES tensor: each element as a 4-byte little-endian length
    and its bytes, in C order, as one object element."""
    if input_tensor.size == 0:
        return ()
    if input_tensor.dtype != np.object_ and input_tensor.dtype.type != np.bytes_:
        raise TritonModelException("cannot serialize bytes tensor: invalid datatype")
    parts = []
    for element in input_tensor.reshape(-1):
        item = element.item() if isinstance(element, np.generic) else element
        raw = item if isinstance(item, bytes) else str(item).encode("utf-8")
        parts += [struct.pack("<I", len(raw)), raw]
    return np.asarray(b"".join(parts), dtype=np.object_)


def deserialize_bytes_tensor(encoded_tensor: bytes) -> np.ndarray[Any, Any]:
    """The elements of a serialized BYTES tensor, as a 1-D object array of bytes."""
    strings, offset = [], 0
    buffer = bytes(encoded_tensor)
    while offset < len(buffer):
        (length,) = struct.unpack_from("<I", buffer, offset)
        offset += 4
        strings.append(buffer[offset : offset + length])
        offset += length
    return np.array(strings, dtype=np.object_)


def numpy_to_triton_type(data_type: Any) -> int | None:
    """``np.float32`` -> ``11`` (Triton's TYPE_FP32 number), None for a type Triton lacks."""
    try:
        return _TRITON_TYPE_NUMBERS.get(np.dtype(data_type).type)
    except TypeError:
        return None


def triton_to_numpy_type(data_type: int) -> Any:
    """``11`` -> ``np.float32``: the inverse of numpy_to_triton_type (None if unknown)."""
    return _NUMPY_OF_NUMBER.get(data_type)


def using_decoupled_model_transaction_policy(model_config: dict[str, Any]) -> bool:
    """Whether the config (``json.loads(args["model_config"])``) declares the model decoupled,
    as python_backend's decoupled examples check in ``initialize``."""
    policy = model_config.get("model_transaction_policy") or {}
    return bool(policy.get("decoupled", False))


def load_model(model_name: str, config: str = "", files: dict[str, bytes] | None = None) -> None:
    """Triton loads models from a model only in explicit model-control mode; here the catalog
    changes only through the bucket and the management API, never from model code."""
    raise TritonModelException(
        f"load_model({model_name!r}) from a model is not supported: model code never "
        "changes the catalog here; upload the model under models/ or call "
        f"POST /v2/repository/models/{model_name}/load on the management API"
    )


def unload_model(model_name: str, unload_dependents: bool = False) -> None:
    """As load_model: the catalog changes only through the bucket and the management API."""
    raise TritonModelException(
        f"unload_model({model_name!r}) from a model is not supported: model code never "
        "changes the catalog here; call POST /v2/repository/models/"
        f"{model_name}/unload on the management API"
    )


TRITONSERVER_RESPONSE_COMPLETE_FINAL = 1


class TritonError(Exception):
    """An error a model reports in a response (or raises)."""

    UNKNOWN, INTERNAL, NOT_FOUND, INVALID_ARG, UNAVAILABLE, UNSUPPORTED, ALREADY_EXISTS = range(7)
    CANCELLED = 7

    def __init__(self, message: str, code: int = 1) -> None:
        super().__init__(message)
        self._message = message
        self._code = code

    def message(self) -> str:
        return self._message

    def code(self) -> int:
        return self._code


class InferenceResponseSender:
    """A decoupled model's way to answer: any number of ``send(response)``, the last one
    with ``flags=TRITONSERVER_RESPONSE_COMPLETE_FINAL`` (its response may be None)."""

    def __init__(self, deliver: Callable[[Any, int], None]) -> None:
        self._deliver = deliver
        self._closed = False

    def send(self, response: Any = None, flags: int = 0) -> None:
        if self._closed:
            raise TritonModelException("the response sender was closed by a final flag")
        if flags & TRITONSERVER_RESPONSE_COMPLETE_FINAL:
            self._closed = True
        elif response is None:
            raise TritonModelException("send needs a response unless flags is FINAL")
        self._deliver(response, flags)

    def is_cancelled(self) -> bool:
        return False


class Logger:
    """``pb_utils.Logger``: a model's log lines, in the server's log."""

    INFO, WARNING, ERROR, VERBOSE = 0, 1, 2, 3

    @staticmethod
    def log(message: str, level: int = 0) -> None:
        levels = {0: logging.INFO, 1: logging.WARNING, 2: logging.ERROR, 3: logging.DEBUG}
        _logger.log(levels.get(level, logging.INFO), "%s", message)

    @staticmethod
    def log_info(message: str) -> None:
        _logger.info("%s", message)

    @staticmethod
    def log_warn(message: str) -> None:
        _logger.warning("%s", message)

    @staticmethod
    def log_error(message: str) -> None:
        _logger.error("%s", message)

    @staticmethod
    def log_verbose(message: str) -> None:
        _logger.debug("%s", message)


class Metric:
    """One labelled series of a ``MetricFamily``."""

    def __init__(self, family: MetricFamily, labels: dict[str, str]) -> None:
        self._family = family
        self._labels = {str(k): str(v) for k, v in labels.items()}
        self._value = 0.0

    def increment(self, value: float) -> None:
        if self._family.kind == COUNTER and value < 0:
            raise TritonModelException("a counter cannot be decremented")
        self._value += value
        self._record(value if self._family.kind == COUNTER else self._value)

    def set(self, value: float) -> None:
        if self._family.kind != GAUGE:
            raise TritonModelException("only a gauge can be set")
        self._value = value
        self._record(value)

    def observe(self, value: float) -> None:
        if self._family.kind != HISTOGRAM:
            raise TritonModelException("only a histogram observes")
        self._record(value)

    def value(self) -> float:
        return self._value

    def _record(self, value: float) -> None:
        family = self._family
        family.store.record(
            family.name,
            kind=family.kind,
            unit="",
            labels=sorted(self._labels),
            values=[self._labels[k] for k in sorted(self._labels)],
            value=value,
            description=family.description,
            own_name=True,  # Triton writes a MetricFamily counter's samples without _total
        )


class MetricFamily:
    """``pb_utils.MetricFamily(name, description, kind)``: custom metrics on ``/metrics``."""

    COUNTER, GAUGE, HISTOGRAM = COUNTER, GAUGE, HISTOGRAM

    def __init__(
        self, name: str, description: str, kind: str, store: CustomMetrics = CUSTOM_METRICS
    ) -> None:
        if kind not in (COUNTER, GAUGE, HISTOGRAM):
            raise TritonModelException(f"unknown metric kind {kind!r}")
        self.name, self.description, self.kind, self.store = name, description, kind, store

    def Metric(
        self, labels: dict[str, str] | None = None, buckets: list[float] | None = None
    ) -> Metric:
        return Metric(self, labels or {})


# Where a BLS response's tensors should live (python_backend's TRITONSERVER_MEMORY_*): here
# every tensor is in CPU memory, which is what a model asking for the CPU gets; a GPU
# preference is taken as a hint, as Triton takes it where the output is already on the CPU.
TRITONSERVER_MEMORY_CPU = 0
TRITONSERVER_MEMORY_CPU_PINNED = 1
TRITONSERVER_MEMORY_GPU = 2


class PreferredMemory:
    """``pb_utils.PreferredMemory(TRITONSERVER_MEMORY_CPU, 0)`` for a BLS request."""

    def __init__(self, preferred_memory_type: int, preferred_device_id: int = 0) -> None:
        self.preferred_memory_type = preferred_memory_type
        self.preferred_device_id = preferred_device_id


class InferenceTrace:
    """``request.trace()``: Triton's trace context of the request; none is kept here."""

    def get_context(self) -> str | None:
        return None


class ResponseIterator:
    """What ``exec(decoupled=True)`` returns: the called model's responses, in order;
    ``cancel()`` stops reading them (the rest are dropped)."""

    def __init__(self, responses: Iterator[Any]) -> None:
        self._responses = responses

    def __iter__(self) -> ResponseIterator:
        return self

    def __next__(self) -> Any:
        return next(self._responses)

    def cancel(self) -> None:
        close = getattr(self._responses, "close", None)
        if close is not None:
            close()
