"""Real model files built by the tests: ONNX via onnx.helper, TorchScript via torch.jit."""

from __future__ import annotations

import io
import pickle
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from lambdaserve.local.demo import demo_mlp_bytes


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


def onnx_cnn(seed: int = 0) -> bytes:
    """A small CNN: image [-1, 3, 8, 8] -> Conv 3x3 -> Relu -> global average -> logits [-1, 4]."""
    rng = np.random.default_rng(seed)
    weight = rng.standard_normal((4, 3, 3, 3)).astype(np.float32)
    bias = rng.standard_normal(4).astype(np.float32)
    graph = helper.make_graph(
        [
            helper.make_node("Conv", ["image", "W", "B"], ["c"], pads=[1, 1, 1, 1]),
            helper.make_node("Relu", ["c"], ["r"]),
            helper.make_node("GlobalAveragePool", ["r"], ["g"]),
            helper.make_node("Flatten", ["g"], ["logits"], axis=1),
        ],
        "cnn",
        [helper.make_tensor_value_info("image", TensorProto.FLOAT, ["batch", 3, 8, 8])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", 4])],
        initializer=[numpy_helper.from_array(weight, "W"), numpy_helper.from_array(bias, "B")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return bytes(model.SerializeToString())


def onnx_datatypes() -> bytes:
    """One model, several v2 datatypes: half = 2*half (FP16), next = ids+1 (INT64),
    flipped = not flags (BOOL), echo = text (BYTES). Every input [-1, 3]."""
    two = numpy_helper.from_array(np.array(2.0, np.float32), "two")
    one = numpy_helper.from_array(np.array(1, np.int64), "one")
    nodes = [
        helper.make_node("Cast", ["half"], ["half32"], to=TensorProto.FLOAT),
        helper.make_node("Mul", ["half32", "two"], ["doubled32"]),
        helper.make_node("Cast", ["doubled32"], ["doubled"], to=TensorProto.FLOAT16),
        helper.make_node("Add", ["ids", "one"], ["next"]),
        helper.make_node("Not", ["flags"], ["flipped"]),
        helper.make_node("Identity", ["text"], ["echo"]),
    ]

    def io(name: str, kind: int) -> onnx.ValueInfoProto:
        return helper.make_tensor_value_info(name, kind, ["batch", 3])

    graph = helper.make_graph(
        nodes,
        "datatypes",
        [
            io("half", TensorProto.FLOAT16),
            io("ids", TensorProto.INT64),
            io("flags", TensorProto.BOOL),
            io("text", TensorProto.STRING),
        ],
        [
            io("doubled", TensorProto.FLOAT16),
            io("next", TensorProto.INT64),
            io("flipped", TensorProto.BOOL),
            io("echo", TensorProto.STRING),
        ],
        initializer=[two, one],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return bytes(model.SerializeToString())


def torch_twins() -> dict[str, tuple[bytes, bytes, bytes]]:
    """TorchScript models with their ONNX twins (same weights) and Triton configs:
    name -> (model.pt, model.onnx, config.pbtxt)."""
    import torch

    torch.manual_seed(0)

    class AddSub(torch.nn.Module):
        def forward(self, a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            return a + b, a - b

    mlp = torch.nn.Sequential(torch.nn.Linear(784, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10))
    cnn = torch.nn.Sequential(
        torch.nn.Conv2d(3, 4, 3, padding=1),
        torch.nn.ReLU(),
        torch.nn.AdaptiveAvgPool2d(1),
        torch.nn.Flatten(),
    )
    specs = {
        "add_sub": (AddSub(), (torch.zeros(1, 4), torch.zeros(1, 4)), ["a", "b"], ["sum", "diff"]),
        "mlp": (mlp, (torch.zeros(1, 784),), ["INPUT__0"], ["OUTPUT__0"]),
        "cnn": (cnn, (torch.zeros(1, 3, 8, 8),), ["image"], ["logits"]),
    }
    twins = {}
    for name, (module, example, inputs, outputs) in specs.items():
        module.eval()
        scripted = io.BytesIO()
        torch.jit.save(torch.jit.trace(module, example), scripted)
        exported = io.BytesIO()
        torch.onnx.export(
            module,
            example,
            exported,
            input_names=inputs,
            output_names=outputs,
            dynamic_axes={n: {0: "batch"} for n in inputs + outputs},
            opset_version=17,
            dynamo=False,
        )
        twins[name] = (
            scripted.getvalue(),
            exported.getvalue(),
            _config(module, example, inputs, outputs),
        )
    return twins


def _config(module, example, inputs, outputs) -> bytes:
    import torch

    with torch.no_grad():
        results = module(*example)
    results = results if isinstance(results, tuple) else (results,)

    def tensor(name: str, shape) -> str:
        dims = ", ".join(str(d) for d in shape[1:])
        return f'{{ name: "{name}" data_type: TYPE_FP32 dims: [ {dims} ] }}'

    text = "max_batch_size: 8\n"
    text += (
        "input [ "
        + ", ".join(tensor(n, t.shape) for n, t in zip(inputs, example, strict=True))
        + " ]\n"
    )
    text += (
        "output [ "
        + ", ".join(tensor(n, t.shape) for n, t in zip(outputs, results, strict=True))
        + " ]\n"
    )
    return text.encode()


def onnx_identity(width: int) -> bytes:
    """y = x for FP32 [-1, width]: outputs as large as inputs (large-result tests)."""
    graph = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["y"])],
        "identity",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", width])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", width])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return bytes(model.SerializeToString())


def onnx_expand(width: int) -> bytes:
    """y = x repeated ``width`` times, FP32 [-1, 1] -> [-1, width]: a small request with an
    answer as large as wanted (answers over Lambda's invoke limit)."""
    shape = helper.make_tensor("shape", TensorProto.INT64, [2], [1, width])
    graph = helper.make_graph(
        [helper.make_node("Expand", ["x", "shape"], ["y"])],
        "expand",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", width])],
        initializer=[shape],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return bytes(model.SerializeToString())


def onnx_identity_shape(shape: list[int]) -> bytes:
    """y = x for FP32 of a fixed ``shape`` (huge static dimensions included)."""
    graph = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["y"])],
        "identity_static",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return bytes(model.SerializeToString())


