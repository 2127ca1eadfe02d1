"""ONNX Runtime backend."""

from __future__ import annotations

import ctypes
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort

from lambdaserve.config.model_config import ModelConfig
from lambdaserve.config.runtime_names import ONNX_RUNTIME, RuntimeName
from lambdaserve.errors import InferenceError, ModelRejected, first_line
from lambdaserve.runtimes.base import LoadOptions, wants_gpu
from lambdaserve.tensors.encoding import bfloat16
from lambdaserve.tensors.signature import Arrays, Signature, TensorSpec

_ONNX_BFLOAT16 = 16  # onnx.TensorProto.BFLOAT16
_ORT_TO_V2 = {
    "tensor(bool)": "BOOL",
    "tensor(uint8)": "UINT8",
    "tensor(uint16)": "UINT16",
    "tensor(uint32)": "UINT32",
    "tensor(uint64)": "UINT64",
    "tensor(int8)": "INT8",
    "tensor(int16)": "INT16",
    "tensor(int32)": "INT32",
    "tensor(int64)": "INT64",
    "tensor(float16)": "FP16",
    "tensor(float)": "FP32",
    "tensor(double)": "FP64",
    "tensor(string)": "BYTES",
    "tensor(bfloat16)": "BF16",
}


class OnnxRuntime:
    """Validates and (later) serves ``model.onnx`` with onnxruntime."""

    name: RuntimeName = ONNX_RUNTIME

    def inspect(self, model_path: Path, config: ModelConfig) -> Signature:
        check_external_data(model_path)
        options = ort.SessionOptions()
        options.intra_op_num_threads = 1
        options.log_severity_level = 3
        # Loading checks the graph and its weights; optimising and pre-packing them would
        # only cost memory here (measured: 4x the model's size; external data stays mapped).
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        options.add_session_config_entry("session.disable_prepacking", "1")
        options.enable_cpu_mem_arena = False
        try:
            session = ort.InferenceSession(
                str(model_path), sess_options=options, providers=["CPUExecutionProvider"]
            )
        except Exception as exc:  # onnxruntime raises several unrelated types
            raise ModelRejected(f"onnxruntime cannot load model.onnx: {first_line(exc)}") from exc
        return Signature(
            inputs=tuple(_spec(i) for i in session.get_inputs()),
            outputs=tuple(_spec(o) for o in session.get_outputs()),
        )

    def load(
        self, model_path: Path, config: ModelConfig, signature: Signature, options: LoadOptions
    ) -> OnnxSession:
        session_options = ort.SessionOptions()
        session_options.intra_op_num_threads = options.intra_op_threads
        session_options.log_severity_level = 3
        # Idle pool threads sleep instead of spinning: between runs a spinning thread took a
        # core from the event loop that receives the next requests (measured by
        # scripts/bench_grpc.py: a third fewer requests a second at 32 in flight).
        session_options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        providers = providers_for(wants_gpu(config, options))
        try:
            session = ort.InferenceSession(
                str(model_path), sess_options=session_options, providers=providers
            )
        except Exception as exc:
            raise InferenceError(f"onnxruntime cannot load the model: {first_line(exc)}") from exc
        device = "cuda" if session.get_providers()[0] == "CUDAExecutionProvider" else "cpu"
        strings = frozenset(t.name for t in signature.inputs if t.datatype == "BYTES")
        if any(t.datatype == "BF16" for t in (*signature.inputs, *signature.outputs)):
            return BFloat16Session(session, device, strings)
        return OnnxSession(session, device, strings)


class OnnxSession:
    """An onnxruntime session; strings in and out as BYTES (object arrays of bytes)."""

    def __init__(self, session: Any, device: str, string_inputs: frozenset[str]) -> None:
        self._session = session
        self._string_inputs = string_inputs
        self.device = device
        # The session's compiled run. InferenceSession.run checks, in Python on every call,
        # what binding already guarantees here (every input present, numpy feeds, no WebGPU
        # graph capture): a tenth of a small model's run. Its one other job, falling back
        # to CPU when a GPU provider fails, stays with it (``_run``).
        self._compiled_run = getattr(session, "_sess", session).run

    def run(self, inputs: Mapping[str, np.ndarray[Any, Any]], outputs: Sequence[str]) -> Arrays:
        feed = {
            name: _to_str(value) if name in self._string_inputs else value
            for name, value in inputs.items()
        }
        try:
            results = self._run(list(outputs), feed)
        except Exception as exc:  # onnxruntime raises Fail/InvalidArgument/RuntimeException
            raise InferenceError(f"onnxruntime failed: {first_line(exc)}") from exc
        return {
            name: _to_bytes(value) if value.dtype.kind in ("U", "O") else value
            for name, value in zip(outputs, results, strict=True)
        }

    def _run(self, names: list[str], feed: dict[str, Any]) -> list[Any]:
        try:
            results: list[Any] = self._compiled_run(names, feed, None)
        except ort.capi.onnxruntime_pybind11_state.EPFail:
            results = self._session.run(names, feed)  # its provider fallback decides
        return results


