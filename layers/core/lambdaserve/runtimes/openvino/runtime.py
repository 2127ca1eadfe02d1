"""OpenVINO backend: OpenVINO IR (``model.xml`` + ``model.bin``), TF SavedModels
(``model.savedmodel/``), Paddle inference models (``model.pdmodel`` + ``model.pdiparams``), and
``model.onnx`` when the config says ``backend: "openvino"`` (as Triton's OpenVINO backend reads
it); how each is read lives in openvino_readers.

``openvino`` is an optional extra, imported only here and only when a version needs it:
without it a version is UNAVAILABLE naming the fix (``RuntimeMissing``). Models compile for
CPU with f32 inference precision (OpenVINO's CPU plugin would otherwise run bf16 where the
processor has it, and answer differently from onnxruntime).
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from lambdaserve.config.model_config import ModelConfig
from lambdaserve.config.runtime_names import OPENVINO_RUNTIME, RuntimeName
from lambdaserve.errors import InferenceError, ModelRejected, RuntimeMissing
from lambdaserve.runtimes.base import LoadOptions
from lambdaserve.runtimes.openvino.readers import reader_for, reason
from lambdaserve.tensors.signature import Arrays, Signature, TensorSpec

MISSING = (
    "OpenVINO is not installed where this version was validated: run `make dev OPENVINO=1` "
    "locally, or pip install 'lambdaserve[openvino]' (openvino>=2024.0); the deployed images "
    'include it. (A model.onnx goes to OpenVINO only when its config says backend: "openvino": '
    "without that line ONNX Runtime serves it.)"
)
# OpenVINO element types (Type.get_type_name()) as v2 datatypes.
_OV_TO_V2 = {
    "boolean": "BOOL",
    "u8": "UINT8",
    "u16": "UINT16",
    "u32": "UINT32",
    "u64": "UINT64",
    "i8": "INT8",
    "i16": "INT16",
    "i32": "INT32",
    "i64": "INT64",
    "f16": "FP16",
    "f32": "FP32",
    "f64": "FP64",
    "bf16": "BF16",
    "string": "BYTES",
}
# Exactly what the model computes: no bf16 or f16 execution the model did not ask for.
_COMPILE = {"INFERENCE_PRECISION_HINT": "f32", "PERFORMANCE_HINT": "LATENCY"}


def _openvino() -> Any:
    try:
        import openvino
    except ImportError as exc:
        raise RuntimeMissing(MISSING) from exc
    return openvino


class OpenVinoRuntime:
    """Validates and (later) serves a model with OpenVINO on CPU."""

    name: RuntimeName = OPENVINO_RUNTIME

    def inspect(self, model_path: Path, config: ModelConfig) -> Signature:
        reader = reader_for(model_path)
        ov = _openvino()
        core = ov.Core()
        model = reader(core, model_path)
        signature = _signature(model)
        try:  # what the CPU plugin cannot compile fails here, not on the first request
            core.compile_model(model, "CPU", {**_COMPILE, "INFERENCE_NUM_THREADS": 1})
        except Exception as exc:
            raise ModelRejected(
                f"OpenVINO cannot compile {model_path.name} for CPU: {reason(exc)}"
            ) from exc
        return signature

    def load(
        self, model_path: Path, config: ModelConfig, signature: Signature, options: LoadOptions
    ) -> OpenVinoModel:
        try:
            ov = _openvino()
        except RuntimeMissing as exc:
            raise InferenceError(exc.message) from exc
        core = ov.Core()
        properties: dict[str, Any] = dict(_COMPILE)
        if options.intra_op_threads:
            properties["INFERENCE_NUM_THREADS"] = options.intra_op_threads
        try:
            model = reader_for(model_path)(core, model_path)
            compiled = core.compile_model(model, "CPU", properties)
        except (ModelRejected, RuntimeError) as exc:
            message = exc.message if isinstance(exc, ModelRejected) else reason(exc)
            raise InferenceError(f"OpenVINO cannot load the model: {message}") from exc
        return OpenVinoModel(ov, compiled)


def compile_file(read: Any, path: Path) -> tuple[OpenVinoModel, Signature]:
    """A model file read by ``read(core, path)`` and compiled for CPU, with its signature
    (the local models of Paddle pipeline Ops)."""
    ov = _openvino()
    core = ov.Core()
    model = read(core, path)
    signature = _signature(model)
    try:
        compiled = core.compile_model(model, "CPU", dict(_COMPILE))
    except Exception as exc:
        raise ModelRejected(f"OpenVINO cannot compile {path.name} for CPU: {reason(exc)}") from exc
    return OpenVinoModel(ov, compiled), signature


class OpenVinoModel:
    """A compiled model on CPU. Infer requests are not thread-safe: each run takes one from
    a pool (created on demand, so as many as runs at once) and gives it back."""

    device = "cpu"

    def __init__(self, ov: Any, compiled: Any) -> None:
        self._ov = ov
        self._compiled = compiled
        self._inputs = {name: i for i, p in enumerate(compiled.inputs) for name in p.names}
        self._outputs = {name: i for i, p in enumerate(compiled.outputs) for name in p.names}
        self._types = {
            name: p.get_element_type().get_type_name() for p in compiled.inputs for name in p.names
        }
        self._idle: list[Any] = []
        self._lock = threading.Lock()

    def run(self, inputs: Mapping[str, np.ndarray[Any, Any]], outputs: Sequence[str]) -> Arrays:
        # Tensors set by index over the caller's arrays, then infer(): measured 4 us a call
        # cheaper than infer(dict), and a request per run 6 us dearer than a reused one.
        tensors = [
            (self._index(self._inputs, "input", n), self._tensor(n, v)) for n, v in inputs.items()
        ]
        if len(tensors) != len(self._compiled.inputs):
            raise InferenceError(
                f"the model takes {len(self._compiled.inputs)} inputs, {len(tensors)} given"
            )
        with self._lock:
            request = self._idle.pop() if self._idle else self._compiled.create_infer_request()
        try:
            for index, tensor in tensors:
                request.set_input_tensor(index, tensor)
            request.infer()
            return {
                n: self._output(request, self._index(self._outputs, "output", n)) for n in outputs
            }
        except (RuntimeError, TypeError, ValueError) as exc:
            raise InferenceError(f"OpenVINO failed: {reason(exc)}") from exc
        finally:
            with self._lock:
                self._idle.append(request)

    @staticmethod
    def _index(ports: dict[str, int], role: str, name: str) -> int:
        index = ports.get(name)
        if index is None:
            raise InferenceError(f"the model has no {role} {name!r}; it has {sorted(ports)}")
        return index

    def _tensor(self, name: str, array: np.ndarray[Any, Any]) -> Any:
        kind = self._types.get(name)
        if kind == "bf16":  # BF16 travels as its bits (ml_dtypes.bfloat16 on our side)
            tensor = self._ov.Tensor(self._ov.Type.bf16, list(array.shape))
            tensor.data.view(np.uint16)[...] = np.ascontiguousarray(array).view(np.uint16)
            return tensor
        if kind == "string":  # BYTES: object arrays of bytes, through numpy's S arrays
            values = [v.encode() if isinstance(v, str) else v for v in array.ravel().tolist()]
            return self._ov.Tensor(np.array(values, dtype=np.bytes_).reshape(array.shape))
        contiguous = np.ascontiguousarray(array)
        # OpenVINO shares only writeable memory; binary bodies arrive as read-only views
        return self._ov.Tensor(contiguous, shared_memory=contiguous.flags.writeable)

    @staticmethod
    def _output(request: Any, index: int) -> np.ndarray[Any, Any]:
        tensor = request.get_output_tensor(index)
        kind = tensor.get_element_type().get_type_name()
        if kind == "string":
            strings = np.asarray(tensor.bytes_data, dtype=np.bytes_).reshape(tuple(tensor.shape))
            return strings.astype(object)
        if kind == "bf16":
            from lambdaserve.tensors.encoding import bfloat16

            raw = np.array(tensor.data, copy=True).view(np.uint16)
            return raw.view(bfloat16()).reshape(tuple(tensor.shape))
        return np.array(tensor.data, copy=True)


def _signature(model: Any) -> Signature:
    return Signature(
        inputs=tuple(_spec(p, "input", i) for i, p in enumerate(model.inputs)),
        outputs=tuple(_spec(p, "output", i) for i, p in enumerate(model.outputs)),
    )


def _spec(port: Any, role: str, index: int) -> TensorSpec:
    names = port.get_names()
    if not names:
        raise ModelRejected(
            f"the model's {role} {index} has no tensor name; name it when converting "
            "(openvino.convert_model keeps the source model's names)"
        )
    element = port.get_element_type().get_type_name()
    shape = port.get_partial_shape()
    dims = (
        tuple(d.get_length() if d.is_static else -1 for d in shape) if shape.rank.is_static else ()
    )
    return TensorSpec(port.get_any_name(), _OV_TO_V2.get(element, element.upper()), dims)
