"""The runtime for a name or a model file; each backend imported only when first asked for."""

from __future__ import annotations

from lambdaserve.config.model_config import ModelConfig
from lambdaserve.config.model_files import runtime_name_for
from lambdaserve.runtimes.base import Runtime


def runtime_for(filename: str, config: ModelConfig | None = None) -> Runtime:
    """The runtime that serves a model file (model.onnx, .pt, .xml, .py or handler.py)."""
    return runtime_named(runtime_name_for(filename, config))


def runtime_named(backend: str) -> Runtime:  # noqa: PLR0911 (one lazy import per backend)
    """The runtime a catalog version records (``onnxruntime``, ``torchscript``, ``openvino``,
    ``python``...)."""
    if backend == "onnxruntime":
        from lambdaserve.runtimes.onnx import OnnxRuntime

        return OnnxRuntime()
    if backend == "openvino":
        from lambdaserve.runtimes.openvino.runtime import OpenVinoRuntime

        return OpenVinoRuntime()
    if backend == "ensemble":
        from lambdaserve.runtimes.ensemble import EnsembleRuntime

        return EnsembleRuntime()
    if backend == "python":
        from lambdaserve.runtimes.triton_python.model import PythonModelRuntime

        return PythonModelRuntime()
    if backend == "torchserve_handler":
        from lambdaserve.runtimes.torchserve.handler import TorchServeHandlerRuntime

        return TorchServeHandlerRuntime()
    if backend == "paddle_inference":
        from lambdaserve.runtimes.paddle_inference.runtime import PaddleInferenceRuntime

        return PaddleInferenceRuntime()
    if backend == "paddle_pipeline":
        from lambdaserve.runtimes.paddle_serving.pipeline import PaddlePipelineRuntime

        return PaddlePipelineRuntime()
    from lambdaserve.runtimes.torchscript import TorchScriptRuntime

    return TorchScriptRuntime()
