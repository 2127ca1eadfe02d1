"""Device selection: CUDA when asked for (KIND_GPU or LAMBDASERVE_DEVICE=cuda) and present."""

from __future__ import annotations

import pytest

from lambdaserve.modelconfig import ModelConfig
from lambdaserve.runtimes import LoadOptions, wants_gpu
from lambdaserve.runtimes import onnx as onnx_runtime


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

    from lambdaserve.modelconfig import TensorSpec
    from lambdaserve.runtimes import Signature
    from lambdaserve.runtimes.torchscript import TorchScriptRuntime
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
