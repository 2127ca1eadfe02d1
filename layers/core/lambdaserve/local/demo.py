"""A small ONNX model for the demo: y = softmax(relu(x @ W1 + b1) @ W2 + b2)."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

DEMO_MODEL = "demo-mlp"


def demo_mlp_bytes(inputs: int = 4, hidden: int = 8, outputs: int = 3, seed: int = 0) -> bytes:
    """Serialized ONNX MLP with a dynamic batch dimension (opset 17)."""
    rng = np.random.default_rng(seed)
    weights = {
        "W1": rng.standard_normal((inputs, hidden)).astype(np.float32),
        "b1": np.zeros(hidden, np.float32),
        "W2": rng.standard_normal((hidden, outputs)).astype(np.float32),
        "b2": np.zeros(outputs, np.float32),
    }
    nodes = [
        helper.make_node("MatMul", ["INPUT__0", "W1"], ["h0"]),
        helper.make_node("Add", ["h0", "b1"], ["h1"]),
        helper.make_node("Relu", ["h1"], ["h2"]),
        helper.make_node("MatMul", ["h2", "W2"], ["h3"]),
        helper.make_node("Add", ["h3", "b2"], ["h4"]),
        helper.make_node("Softmax", ["h4"], ["OUTPUT__0"], axis=-1),
    ]
    graph = helper.make_graph(
        nodes,
        "demo_mlp",
        [helper.make_tensor_value_info("INPUT__0", TensorProto.FLOAT, ["batch", inputs])],
        [helper.make_tensor_value_info("OUTPUT__0", TensorProto.FLOAT, ["batch", outputs])],
        initializer=[numpy_helper.from_array(v, name=k) for k, v in weights.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return bytes(model.SerializeToString())
