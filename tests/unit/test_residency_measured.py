"""Residency measured on real runtimes (in-process moto catalog): an ONNX, a TorchScript and
an OpenVINO model of 8 MB of weights each, their memory measured at load against their
files; a version larger than the budget is UNAVAILABLE in the catalog with the reason."""

from __future__ import annotations

import io
from dataclasses import replace

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from lambdaserve.errors import ModelNotReady, ModelTooLarge
from lambdaserve.protocol.v2 import InferInput, InferRequest
from lambdaserve.wiring.inference import build_model_server
from tests import builders

WIDTH, DEPTH = 1024, 2048  # one FP32 weight of 1024 x 2048: 8 MiB
MB = 1024**2
TORCH_CONFIG = (
    b'platform: "pytorch_libtorch"\nmax_batch_size: 8\n'
    b'input [{ name: "INPUT__0" data_type: TYPE_FP32 dims: [1024] }]\n'
    b'output [{ name: "OUTPUT__0" data_type: TYPE_FP32 dims: [2048] }]\n'
)


def onnx_matmul() -> bytes:
    weight = np.random.default_rng(0).random((WIDTH, DEPTH), np.float32)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"])],
        "matmul",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", WIDTH])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", DEPTH])],
        initializer=[numpy_helper.from_array(weight, "w")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return bytes(model.SerializeToString())


def torchscript_linear() -> bytes:
    import torch

    torch.manual_seed(0)
    module = torch.jit.script(torch.nn.Linear(WIDTH, DEPTH, bias=False))
    buffer = io.BytesIO()
    torch.jit.save(module, buffer)
    return buffer.getvalue()


def publish(aws, model: str, files: dict[str, bytes]) -> None:
    for path, body in files.items():
        aws.put(f"models/{model}/{path}", body)
    aws.services.registrar.reconcile_model(model)


def row(name: str) -> InferRequest:
    x = np.ones((1, WIDTH), np.float32)
    return InferRequest((InferInput(name, "FP32", x.shape, x),))


@pytest.fixture
def big_aws(aws):
    aws.settings = replace(aws.settings, max_model_bytes=64 * MB)
    aws.services.registrar._validator._max_bytes = 64 * MB
    return aws


def test_three_runtimes_memory_measured_at_load_against_their_files(big_aws, tmp_path):
    """Given an ONNX, a TorchScript and an OpenVINO model of 8 MiB of weights, When each is
    loaded, Then its measured memory (stats memory_usage) is at least half its files (the
    weights are resident) and at most its files plus 64 MiB; the table goes to the log."""
    aws = big_aws
    onnx_model = onnx_matmul()
    publish(aws, "onnx", {"1/model.onnx": onnx_model})
    publish(aws, "torch", {"config.pbtxt": TORCH_CONFIG, "1/model.pt": torchscript_linear()})
    publish(aws, "ov", {"config.pbtxt": builders.OPENVINO_CONFIG})
    publish(aws, "ov", {f"1/{n}": b for n, b in builders.openvino_ir(onnx_model, tmp_path).items()})
    server = build_model_server(aws.settings, aws.clients)
    table = []
    for name in ("onnx", "torch", "ov"):
        served = server.resolver.resolve(name, None)
        assert served.record.state == "READY", served.record.reason
        server.infer(name, None, row(served.signature.inputs[0].name), lambda s, o: o)
        [entry] = server.stats.snapshot(name)["model_stats"]
        [usage] = entry["memory_usage"]
        table.append((name, served.record.size, usage["byte_size"]))
    print("\nmodel  files(MiB)  measured(MiB)")
    for name, files, measured in table:
        print(f"{name:6} {files / MB:10.1f} {measured / MB:14.1f}")
        assert files / 2 <= measured <= files + 64 * MB, (name, files, measured)


def test_a_version_larger_than_the_budget_is_unavailable_with_its_size_and_the_budget(big_aws):
    """Given a process with a 4 MiB residency budget, When a request reaches a version of
    8 MiB, Then it is refused (503) and the catalog says UNAVAILABLE with its size and the
    budget; a small model still loads and answers."""
    aws = big_aws
    publish(aws, "big", {"1/model.onnx": onnx_matmul()})
    publish(aws, "small", {"1/model.onnx": builders.onnx_mlp()})
    server = build_model_server(replace(aws.settings, max_loaded_bytes=4 * MB), aws.clients)
    with pytest.raises(ModelTooLarge, match=r"needs 8\.0 MB of memory \(its files\)"):
        server.infer("big", None, row("x"), lambda s, o: o)
    record = aws.services.catalog.get_version("big", 1)
    assert record.state == "UNAVAILABLE"
    assert "needs 8.0 MB of memory" in record.reason and "budget of 4.0 MB" in record.reason
    server.resolver.forget("big")
    with pytest.raises(ModelNotReady, match="residency budget of 4.0 MB"):
        server.infer("big", None, row("x"), lambda s, o: o)
    x = np.ones((1, 4), np.float32)
    small = InferRequest((InferInput("INPUT__0", "FP32", x.shape, x),))
    assert server.infer("small", None, small, lambda s, o: o)["OUTPUT__0"].shape == (1, 3)
