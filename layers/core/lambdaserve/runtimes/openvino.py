"""OpenVINO backend: OpenVINO IR (``model.xml`` + ``model.bin``), and ``model.onnx`` when the
config says ``backend: "openvino"`` (as Triton's OpenVINO backend reads it).

``openvino`` is an optional extra, imported only here and only when a version needs it:
without it a version is UNAVAILABLE naming the fix (``RuntimeMissing``). Models compile for
CPU with f32 inference precision (OpenVINO's CPU plugin would otherwise run bf16 where the
processor has it, and answer differently from onnxruntime).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from lambdaserve.errors import InferenceError, ModelRejected, RuntimeMissing
from lambdaserve.modelconfig import ModelConfig, TensorSpec
from lambdaserve.runtimes import Arrays, LoadOptions, Signature

MISSING = (
    "OpenVINO is not installed where this version was validated; install "
    'lambdaserve[openvino] (openvino>=2024.0), or drop backend: "openvino" from the config '
    "and publish the model as model.onnx"
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

Reader = Callable[[Any, Path], Any]


def _read_ir(core: Any, path: Path) -> Any:
    weights = path.with_name("model.bin")
    try:
        if weights.is_file():
            return core.read_model(str(path), str(weights))
        return core.read_model(str(path))
    except Exception as exc:  # OpenVINO raises RuntimeError with pages of context
        fix = (
            "write the IR with openvino.save_model (or ovc) and upload model.xml with model.bin"
            if weights.is_file()
            else "upload model.bin (its weights) beside model.xml"
        )
        raise ModelRejected(f"OpenVINO cannot read model.xml: {_reason(exc)}; {fix}") from exc


def _read_onnx(core: Any, path: Path) -> Any:
    from lambdaserve.runtimes.onnx import check_external_data

    check_external_data(path)
    try:
        return core.read_model(str(path))
    except Exception as exc:
        raise ModelRejected(f"OpenVINO cannot read model.onnx: {_reason(exc)}") from exc


# The model files this backend reads, each with its reader; a new format (a TF SavedModel,
# a Paddle model) is one more entry, plus its file name in runtimes.MODEL_FILES.
READERS: dict[str, Reader] = {"model.xml": _read_ir, "model.onnx": _read_onnx}


def _openvino() -> Any:
    try:
        import openvino
    except ImportError as exc:
        raise RuntimeMissing(MISSING) from exc
    return openvino


class OpenVinoRuntime:
    """Validates and (later) serves a model with OpenVINO on CPU."""

    name = "openvino"

    def inspect(self, model_path: Path, config: ModelConfig) -> Signature:
        reader = READERS.get(model_path.name)
        if reader is None:
            raise ModelRejected(
                f"OpenVINO does not read {model_path.name}; upload one of {', '.join(READERS)}"
            )
        ov = _openvino()
        core = ov.Core()
        model = reader(core, model_path)
        signature = Signature(
            inputs=tuple(_spec(p, "input", i) for i, p in enumerate(model.inputs)),
            outputs=tuple(_spec(p, "output", i) for i, p in enumerate(model.outputs)),
        )
        if any(t.datatype == "BYTES" for t in (*signature.inputs, *signature.outputs)):
            raise ModelRejected(
                "OpenVINO models take and return numeric tensors here; BYTES is not supported "
                'by lambdaserve\'s OpenVINO backend: drop backend: "openvino" to serve it '
                "with onnxruntime"
            )
        try:  # what the CPU plugin cannot compile fails here, not on the first request
            core.compile_model(model, "CPU", {**_COMPILE, "INFERENCE_NUM_THREADS": 1})
        except Exception as exc:
            raise ModelRejected(
                f"OpenVINO cannot compile {model_path.name} for CPU: {_reason(exc)}"
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
            model = READERS[model_path.name](core, model_path)
            compiled = core.compile_model(model, "CPU", properties)
        except (ModelRejected, RuntimeError) as exc:
            message = exc.message if isinstance(exc, ModelRejected) else _reason(exc)
            raise InferenceError(f"OpenVINO cannot load the model: {message}") from exc
        return OpenVinoModel(ov, compiled)


class OpenVinoModel:
    """A compiled model on CPU. Infer requests are not thread-safe: each run takes one from
    a pool (created on demand, so as many as runs at once) and gives it back."""

    device = "cpu"

    def __init__(self, ov: Any, compiled: Any) -> None:
        self._ov = ov
        self._compiled = compiled
        self._inputs = {name: i for i, p in enumerate(compiled.inputs) for name in p.names}
        self._outputs = {name: i for i, p in enumerate(compiled.outputs) for name in p.names}
        self._bf16 = frozenset(
            name
            for p in compiled.inputs
            if p.get_element_type().get_type_name() == "bf16"
            for name in p.names
        )
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
            raise InferenceError(f"OpenVINO failed: {_reason(exc)}") from exc
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
        if name in self._bf16:  # BF16 travels as its bits (ml_dtypes.bfloat16 on our side)
            tensor = self._ov.Tensor(self._ov.Type.bf16, list(array.shape))
            tensor.data.view(np.uint16)[...] = np.ascontiguousarray(array).view(np.uint16)
            return tensor
        return self._ov.Tensor(np.ascontiguousarray(array), shared_memory=True)

    @staticmethod
    def _output(request: Any, index: int) -> np.ndarray[Any, Any]:
        tensor = request.get_output_tensor(index)
        if tensor.get_element_type().get_type_name() == "bf16":
            from lambdaserve.tensors import bfloat16

            raw = np.array(tensor.data, copy=True).view(np.uint16)
            return raw.view(bfloat16()).reshape(tuple(tensor.shape))
        return np.array(tensor.data, copy=True)


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


def _reason(exc: BaseException) -> str:
    """OpenVINO's messages start with source locations (``Exception from src/...``): the
    line that says what is wrong is the last non-empty one before its traceback."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    useful = [
        line
        for line in lines
        if not line.startswith(("Exception from", "Check '", "[ GENERAL_ERROR ]"))
    ]
    return (useful or lines or [type(exc).__name__])[-1][:300].rstrip(".!")
