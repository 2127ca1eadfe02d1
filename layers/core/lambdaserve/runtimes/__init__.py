"""Model runtimes behind one small Protocol; heavy imports stay inside each backend."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import numpy as np

from lambdaserve.modelconfig import ModelConfig, TensorSpec

if TYPE_CHECKING:
    from lambdaserve.errors import LambdaServeError

MODEL_FILES = {
    "model.onnx": "onnxruntime",
    "model.pt": "torchscript",
    "model.xml": "openvino",
    "model.savedmodel/saved_model.pb": "openvino",
    "saved_model.pb": "openvino",  # TF Serving's layout: the version directory is the model
    "model.pdmodel": "openvino",
    "model.py": "python",
    "handler.py": "torchserve_handler",
}
# A config's backend choosing another runtime for a file: Triton's OpenVINO backend reads
# model.onnx too (backend: "openvino"), and so does lambdaserve's.
BACKEND_RUNTIMES = {("openvino", "model.onnx"): "openvino"}
# What Triton calls the formats OpenVINO serves here (model metadata's platform).
OPENVINO_PLATFORMS = {
    "model.savedmodel/saved_model.pb": "tensorflow_savedmodel",
    "saved_model.pb": "tensorflow_savedmodel",
    "model.pdmodel": "paddle",
}
# Model files whose code runs where they serve (opt-in: LAMBDASERVE_PYTHON_MODELS).
CODE_FILES = frozenset({"model.py", "handler.py"})


@dataclass(frozen=True)
class Signature:
    """Inputs and outputs of a model, in v2 datatypes; -1 marks a dynamic dimension."""

    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]

    def to_json(self) -> dict[str, list[dict[str, object]]]:
        return {
            "inputs": [t.to_json() for t in self.inputs],
            "outputs": [t.to_json() for t in self.outputs],
        }

    @classmethod
    def from_json(cls, data: dict[str, list[dict[str, object]]]) -> Signature:
        def specs(items: Sequence[dict[str, object]]) -> tuple[TensorSpec, ...]:
            return tuple(
                TensorSpec(
                    str(i["name"]),
                    str(i["datatype"]),
                    tuple(int(d) for d in i["shape"]),  # type: ignore[attr-defined]
                )
                for i in items
            )

        return cls(specs(data.get("inputs", [])), specs(data.get("outputs", [])))


Arrays = dict[str, "np.ndarray[Any, Any]"]


class LoadedModel(Protocol):
    """A model loaded for serving on one device."""

    device: str

    def run(self, inputs: Mapping[str, np.ndarray[Any, Any]], outputs: Sequence[str]) -> Arrays:
        """Execute once; ``outputs`` names what to return (in that order)."""
        ...


@runtime_checkable
class RequestsModel(Protocol):
    """A model whose contract is several requests per call (Triton's Python backend)."""

    device: str

    def run(self, inputs: Mapping[str, np.ndarray[Any, Any]], outputs: Sequence[str]) -> Arrays:
        """One request alone."""
        ...

    def run_requests(
        self, requests: Sequence[tuple[Mapping[str, np.ndarray[Any, Any]], Sequence[str]]]
    ) -> list[Arrays | LambdaServeError]:
        """Each ``(inputs, output names)`` answered, or failed alone, in order, in one call."""
        ...


class Runtime(Protocol):
    """A backend that can check a model file, report its signature and load it."""

    name: str

    def inspect(self, model_path: Path, config: ModelConfig) -> Signature:
        """Load the model for real and return its signature, or raise ModelRejected."""
        ...

    def load(
        self, model_path: Path, config: ModelConfig, signature: Signature, options: LoadOptions
    ) -> LoadedModel:
        """Load for serving on the device ``options`` and the config ask for."""
        ...


@dataclass(frozen=True)
class LoadOptions:
    """How to load: ``device`` is cpu, cuda or auto (cuda for KIND_GPU models when present)."""

    device: str = "auto"
    intra_op_threads: int = 0
    # Python models run their own code: only where the deployment allows it.
    python_models: bool = False
    version: int = 0


def wants_gpu(config: ModelConfig, options: LoadOptions) -> bool:
    return options.device == "cuda" or (options.device == "auto" and config.instance_kind == "GPU")


def runtime_for(filename: str, config: ModelConfig | None = None) -> Runtime:
    """The runtime that serves a model file (model.onnx, .pt, .xml, .py or handler.py)."""
    return runtime_named(runtime_name_for(filename, config))


def runtime_name_for(filename: str, config: ModelConfig | None = None) -> str:
    """The file's own runtime, unless the config's backend chooses another that reads it."""
    backend = config.backend if config is not None else ""
    return BACKEND_RUNTIMES.get((backend, filename), MODEL_FILES[filename])


def selects_runtime(config: ModelConfig) -> bool:
    """Whether the config's backend may choose a runtime other than a file's own."""
    return any(backend == config.backend for backend, _ in BACKEND_RUNTIMES)


def runtime_named(backend: str) -> Runtime:
    """The runtime a catalog version records (``onnxruntime``, ``torchscript``, ``openvino``,
    ``python``...)."""
    if backend == "onnxruntime":
        from lambdaserve.runtimes.onnx import OnnxRuntime

        return OnnxRuntime()
    if backend == "openvino":
        from lambdaserve.runtimes.openvino import OpenVinoRuntime

        return OpenVinoRuntime()
    if backend == "ensemble":
        from lambdaserve.pipelines.ensemble import EnsembleRuntime

        return EnsembleRuntime()
    if backend == "python":
        from lambdaserve.runtimes.python_model import PythonModelRuntime

        return PythonModelRuntime()
    if backend == "torchserve_handler":
        from lambdaserve.runtimes.torchserve_handler import TorchServeHandlerRuntime

        return TorchServeHandlerRuntime()
    from lambdaserve.runtimes.torchscript import TorchScriptRuntime

    return TorchScriptRuntime()
