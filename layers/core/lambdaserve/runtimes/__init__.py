"""Model runtimes behind one small Protocol; heavy imports stay inside each backend."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from lambdaserve.modelconfig import ModelConfig, TensorSpec

MODEL_FILES = {"model.onnx": "onnxruntime", "model.pt": "torchscript"}


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


class Runtime(Protocol):
    """A backend that can check a model file and report its signature."""

    name: str

    def inspect(self, model_path: Path, config: ModelConfig) -> Signature:
        """Load the model for real and return its signature, or raise ModelRejected."""
        ...


def runtime_for(filename: str) -> Runtime:
    """The runtime that serves a model file name (model.onnx or model.pt)."""
    backend = MODEL_FILES[filename]
    if backend == "onnxruntime":
        from lambdaserve.runtimes.onnx import OnnxRuntime

        return OnnxRuntime()
    from lambdaserve.runtimes.torchscript import TorchScriptRuntime

    return TorchScriptRuntime()
