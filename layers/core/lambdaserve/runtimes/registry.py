"""The runtime for a name or a model file; each backend imported only when first asked for."""

from __future__ import annotations

from lambdaserve.config import runtime_names as names
from lambdaserve.config.model_config import ModelConfig
from lambdaserve.config.model_files import runtime_name_for
from lambdaserve.runtimes.base import Runtime


def runtime_for(filename: str, config: ModelConfig | None = None) -> Runtime:
    """The runtime that serves a model file (model.onnx, .pt, .xml, .py or handler.py)."""
    return runtime_named(runtime_name_for(filename, config))


def runtime_named(backend: str) -> Runtime:  # noqa: PLR0911 (one lazy import per backend)
    """The runtime a catalog version records (``onnxruntime``, ``torchscript``, ``openvino``,
    ``python``...)."""
    if backend == names.ONNX_RUNTIME:
        from lambdaserve.runtimes.onnx import OnnxRuntime

        return OnnxRuntime()
    if backend == names.OPENVINO_RUNTIME:
        from lambdaserve.runtimes.openvino.runtime import OpenVinoRuntime

        return OpenVinoRuntime()
    if backend == names.ENSEMBLE_RUNTIME:
        from lambdaserve.runtimes.ensemble import EnsembleRuntime

        return EnsembleRuntime()
    if backend == names.PYTHON_RUNTIME:
        from lambdaserve.runtimes.triton_python.model import PythonModelRuntime

        return PythonModelRuntime()
    if backend == names.HANDLER_RUNTIME:
        from lambdaserve.runtimes.torchserve.handler import TorchServeHandlerRuntime

        return TorchServeHandlerRuntime()
    if backend == names.PADDLE_INFERENCE_RUNTIME:
        from lambdaserve.runtimes.paddle_inference.runtime import PaddleInferenceRuntime

        return PaddleInferenceRuntime()
    if backend == names.TENSORFLOW_RUNTIME:
        from lambdaserve.runtimes.tensorflow.runtime import TensorFlowRuntime

        return TensorFlowRuntime()
    if backend == names.PIPELINE_RUNTIME:
        from lambdaserve.runtimes.paddle_serving.pipeline import PaddlePipelineRuntime

        return PaddlePipelineRuntime()
    from lambdaserve.runtimes.torchscript import TorchScriptRuntime

    return TorchScriptRuntime()
