"""TorchScript backend: ``torch.jit.load`` only, never ``torch.load`` (pickle)."""

from __future__ import annotations

import zipfile
from pathlib import Path

from lambdaserve.errors import ModelRejected
from lambdaserve.modelconfig import ModelConfig
from lambdaserve.runtimes import Signature

_PICKLE_PROTOCOL_MARK = b"\x80"


class TorchScriptRuntime:
    """Validates and (later) serves ``model.pt`` TorchScript archives."""

    name = "torchscript"

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
            raise ModelRejected(
                "PyTorch is not installed where this version was validated; install "
                "lambdaserve[torch] (torch==2.13.0) or publish the model as model.onnx"
            ) from exc
        try:
            module = torch.jit.load(str(model_path), map_location="cpu")
        except Exception as exc:  # torch raises RuntimeError subclasses with long texts
            first = str(exc).strip().splitlines()[0][:300] if str(exc).strip() else ""
            raise ModelRejected(f"torch.jit.load cannot load model.pt: {first}") from exc
        module.eval()
        return Signature(inputs=config.inputs, outputs=config.outputs)


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
