"""``triton_python_backend_utils`` as Triton's Python models import it (``pb_utils``).

Written from the module's public behaviour: tensors wrap numpy arrays (BYTES as object
arrays of bytes), a request carries input tensors, a response output tensors or an error,
and a BLS request (``InferenceRequest(model_name=..., ...).exec()``) calls another model
of the catalog in this process, through the same resolution, cache and runtimes as HTTP.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator, Sequence
from contextvars import ContextVar
from typing import Any

import numpy as np

from lambdaserve.config.model_config import v2_datatype_of
from lambdaserve.errors import LambdaServeError
from lambdaserve.runtimes import model_calls
from lambdaserve.runtimes.op_threads import within
from lambdaserve.runtimes.triton_python.auto_complete_config import ModelConfig
from lambdaserve.runtimes.triton_python.pb_utils_support import (
    TRITON_STRING_TO_NUMPY,
    TRITONSERVER_MEMORY_CPU,
    TRITONSERVER_MEMORY_CPU_PINNED,
    TRITONSERVER_MEMORY_GPU,
    TRITONSERVER_REQUEST_RELEASE_ALL,
    TRITONSERVER_REQUEST_RELEASE_RESCHEDULE,
    TRITONSERVER_RESPONSE_COMPLETE_FINAL,
    InferenceResponseSender,
    InferenceTrace,
    Logger,
    MetricFamily,
    PreferredMemory,
    ResponseIterator,
    TritonError,
    TritonModelException,
    deserialize_bytes_tensor,
    load_model,
    numpy_to_triton_type,
    serialize_byte_tensor,
    triton_to_numpy_type,
    unload_model,
    using_decoupled_model_transaction_policy,
)
from lambdaserve.tensors.encoding import numpy_dtype

__all__ = [
    "TRITONSERVER_MEMORY_CPU",
    "TRITONSERVER_MEMORY_CPU_PINNED",
    "TRITONSERVER_MEMORY_GPU",
    "TRITONSERVER_REQUEST_RELEASE_ALL",
    "TRITONSERVER_REQUEST_RELEASE_RESCHEDULE",
    "TRITONSERVER_RESPONSE_COMPLETE_FINAL",
    "TRITON_STRING_TO_NUMPY",
    "InferenceResponseSender",
    "InferenceTrace",
    "Logger",
    "MetricFamily",
    "ModelConfig",
    "PreferredMemory",
    "ResponseIterator",
    "TritonError",
    "TritonModelException",
    "deserialize_bytes_tensor",
    "load_model",
    "numpy_to_triton_type",
    "serialize_byte_tensor",
    "triton_to_numpy_type",
    "unload_model",
    "using_decoupled_model_transaction_policy",
]

TRITONSERVER_REQUEST_FLAG_SEQUENCE_START = 1
TRITONSERVER_REQUEST_FLAG_SEQUENCE_END = 2


# The model directory of the Python model being called (get_model_dir).
_model_dir: ContextVar[str] = ContextVar("model_dir", default="")


class Tensor:
    """A named tensor over a numpy array."""

    def __init__(self, name: str, array: Any) -> None:
        if not isinstance(array, np.ndarray):
            raise TritonModelException(
                f"Tensor {name!r} needs a numpy array, got {type(array).__name__}"
            )
        self._name = name
        self._array = array

    def name(self) -> str:
        return self._name

    def as_numpy(self) -> np.ndarray[Any, Any]:
        return self._array

    def shape(self) -> list[int]:
        return list(self._array.shape)

    def triton_dtype(self) -> int | None:
        """Triton's number for the tensor's type (``11`` for FP32), as python_backend's."""
        return numpy_to_triton_type(self._array.dtype)

    def is_cpu(self) -> bool:
        return True

    def __dlpack__(self, stream: Any = None) -> Any:
        return self._array.__dlpack__()

    def __dlpack_device__(self) -> tuple[int, int]:
        return self._array.__dlpack_device__()

    def to_dlpack(self) -> Any:
        """A DLPack capsule over the tensor's memory (torch.from_dlpack reads it)."""
        return self._array.__dlpack__()

    @classmethod
    def from_dlpack(cls, name: str, dlpack: Any) -> Tensor:
        """A tensor over another framework's memory: an object with ``__dlpack__`` (a
        torch tensor, a numpy array) or a DLPack capsule."""
        if hasattr(dlpack, "__dlpack__"):
            return cls(name, np.from_dlpack(dlpack))
        try:
            import torch.utils.dlpack
        except ImportError:
            raise TritonModelException(
                "Tensor.from_dlpack got a bare DLPack capsule; pass the tensor itself "
                "(anything with __dlpack__), or install torch to read capsules"
            ) from None
        return cls(name, torch.utils.dlpack.from_dlpack(dlpack).cpu().numpy())


