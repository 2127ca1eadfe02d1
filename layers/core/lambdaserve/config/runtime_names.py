"""The runtimes' names: what a catalog version records as its runtime, what
``runtimes.registry.runtime_named`` takes and what each runtime's ``name`` says. One
``Literal``, so a misspelt name is a type error rather than a version that falls through
to the default runtime. (A config's ``backend`` is Triton's word, not one of these: its
``"python"`` or ``"openvino"`` may choose the runtime of the same name.)"""

from __future__ import annotations

from typing import Final, Literal

RuntimeName = Literal[
    "onnxruntime",
    "torchscript",
    "openvino",
    "python",
    "torchserve_handler",
    "paddle_inference",
    "paddle_pipeline",
    "tensorflow",
    "ensemble",
]

ONNX_RUNTIME: Final = "onnxruntime"
TORCHSCRIPT_RUNTIME: Final = "torchscript"
OPENVINO_RUNTIME: Final = "openvino"  # IR, and what a config's backend gives it to read
PYTHON_RUNTIME: Final = "python"  # Triton's Python models (model.py)
HANDLER_RUNTIME: Final = "torchserve_handler"  # TorchServe handlers, archives, workflows
PADDLE_INFERENCE_RUNTIME: Final = "paddle_inference"
PIPELINE_RUNTIME: Final = "paddle_pipeline"  # Paddle Serving pipelines (web_service.py)
TENSORFLOW_RUNTIME: Final = "tensorflow"  # SavedModels OpenVINO does not serve, every signature
ENSEMBLE_RUNTIME: Final = "ensemble"