class BFloat16Session(OnnxSession):
    """A session with BF16 tensors, which onnxruntime's numpy bridge cannot pass: they go
    in and out as OrtValues over the same bytes (ml_dtypes.bfloat16 on our side)."""

    def run(self, inputs: Mapping[str, np.ndarray[Any, Any]], outputs: Sequence[str]) -> Arrays:
        feed = {name: _ort_value(value) for name, value in inputs.items()}
        try:
            results = self._session.run_with_ort_values(list(outputs), feed)
        except Exception as exc:
            raise InferenceError(f"onnxruntime failed: {first_line(exc)}") from exc
        return {name: _from_ort_value(value) for name, value in zip(outputs, results, strict=True)}


def _ort_value(array: np.ndarray[Any, Any]) -> Any:
    if array.dtype.name == "bfloat16":
        raw = np.ascontiguousarray(array).view(np.uint16)
        return ort.OrtValue.ortvalue_from_numpy_with_onnx_type(raw, _ONNX_BFLOAT16)
    if array.dtype.kind in ("U", "O"):
        array = _to_str(array)
    return ort.OrtValue.ortvalue_from_numpy(array)


def _from_ort_value(value: Any) -> np.ndarray[Any, Any]:
    if value.data_type() == "tensor(bfloat16)":
        size = value.tensor_size_in_bytes()
        raw = ctypes.string_at(value.data_ptr(), size) if size else b""
        return np.frombuffer(raw, dtype=bfloat16()).reshape(value.shape())
    array: np.ndarray[Any, Any] = value.numpy()
    return _to_bytes(array) if array.dtype.kind in ("U", "O") else array


def _to_str(array: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    converted: np.ndarray[Any, Any] = np.vectorize(
        lambda v: v.decode("utf-8") if isinstance(v, bytes) else str(v), otypes=[object]
    )(array)
    return converted


def _to_bytes(array: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    converted: np.ndarray[Any, Any] = np.vectorize(
        lambda v: v.encode("utf-8") if isinstance(v, str) else v, otypes=[object]
    )(array)
    return converted


def providers_for(gpu: bool) -> list[str]:
    """CUDA first when asked for and present in this onnxruntime build, CPU always."""
    if gpu and "CUDAExecutionProvider" in ort.get_available_providers():
        return ["CUDAExecutionProvider", "CPUExecutionProvider"]
    return ["CPUExecutionProvider"]


def check_external_data(model_path: Path) -> None:
    """Reject external-data references that leave the version directory."""
    import onnx  # validation only: serving a model never needs the onnx package

    try:
        model = onnx.load(str(model_path), load_external_data=False)
    except Exception as exc:  # protobuf DecodeError and friends
        raise ModelRejected(
            f"model.onnx is not an ONNX model ({first_line(exc)}); export it with "
            "torch.onnx.export or onnx.save"
        ) from exc
    root = model_path.parent.resolve()
    for tensor in onnx.external_data_helper._get_all_tensors(model):
        if tensor.data_location != onnx.TensorProto.EXTERNAL:
            continue
        location = next((e.value for e in tensor.external_data if e.key == "location"), "")
        if "\x00" in location or not location:
            raise ModelRejected(
                f"tensor {tensor.name!r} has an external data location {location!r} that is not "
                "a file name; save the model with onnx.save(..., location='weights.bin')"
            )
        target = (root / location).resolve()
        if Path(location).is_absolute() or not target.is_relative_to(root):
            raise ModelRejected(
                f"tensor {tensor.name!r} points its external data at {location!r}, outside the "
                "version directory; keep external data files next to model.onnx"
            )
        if not target.is_file():
            raise ModelRejected(
                f"tensor {tensor.name!r} needs external data file {location!r}; upload it "
                "into the same version directory"
            )


def _spec(node: Any) -> TensorSpec:
    shape = tuple(d if isinstance(d, int) and d > 0 else -1 for d in (node.shape or []))
    return TensorSpec(node.name, _ORT_TO_V2.get(node.type, node.type), shape)
