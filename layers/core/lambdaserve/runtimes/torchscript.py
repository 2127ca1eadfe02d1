"""TorchScript backend: ``torch.jit.load`` only, never ``torch.load`` (pickle)."""

from __future__ import annotations

import zipfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from lambdaserve.config.model_config import ModelConfig
from lambdaserve.config.runtime_names import TORCHSCRIPT_RUNTIME, RuntimeName
from lambdaserve.errors import InferenceError, ModelRejected, RuntimeMissing, first_line
from lambdaserve.runtimes.base import LoadOptions, wants_gpu
from lambdaserve.tensors.encoding import bfloat16
from lambdaserve.tensors.signature import Arrays, Signature

_PICKLE_PROTOCOL_MARK = b"\x80"


class TorchScriptRuntime:
    """Validates and (later) serves ``model.pt`` TorchScript archives."""

    name: RuntimeName = TORCHSCRIPT_RUNTIME

    def inspect(self, model_path: Path, config: ModelConfig) -> Signature:
        check_torchscript_archive(model_path)
        if not config.inputs or not config.outputs:
            raise ModelRejected(
                "TorchScript models need their inputs and outputs declared in config.pbtxt "
                "(name, data_type, dims), as Triton's PyTorch backend does"
            )
        try:
            import torch
        except ImportError as exc:
            raise RuntimeMissing(
                "PyTorch is not installed where this version was validated; install "
                "lambdaserve[torch] (torch==2.13.0) or publish the model as model.onnx"
            ) from exc
        try:
            module = torch.jit.load(str(model_path), map_location="cpu")
        except Exception as exc:  # torch raises RuntimeError subclasses with long texts
            raise ModelRejected(f"torch.jit.load cannot load model.pt: {first_line(exc)}") from exc
        module.eval()
        if any(t.datatype == "BYTES" for t in (*config.inputs, *config.outputs)):
            raise ModelRejected(
                "TorchScript models take and return tensors; BYTES is not supported"
            )
        return Signature(inputs=config.inputs, outputs=config.outputs)

    def load(
        self, model_path: Path, config: ModelConfig, signature: Signature, options: LoadOptions
    ) -> TorchScriptModule:
        import torch

        device = "cuda" if wants_gpu(config, options) and torch.cuda.is_available() else "cpu"
        if options.intra_op_threads:
            torch.set_num_threads(options.intra_op_threads)
        try:
            module = torch.jit.load(str(model_path), map_location=device)
        except Exception as exc:
            raise InferenceError(f"torch.jit.load failed: {first_line(exc)}") from exc
        module.eval()
        return TorchScriptModule(module, device, signature)


class TorchScriptModule:
    """A TorchScript module on cpu or cuda; positional inputs in the signature's order."""

    def __init__(self, module: Any, device: str, signature: Signature) -> None:
        self._module = module
        self._signature = signature
        self.device = device

    def run(self, inputs: Mapping[str, np.ndarray[Any, Any]], outputs: Sequence[str]) -> Arrays:
        import torch

        try:
            with torch.inference_mode():
                args = [
                    _to_torch(torch, inputs[spec.name]).to(self.device)
                    for spec in self._signature.inputs
                ]
                result = self._module(*args)
        except (RuntimeError, TypeError, ValueError) as exc:
            raise InferenceError(f"TorchScript model failed: {first_line(exc)}") from exc
        values = list(result) if isinstance(result, list | tuple) else [result]
        if len(values) != len(self._signature.outputs):
            raise InferenceError(
                f"the model returned {len(values)} tensors; the config declares "
                f"{len(self._signature.outputs)} outputs"
            )
        by_name = {
            spec.name: _to_numpy(torch, value.detach().to("cpu"))
            for spec, value in zip(self._signature.outputs, values, strict=True)
        }
        return {name: by_name[name] for name in outputs}


def _to_torch(torch: Any, array: np.ndarray[Any, Any]) -> Any:
    contiguous = np.ascontiguousarray(array)
    if contiguous.dtype.name == "bfloat16":  # torch reads no ml_dtypes array: same bits
        return torch.from_numpy(contiguous.view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(contiguous)


def _to_numpy(torch: Any, tensor: Any) -> np.ndarray[Any, Any]:
    if tensor.dtype == torch.bfloat16:
        return tensor.view(torch.int16).numpy().view(bfloat16())  # type: ignore[no-any-return]
    return tensor.numpy()  # type: ignore[no-any-return]


def check_torchscript_archive(model_path: Path) -> None:
    """Refuse anything but a TorchScript zip archive before torch sees it."""
    with model_path.open("rb") as handle:
        head = handle.read(4)
    if head.startswith(_PICKLE_PROTOCOL_MARK):
        raise ModelRejected(
            "model.pt is a pickle (torch.save); lambdaserve never unpickles model files. "
            "Export it with torch.jit.script or torch.jit.trace and torch.jit.save"
        )
    if not zipfile.is_zipfile(model_path):
        raise ModelRejected("model.pt is not a TorchScript archive; export it with torch.jit.save")
    with zipfile.ZipFile(model_path) as archive:
        names = archive.namelist()
    if not any("/code/" in n for n in names) or not any(n.endswith("constants.pkl") for n in names):
        raise ModelRejected(
            "model.pt is a torch.save archive (pickled weights), not TorchScript; export it "
            "with torch.jit.script or torch.jit.trace and torch.jit.save"
        )