class InferenceResponse:
    def __init__(
        self,
        output_tensors: Sequence[Tensor] | None = None,
        error: TritonError | None = None,
        parameters: dict[str, Any] | str | None = None,
    ) -> None:
        self._outputs = list(output_tensors or [])
        self._error = error
        self._parameters = parameters or {}

    def output_tensors(self) -> list[Tensor]:
        return self._outputs

    def has_error(self) -> bool:
        return self._error is not None

    def error(self) -> TritonError | None:
        return self._error

    def parameters(self) -> str:
        value = self._parameters
        return value if isinstance(value, str) else json.dumps(value)


class InferenceRequest:
    """A request handed to ``execute``, or a BLS request a model sends to another model."""

    def __init__(  # noqa: PLR0917 (Triton's signature, positional as its users call it)
        self,
        model_name: str = "",
        inputs: Sequence[Tensor] | None = None,
        requested_output_names: Sequence[str] | None = None,
        model_version: int = -1,
        request_id: str = "",
        correlation_id: int | str = 0,
        flags: int = 0,
        timeout: int = 0,
        parameters: dict[str, Any] | str | None = None,
        preferred_memory: PreferredMemory | None = None,
        **_: Any,
    ) -> None:
        # a model name read from a STRING tensor arrives as bytes (Triton's bls example)
        self.model_name = model_name.decode() if isinstance(model_name, bytes) else model_name
        self._inputs = list(inputs or [])
        self._requested = list(requested_output_names or [])
        self.model_version = model_version
        self._request_id = request_id
        self._correlation_id = correlation_id
        self._flags = flags
        self._parameters = parameters or {}
        self._sender: InferenceResponseSender | None = None
        self._release_flags = TRITONSERVER_REQUEST_RELEASE_ALL
        # microseconds, as Triton's: a BLS call not answered by then answers with an error
        self._timeout = timeout
        self.preferred_memory = preferred_memory or PreferredMemory(TRITONSERVER_MEMORY_CPU)

    def get_response_sender(self) -> InferenceResponseSender:
        """The sender of a decoupled model's responses to this request."""
        if self._sender is None:
            raise TritonModelException(
                "get_response_sender is for decoupled models: set model_transaction_policy "
                "{ decoupled: true } in the model's config"
            )
        return self._sender

    def inputs(self) -> list[Tensor]:
        return self._inputs

    def requested_output_names(self) -> list[str]:
        return self._requested

    def request_id(self) -> str:
        return self._request_id

    def correlation_id(self) -> int | str:
        return self._correlation_id

    def flags(self) -> int:
        return self._flags

    def set_flags(self, flags: int) -> None:
        self._flags = flags

    def timeout(self) -> int:
        """The request's timeout in microseconds (0: none)."""
        return self._timeout

    def trace(self) -> InferenceTrace:
        return InferenceTrace()

    def is_cancelled(self) -> bool:
        return False

    def set_release_flags(self, flags: int) -> None:
        """RELEASE_ALL (the default) only: rescheduling a request back into the model
        (Triton's iterative sequences) has no scheduler to go back to here."""
        if flags & TRITONSERVER_REQUEST_RELEASE_RESCHEDULE:
            raise TritonModelException(
                "set_release_flags(TRITONSERVER_REQUEST_RELEASE_RESCHEDULE) is not supported: "
                "requests are not rescheduled; answer each request within execute"
            )
        self._release_flags = flags

    def parameters(self) -> str:
        value = self._parameters
        return value if isinstance(value, str) else json.dumps(value)

    def exec(self, decoupled: bool = False) -> Any:
        """BLS: run this request on ``model_name`` in this process; with ``decoupled=True``
        an iterator of every response the model sends (a decoupled model's many)."""
        calls = model_calls.current()
        if calls is None:
            raise TritonModelException("BLS requests run only inside a serving process")
        if not self.model_name:
            raise TritonModelException("a BLS request needs model_name")
        if decoupled:
            return ResponseIterator(self._responses(calls))
        if self._timeout > 0:
            try:
                return within(self._timeout / 1e6, self._response, calls)
            except TimeoutError:
                return InferenceResponse(
                    error=TritonError("Request timeout expired", TritonError.UNAVAILABLE)
                )
        return self._response(calls)

    def _response(self, calls: model_calls.ModelCalls) -> InferenceResponse:
        try:
            outputs = calls.infer(
                *self._call(),
                timeout_us=self._timeout,
                parameters=self._given_parameters(),
                request_id=self._request_id,
            )
        except LambdaServeError as exc:
            return InferenceResponse(error=TritonError(exc.message))
        return InferenceResponse([Tensor(n, a) for n, a in outputs.items()])

    def _responses(self, calls: model_calls.ModelCalls) -> Iterator[InferenceResponse]:
        """Every response, then (as Triton) an empty final one."""
        try:
            for outputs in calls.stream(*self._call()):
                yield InferenceResponse([Tensor(n, a) for n, a in outputs.items()])
        except LambdaServeError as exc:
            yield InferenceResponse(error=TritonError(exc.message))
        yield InferenceResponse()

    def _given_parameters(self) -> dict[str, Any]:
        """The parameters given for the model called (Triton takes a dict or its JSON)."""
        value = self._parameters
        given = json.loads(value) if isinstance(value, str) and value else value
        if not isinstance(given, dict):
            raise TritonModelException("a BLS request's parameters must be a dict (or its JSON)")
        return given

    def _call(self) -> tuple[str, int | None, dict[str, np.ndarray[Any, Any]], list[str]]:
        """The model, its version (None: the default one), the inputs, the outputs wanted."""
        version = self.model_version if self.model_version > 0 else None
        inputs = {t.name(): t.as_numpy() for t in self._inputs}
        return self.model_name, version, inputs, self._requested

    async def async_exec(self, decoupled: bool = False) -> Any:
        return await asyncio.get_running_loop().run_in_executor(None, self.exec, decoupled)


