"""Real model files built by the tests: ONNX via onnx.helper, TorchScript via torch.jit."""

from __future__ import annotations

import io
import pickle
from pathlib import Path

import numpy as np
import onnx
from lambdaserve.local.demo import demo_mlp_bytes
from onnx import TensorProto, helper, numpy_helper


def onnx_mlp(inputs: int = 4, outputs: int = 3, seed: int = 0) -> bytes:
    """An MLP with a dynamic batch dimension: INPUT__0 [-1, inputs] -> OUTPUT__0."""
    return demo_mlp_bytes(inputs=inputs, hidden=8, outputs=outputs, seed=seed)


def onnx_add_sub() -> bytes:
    """Two FP32 inputs a, b [-1, 4] -> sum = a + b, diff = a - b."""
    a = helper.make_tensor_value_info("a", TensorProto.FLOAT, ["batch", 4])
    b = helper.make_tensor_value_info("b", TensorProto.FLOAT, ["batch", 4])
    graph = helper.make_graph(
        [
            helper.make_node("Add", ["a", "b"], ["sum"]),
            helper.make_node("Sub", ["a", "b"], ["diff"]),
        ],
        "add_sub",
        [a, b],
        [
            helper.make_tensor_value_info("sum", TensorProto.FLOAT, ["batch", 4]),
            helper.make_tensor_value_info("diff", TensorProto.FLOAT, ["batch", 4]),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return bytes(model.SerializeToString())


def onnx_with_external_data(directory: Path, location: str) -> bytes:
    """A model whose weight lives in an external file at ``location`` (relative path).

    The external file is written under ``directory`` when ``location`` stays inside it.
    """
    weight = np.arange(16, dtype=np.float32).reshape(4, 4)
    tensor = numpy_helper.from_array(weight, name="W")
    tensor.ClearField("raw_data")
    tensor.data_location = TensorProto.EXTERNAL
    for key, value in (("location", location), ("offset", "0"), ("length", str(weight.nbytes))):
        entry = tensor.external_data.add()
        entry.key, entry.value = key, value
    target = (directory / location).resolve()
    if target.is_relative_to(directory.resolve()):
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(weight.tobytes())
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "W"], ["y"])],
        "external",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 4])],
        initializer=[tensor],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return bytes(model.SerializeToString())


def torchscript_mlp() -> bytes:
    """A scripted torch MLP 4 -> 3 saved with torch.jit.save."""
    import torch

    torch.manual_seed(0)
    module = torch.jit.script(
        torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 3))
    )
    buffer = io.BytesIO()
    torch.jit.save(module, buffer)
    return buffer.getvalue()


def torch_save_state_dict() -> bytes:
    """What torch.save writes: a zip archive of pickled weights, not TorchScript."""
    import torch

    buffer = io.BytesIO()
    torch.save(torch.nn.Linear(4, 3).state_dict(), buffer)
    return buffer.getvalue()


def plain_pickle() -> bytes:
    """A legacy pickled .pt file (what ``torch.save(..., _use_new_zipfile_serialization=False)``
    and plain pickle write): the first byte is the pickle protocol mark."""
    return pickle.dumps({"weights": [1.0, 2.0]}, protocol=4)


TORCHSCRIPT_CONFIG = b"""
name: "ts"
platform: "pytorch_libtorch"
max_batch_size: 8
input [ { name: "INPUT__0" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "OUTPUT__0" data_type: TYPE_FP32 dims: [ 3 ] } ]
"""


def load_onnx(data: bytes) -> onnx.ModelProto:
    return onnx.load_from_string(data)
