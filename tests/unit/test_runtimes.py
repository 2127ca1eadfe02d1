"""Device selection: CUDA when asked for (KIND_GPU or LAMBDASERVE_DEVICE=cuda) and present."""

from __future__ import annotations

import pytest

from lambdaserve.config.model_config import ModelConfig
from lambdaserve.runtimes import onnx as onnx_runtime
from lambdaserve.runtimes.base import LoadOptions, wants_gpu


@pytest.mark.parametrize(
    ("kind", "device", "expected"),
    [
        ("GPU", "auto", True),
        ("AUTO", "auto", False),
        ("CPU", "auto", False),
        ("CPU", "cuda", True),
        ("GPU", "cpu", False),
    ],
)
def test_gpu_is_wanted_for_gpu_instance_groups_or_when_forced(kind, device, expected):
    assert (
        wants_gpu(ModelConfig(name="m", instance_kind=kind), LoadOptions(device=device)) is expected
    )


def test_cuda_provider_first_when_the_build_has_it(monkeypatch):
    monkeypatch.setattr(
        onnx_runtime.ort,
        "get_available_providers",
        lambda: ["CUDAExecutionProvider", "CPUExecutionProvider"],
    )
    assert onnx_runtime.providers_for(True) == ["CUDAExecutionProvider", "CPUExecutionProvider"]
    assert onnx_runtime.providers_for(False) == ["CPUExecutionProvider"]


def test_a_cpu_only_build_falls_back_to_cpu(monkeypatch):
    monkeypatch.setattr(
        onnx_runtime.ort, "get_available_providers", lambda: ["CPUExecutionProvider"]
    )
    assert onnx_runtime.providers_for(True) == ["CPUExecutionProvider"]


@pytest.mark.torch
def test_torchscript_without_cuda_loads_a_gpu_model_on_cpu(tmp_path):
    import torch

    from lambdaserve.runtimes.torchscript import TorchScriptRuntime
    from lambdaserve.tensors.signature import Signature, TensorSpec
    from tests import builders

    if torch.cuda.is_available():
        pytest.skip("this test is about machines without CUDA")
    path = tmp_path / "model.pt"
    path.write_bytes(builders.torchscript_mlp())
    spec_in, spec_out = (
        TensorSpec("INPUT__0", "FP32", (-1, 4)),
        TensorSpec("OUTPUT__0", "FP32", (-1, 3)),
    )
    config = ModelConfig(name="m", inputs=(spec_in,), outputs=(spec_out,), instance_kind="GPU")
    loaded = TorchScriptRuntime().load(
        path, config, Signature((spec_in,), (spec_out,)), LoadOptions()
    )
    assert loaded.device == "cpu"


def test_torchscript_takes_and_gives_bf16_as_ml_dtypes_arrays(tmp_path):
    import io

    import ml_dtypes
    import numpy as np
    import torch

    from lambdaserve.runtimes.torchscript import TorchScriptRuntime
    from lambdaserve.tensors.signature import Signature, TensorSpec

    # Given a TorchScript module that doubles a bfloat16 tensor and reports it as float too
    class Doubler(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            assert x.dtype == torch.bfloat16
            return x * 2, x.float()

    buffer = io.BytesIO()
    torch.jit.save(torch.jit.script(Doubler()), buffer)
    path = tmp_path / "model.pt"
    path.write_bytes(buffer.getvalue())
    x_in = TensorSpec("x", "BF16", (-1, 3))
    outs = (TensorSpec("doubled", "BF16", (-1, 3)), TensorSpec("as_float", "FP32", (-1, 3)))
    config = ModelConfig(name="m", inputs=(x_in,), outputs=outs)
    loaded = TorchScriptRuntime().load(path, config, Signature((x_in,), outs), LoadOptions())
    # When it runs on BF16 values
    x = np.array([[1.5, -3.0, 0.25]], dtype=ml_dtypes.bfloat16)
    result = loaded.run({"x": x}, ["doubled", "as_float"])
    # Then the module saw the same bits and BF16 comes back as BF16
    assert result["doubled"].dtype == ml_dtypes.bfloat16
    np.testing.assert_array_equal(result["doubled"].astype(np.float32), [[3.0, -6.0, 0.5]])
    np.testing.assert_array_equal(result["as_float"], [[1.5, -3.0, 0.25]])