def get_input_tensor_by_name(request: InferenceRequest, name: str) -> Tensor | None:
    return next((t for t in request.inputs() if t.name() == name), None)


def get_output_tensor_by_name(response: InferenceResponse, name: str) -> Tensor | None:
    return next((t for t in response.output_tensors() if t.name() == name), None)


def get_input_config_by_name(model_config: dict[str, Any], name: str) -> dict[str, Any] | None:
    return next((t for t in model_config.get("input", []) if t.get("name") == name), None)


def get_output_config_by_name(model_config: dict[str, Any], name: str) -> dict[str, Any] | None:
    return next((t for t in model_config.get("output", []) if t.get("name") == name), None)


def triton_string_to_numpy(triton_type: str) -> Any:
    """``TYPE_FP32`` -> ``np.float32``; ``TYPE_STRING`` -> ``np.object_`` (bytes)."""
    try:
        return numpy_dtype(v2_datatype_of(triton_type)).type
    except (KeyError, LambdaServeError):
        raise TritonModelException(f"unknown Triton data type {triton_type!r}") from None


def get_model_dir() -> str:
    return _model_dir.get()


def is_model_ready(model_name: str, model_version: str = "") -> bool:
    """Whether the model (the version, if given) is READY to serve BLS requests."""
    calls = model_calls.current()
    if calls is None:
        raise TritonModelException("is_model_ready works only inside a serving process")
    name = model_name.decode() if isinstance(model_name, bytes) else model_name
    try:
        version = int(model_version) if str(model_version) else None
    except ValueError:
        return False
    return calls.ready(name, version)
