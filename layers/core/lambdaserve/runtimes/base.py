"""The small Protocol every runtime implements, and how a model is loaded."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import numpy as np

from lambdaserve.config.model_config import ModelConfig
from lambdaserve.config.runtime_names import RuntimeName
from lambdaserve.tensors.signature import Arrays, Signature, SignatureDef

if TYPE_CHECKING:
    from lambdaserve.errors import LambdaServeError


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


@runtime_checkable
class SignaturesModel(Protocol):
    """A model with several named signatures (a TF SavedModel): ``run`` calls the default
    one, ``run_signature`` any; ``signature_defs`` gives each key's method name and tensors."""

    device: str
    default_signature: str

    def run(self, inputs: Mapping[str, np.ndarray[Any, Any]], outputs: Sequence[str]) -> Arrays:
        """The default signature."""
        ...

    def signature_defs(self) -> Mapping[str, SignatureDef]:
        """Each signature's key: its method name and its inputs and outputs."""
        ...

    def run_signature(
        self, key: str, inputs: Mapping[str, np.ndarray[Any, Any]], outputs: Sequence[str]
    ) -> Arrays:
        """Signature ``key`` once; ``outputs`` names what to return (every one when empty)."""
        ...


class Runtime(Protocol):
    """A backend that can check a model file, report its signature and load it."""

    name: RuntimeName

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
