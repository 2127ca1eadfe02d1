"""Which file in a version directory is the model, and which runtime serves it.

Triton's repository layout names the model by its file (``model.onnx``, ``model.pt``...);
a config's backend may choose another runtime that reads the same file.
"""

from __future__ import annotations

from lambdaserve.config.model_config import ModelConfig
from lambdaserve.config.runtime_names import (
    HANDLER_RUNTIME,
    ONNX_RUNTIME,
    OPENVINO_RUNTIME,
    PADDLE_INFERENCE_RUNTIME,
    PIPELINE_RUNTIME,
    PYTHON_RUNTIME,
    TENSORFLOW_RUNTIME,
    TORCHSCRIPT_RUNTIME,
    RuntimeName,
)

MODEL_FILES: dict[str, RuntimeName] = {
    "model.onnx": ONNX_RUNTIME,
    "model.pt": TORCHSCRIPT_RUNTIME,
    "model.xml": OPENVINO_RUNTIME,
    "model.savedmodel/saved_model.pb": OPENVINO_RUNTIME,
    "saved_model.pb": OPENVINO_RUNTIME,  # TF Serving's layout: the version directory is the model
    "model.pdmodel": OPENVINO_RUNTIME,  # Paddle Inference where OpenVINO cannot read it
    # Paddle 1.x's inference model (Paddle Serving's examples): Paddle Inference reads it
    "__model__": PADDLE_INFERENCE_RUNTIME,
    "model.py": PYTHON_RUNTIME,
    "handler.py": HANDLER_RUNTIME,
    # a Paddle Serving pipeline: the user's web_service.py with its config.yml
    "web_service.py": PIPELINE_RUNTIME,
    # an unpacked TorchServe archive (torch-model-archiver's files, TorchServe's no-archive)
    "MAR-INF/MANIFEST.json": HANDLER_RUNTIME,
    # an unpacked TorchServe workflow (torch-workflow-archiver's .war)
    "WAR-INF/MANIFEST.json": HANDLER_RUNTIME,
}
# A config's backend choosing another runtime for a file: Triton's OpenVINO backend reads
# model.onnx too (backend: "openvino"), and so does lambdaserve's.
# backend: "paddle_inference" has Paddle's own predictor serve a model.pdmodel, and
# backend: "tensorflow" (or Triton's platform "tensorflow_savedmodel") TensorFlow a SavedModel.
BACKEND_RUNTIMES: dict[tuple[str, str], RuntimeName] = {
    ("openvino", "model.onnx"): OPENVINO_RUNTIME,
    ("paddle_inference", "model.pdmodel"): PADDLE_INFERENCE_RUNTIME,
    ("tensorflow", "model.savedmodel/saved_model.pb"): TENSORFLOW_RUNTIME,
    ("tensorflow", "saved_model.pb"): TENSORFLOW_RUNTIME,
}
# What Triton calls the formats OpenVINO serves here (model metadata's platform).
OPENVINO_PLATFORMS = {
    "model.savedmodel/saved_model.pb": "tensorflow_savedmodel",
    "saved_model.pb": "tensorflow_savedmodel",
    "model.pdmodel": "paddle",
}
# Model files whose code runs where they serve (opt-in: LAMBDASERVE_PYTHON_MODELS).
CODE_FILES = frozenset(
    {"model.py", "handler.py", "web_service.py", "MAR-INF/MANIFEST.json", "WAR-INF/MANIFEST.json"}
)
# Runtimes the manage function does not run (it reads the model's signature without them):
# their versions are loaded where they serve before READY, as model code is.
CHECKED_WHERE_IT_SERVES: frozenset[str] = frozenset({PADDLE_INFERENCE_RUNTIME, TENSORFLOW_RUNTIME})
# A file that says how the version is served, whatever else it ships (an archive's handler
# may be handler.py, its model model.py or model.pt)
MANIFEST_FILE = "MAR-INF/MANIFEST.json"
HANDLER_FILE = "handler.py"  # a TorchServe handler folder: models/m/1/handler.py
WORKFLOW_MANIFEST_FILE = "WAR-INF/MANIFEST.json"


def runtime_name_for(filename: str, config: ModelConfig | None = None) -> RuntimeName:
    """The file's own runtime, unless the config's backend chooses another that reads it."""
    backend = choosing_backend(config) if config is not None else ""
    return BACKEND_RUNTIMES.get((backend, filename), MODEL_FILES[filename])


def choosing_backend(config: ModelConfig) -> str:
    """The config's backend, or ``tensorflow`` for Triton's platform
    ``tensorflow_savedmodel`` (Triton's TensorFlow backend serves that platform)."""
    if not config.backend and config.platform == "tensorflow_savedmodel":
        return "tensorflow"
    return config.backend


def selects_runtime(config: ModelConfig) -> bool:
    """Whether the config's backend may choose a runtime other than a file's own."""
    return any(backend == choosing_backend(config) for backend, _ in BACKEND_RUNTIMES)


# default_model_filename: a file named otherwise is served as the file its suffix stands for
# (Triton's backends read default_model_filename instead of model.<ext>).
ALIASES = {
    ".onnx": "model.onnx",
    ".pt": "model.pt",
    ".xml": "model.xml",
    ".pdmodel": "model.pdmodel",
    ".py": "model.py",
}
# Files that travel with an aliased model file, by suffix: (its suffix, the name served)
COMPANIONS = {".xml": (".bin", "model.bin"), ".pdmodel": (".pdiparams", "model.pdiparams")}