def binary_v2_request(array: np.ndarray, name: str = "INPUT__0") -> tuple[bytes, str]:
    """A v2 request with ``array`` as a binary tensor, as tritonclient writes it: the body
    and its Inference-Header-Content-Length."""
    import tritonclient.http as triton

    tensor = triton.InferInput(name, list(array.shape), "FP32")
    tensor.set_data_from_numpy(array, binary_data=True)
    body, header_length = triton.InferenceServerClient.generate_request_body([tensor])
    return body, str(header_length)


def onnx_bf16(width: int = 4) -> bytes:
    """x BF16 [-1, width] -> as_float = x as FP32, doubled = 2x as BF16 (onnxruntime's CPU
    kernels compute in float; Cast carries BF16 in and out)."""
    graph = helper.make_graph(
        [
            helper.make_node("Cast", ["x"], ["as_float"], to=TensorProto.FLOAT),
            helper.make_node("Add", ["as_float", "as_float"], ["twice"]),
            helper.make_node("Cast", ["twice"], ["doubled"], to=TensorProto.BFLOAT16),
        ],
        "bf16",
        [helper.make_tensor_value_info("x", TensorProto.BFLOAT16, ["batch", width])],
        [
            helper.make_tensor_value_info("as_float", TensorProto.FLOAT, ["batch", width]),
            helper.make_tensor_value_info("doubled", TensorProto.BFLOAT16, ["batch", width]),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return bytes(model.SerializeToString())


def onnx_rows_of(rows: int, cols: int) -> bytes:
    """x FP32 [-1, rows, cols] -> y = x (same shape), row_sums = x summed over cols [-1, rows]:
    a model whose tensors a config's reshape flattens for clients."""
    axes = numpy_helper.from_array(np.array([2], dtype=np.int64), name="axes")
    graph = helper.make_graph(
        [
            helper.make_node("Identity", ["x"], ["y"]),
            helper.make_node("ReduceSum", ["x", "axes"], ["row_sums"], keepdims=0),
        ],
        "rows_of",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", rows, cols])],
        [
            helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", rows, cols]),
            helper.make_tensor_value_info("row_sums", TensorProto.FLOAT, ["batch", rows]),
        ],
        initializer=[axes],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return bytes(model.SerializeToString())


def onnx_string_identity(output: str = "y_bytes") -> bytes:
    """x STRING [-1] -> ``output`` = x: strings through a model, as TF Serving clients send
    them (``{"b64": ...}``; outputs named *_bytes come back base64-encoded)."""
    graph = helper.make_graph(
        [helper.make_node("Identity", ["x"], [output])],
        "strings",
        [helper.make_tensor_value_info("x", TensorProto.STRING, ["batch"])],
        [helper.make_tensor_value_info(output, TensorProto.STRING, ["batch"])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return bytes(model.SerializeToString())


OPENVINO_CONFIG = b'backend: "openvino"\n'


def openvino_ir(onnx_model: bytes, directory: Path) -> dict[str, bytes]:
    """The OpenVINO IR of an ONNX model (openvino.convert_model + save_model, weights kept
    FP32): {"model.xml": ..., "model.bin": ...}, as a version directory holds them."""
    import openvino

    directory.mkdir(parents=True, exist_ok=True)
    source = directory / "source.onnx"
    source.write_bytes(onnx_model)
    openvino.save_model(
        openvino.convert_model(str(source)), str(directory / "model.xml"), compress_to_fp16=False
    )
    return {name: (directory / name).read_bytes() for name in ("model.xml", "model.bin")}


def onnx_simple(datatype: str = "INT32") -> tuple[bytes, bytes]:
    """Triton's ``simple`` example model (``simple_string`` for BYTES) as ONNX, with its
    config: OUTPUT0 = INPUT0 + INPUT1, OUTPUT1 = INPUT0 - INPUT1, [batch, 16]; strings carry
    decimal integers (cast to INT32 and back), as Triton's simple_string does."""
    onnx_type = TensorProto.STRING if datatype == "BYTES" else TensorProto.INT32
    names = ("INPUT0", "INPUT1", "OUTPUT0", "OUTPUT1")
    tensors = [helper.make_tensor_value_info(n, onnx_type, ["batch", 16]) for n in names]
    if datatype == "BYTES":
        nodes = [
            helper.make_node("Cast", ["INPUT0"], ["a"], to=TensorProto.INT32),
            helper.make_node("Cast", ["INPUT1"], ["b"], to=TensorProto.INT32),
            helper.make_node("Add", ["a", "b"], ["sum"]),
            helper.make_node("Sub", ["a", "b"], ["diff"]),
            helper.make_node("Cast", ["sum"], ["OUTPUT0"], to=TensorProto.STRING),
            helper.make_node("Cast", ["diff"], ["OUTPUT1"], to=TensorProto.STRING),
        ]
    else:
        nodes = [
            helper.make_node("Add", ["INPUT0", "INPUT1"], ["OUTPUT0"]),
            helper.make_node("Sub", ["INPUT0", "INPUT1"], ["OUTPUT1"]),
        ]
    graph = helper.make_graph(nodes, "simple", tensors[:2], tensors[2:])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)])
    model.ir_version = 8
    config_type = "TYPE_STRING" if datatype == "BYTES" else "TYPE_INT32"
    config = 'platform: "onnxruntime_onnx"\nmax_batch_size: 8\n' + "".join(
        f'{kind} [{{ name: "{name}" data_type: {config_type} dims: [16] }}]\n'
        for kind, name in zip(("input", "input", "output", "output"), names, strict=True)
    )
    return bytes(model.SerializeToString()), config.encode()
