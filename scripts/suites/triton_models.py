"""The models Triton's test suites name, built here (ONNX via the `onnx` helper API, Python
models as Triton's python_backend runs them) and published to a lambdaserve dev stack the way
a user publishes: an S3 upload in Triton's repository layout, then READY in the catalog.

- `example_models()`: the repository of Triton's client examples (docs/examples), seven
  models, as `simple_http_model_control.py` and `python_http_aio_test.py` count them.
- `qa_models()`: what qa/L0_http's Python tests add (`onnx_zero_*` identity models,
  `simple_identity_int64`).
"""

from __future__ import annotations

import json
import time
import urllib.request
from collections.abc import Iterable

import boto3
import numpy as np
import onnx
from onnx import TensorProto, helper

BUCKET = "lambdaserve-models"
LABELS = 1000

IDENTITY_PY = '''import json

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    """Answers every request with its INPUT0 as OUTPUT0."""

    def initialize(self, args):
        self.config = json.loads(args["model_config"])

    def execute(self, requests):
        responses = []
        for request in requests:
            data = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", data)]))
        return responses
'''

_TYPES = {
    "TYPE_INT32": TensorProto.INT32,
    "TYPE_INT8": TensorProto.INT8,
    "TYPE_FP32": TensorProto.FLOAT,
    "TYPE_FP16": TensorProto.FLOAT16,
    "TYPE_STRING": TensorProto.STRING,
}


def _onnx(nodes: list[onnx.NodeProto], inputs: list, outputs: list, inits=()) -> bytes:
    graph = helper.make_graph(nodes, "g", inputs, outputs, initializer=list(inits))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return bytes(model.SerializeToString())


def _tensor(name: str, dtype: str, dims: list[int | None]) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, _TYPES[dtype], dims)


def _io(kind: str, name: str, dtype: str, dims: list[int], extra: str = "") -> str:
    return f'{kind} [{{ name: "{name}" data_type: {dtype} dims: {dims} {extra}}}]\n'


def add_sub_onnx(dtype: str) -> bytes:
    """Triton's `simple` family: OUTPUT0 = INPUT0 + INPUT1, OUTPUT1 = INPUT0 - INPUT1,
    [batch, 16]; strings carry decimal integers (cast to INT32 and back)."""
    names = ("INPUT0", "INPUT1", "OUTPUT0", "OUTPUT1")
    values = [_tensor(n, dtype, [None, 16]) for n in names]
    if dtype == "TYPE_STRING":
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
    return _onnx(nodes, values[:2], values[2:])


def add_sub_config(name: str, dtype: str) -> str:
    return (
        f'name: "{name}"\nplatform: "onnxruntime_onnx"\nmax_batch_size: 8\n'
        + "".join(_io("input", n, dtype, [16]) for n in ("INPUT0", "INPUT1"))
        + "".join(_io("output", n, dtype, [16]) for n in ("OUTPUT0", "OUTPUT1"))
    )


def identity_onnx(dtype: str, io_count: int, dims: list[int], batching: bool) -> bytes:
    """qa's `onnx_zero_<n>_<type>`: OUTPUTi = INPUTi, each dynamic dim named apart."""
    inputs, outputs, nodes = [], [], []
    for i in range(io_count):
        shape: list[int | str | None] = [None] if batching else []
        shape += [d if d > 0 else f"d{i}_{k}" for k, d in enumerate(dims)]
        inputs.append(helper.make_tensor_value_info(f"INPUT{i}", _TYPES[dtype], shape))
        outputs.append(helper.make_tensor_value_info(f"OUTPUT{i}", _TYPES[dtype], shape))
        nodes.append(helper.make_node("Identity", [f"INPUT{i}"], [f"OUTPUT{i}"]))
    return _onnx(nodes, inputs, outputs)


def identity_config(name: str, dtype: str, io_count: int, dims: list[int], extra: str = "") -> str:
    text = f'name: "{name}"\nplatform: "onnxruntime_onnx"\nmax_batch_size: 8\n'
    for i in range(io_count):
        text += _io("input", f"INPUT{i}", dtype, dims) + _io("output", f"OUTPUT{i}", dtype, dims)
    return text + extra


def classifier_onnx(batching: bool) -> bytes:
    """A densenet-shaped stand-in (no trained weights): data_0 [3,224,224] -> fc6_1 [1000],
    the per-channel means times a fixed matrix."""
    weights = np.random.default_rng(0).standard_normal((3, LABELS)).astype(np.float32)
    inits = [
        helper.make_tensor("w", TensorProto.FLOAT, [3, LABELS], weights.ravel().tolist()),
        helper.make_tensor("zero", TensorProto.INT64, [1], [0]),
    ]
    if batching:
        nodes = [
            helper.make_node("ReduceMean", ["data_0"], ["mean"], axes=[2, 3], keepdims=0),
            helper.make_node("MatMul", ["mean", "w"], ["fc6_1"]),
        ]
    else:
        nodes = [
            helper.make_node("ReduceMean", ["data_0"], ["mean"], axes=[1, 2], keepdims=0),
            helper.make_node("Unsqueeze", ["mean", "zero"], ["row"]),
            helper.make_node("MatMul", ["row", "w"], ["scores"]),
            helper.make_node("Squeeze", ["scores", "zero"], ["fc6_1"]),
        ]
    batch: list[int | None] = [None] if batching else []
    return _onnx(
        nodes,
        [_tensor("data_0", "TYPE_FP32", [*batch, 3, 224, 224])],
        [_tensor("fc6_1", "TYPE_FP32", [*batch, LABELS])],
        inits,
    )


def densenet_config() -> str:
    return (
        'name: "densenet_onnx"\nplatform: "onnxruntime_onnx"\nmax_batch_size: 0\n'
        + _io("input", "data_0", "TYPE_FP32", [3, 224, 224], "format: FORMAT_NCHW ")
        + _io("output", "fc6_1", "TYPE_FP32", [LABELS], 'label_filename: "labels.txt" ')
    )


def python_config(name: str, dtype: str) -> str:
    return (
        f'name: "{name}"\nbackend: "python"\nmax_batch_size: 8\n'
        + _io("input", "INPUT0", dtype, [-1])
        + _io("output", "OUTPUT0", dtype, [-1])
    )


def sequence_config(name: str, controls: Iterable[str]) -> str:
    """Triton's sequence examples' configs over identity stand-ins without the control
    inputs: refused at publish (tests/sequence_models.py builds the real ones)."""
    control = ", ".join(
        f'{{ name: "{c}" control [{{ kind: CONTROL_SEQUENCE_{c} int32_false_true: [0, 1] }}] }}'
        for c in controls
    )
    return (
        f'name: "{name}"\nplatform: "onnxruntime_onnx"\nmax_batch_size: 8\n'
        f"sequence_batching {{ control_input [ {control} ] }}\n"
        + _io("input", "INPUT", "TYPE_INT32", [1])
        + _io("output", "OUTPUT", "TYPE_INT32", [1])
    )


def _model(name: str, config: str, version_files: dict[str, bytes]) -> dict[str, bytes]:
    files = {f"models/{name}/config.pbtxt": config.encode()}
    files.update({f"models/{name}/1/{k}": v for k, v in version_files.items()})
    return files


def example_models() -> dict[str, bytes]:
    """Bucket key -> bytes for the seven models of Triton's example repository."""
    labels = "".join(f"CLASS_{i}\n" for i in range(LABELS)).encode()
    files = {"models/densenet_onnx/labels.txt": labels}
    files |= _model("densenet_onnx", densenet_config(), {"model.onnx": classifier_onnx(False)})
    files |= _model(
        "simple", add_sub_config("simple", "TYPE_INT32"), {"model.onnx": add_sub_onnx("TYPE_INT32")}
    )
    files |= _model(
        "simple_int8",
        add_sub_config("simple_int8", "TYPE_INT8"),
        {"model.onnx": add_sub_onnx("TYPE_INT8")},
    )
    files |= _model(
        "simple_string",
        add_sub_config("simple_string", "TYPE_STRING"),
        {"model.onnx": add_sub_onnx("TYPE_STRING")},
    )
    files |= _model(
        "simple_identity",
        python_config("simple_identity", "TYPE_STRING"),
        {"model.py": IDENTITY_PY.encode()},
    )
    sequence = identity_onnx("TYPE_INT32", 1, [1], batching=True)
    for name, controls in (
        ("simple_sequence", ("START", "READY")),
        ("simple_dyna_sequence", ("START", "END", "READY")),
    ):
        files |= _model(name, sequence_config(name, controls), {"model.onnx": sequence})
    return files


def qa_models() -> dict[str, bytes]:
    """Bucket key -> bytes for what qa/L0_http's Python tests add to the repository."""
    queue = (
        "dynamic_batching { max_queue_delay_microseconds: 1000000 preferred_batch_size: [8] "
        "default_queue_policy { max_queue_size: 1 } }\n"
    )
    specs = [  # name, datatype, inputs, dims, extra config
        ("onnx_zero_1_float32", "TYPE_FP32", 1, [-1], ""),
        ("onnx_zero_1_float32_queue", "TYPE_FP32", 1, [-1], queue),
        ("onnx_zero_3_float32", "TYPE_FP32", 3, [-1], ""),
        ("onnx_zero_1_float16", "TYPE_FP16", 1, [-1, -1], ""),
        ("onnx_zero_1_object", "TYPE_STRING", 1, [-1], ""),
        ("onnx_zero_1_object_1_element", "TYPE_STRING", 1, [1], ""),
    ]
    files: dict[str, bytes] = {}
    for name, dtype, count, dims, extra in specs:
        model = identity_onnx(dtype, count, dims, batching=True)
        files |= _model(
            name, identity_config(name, dtype, count, dims, extra), {"model.onnx": model}
        )
    files |= _model(
        "simple_identity_int64",
        python_config("simple_identity_int64", "TYPE_INT64"),
        {"model.py": IDENTITY_PY.encode()},
    )
    return files


def publish(files: dict[str, bytes], aws_endpoint: str) -> None:
    s3 = boto3.client(
        "s3",
        endpoint_url=aws_endpoint,
        region_name="us-east-1",
        aws_access_key_id="test",
        aws_secret_access_key="test",
    )
    for key, body in sorted(files.items()):
        s3.put_object(Bucket=BUCKET, Key=key, Body=body)


def model_names(files: dict[str, bytes]) -> set[str]:
    return {key.split("/")[1] for key in files}


def index(management_url: str) -> list[dict[str, str]]:
    request = urllib.request.Request(
        f"{management_url}/v2/repository/index", data=b"{}", method="POST"
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.loads(response.read())


def load(management_url: str, name: str, config: dict[str, object]) -> None:
    """Triton's explicit load with a config override (serve the model again)."""
    body = json.dumps({"parameters": {"config": json.dumps(config)}}).encode()
    url = f"{management_url}/v2/repository/models/{name}/load"
    request = urllib.request.Request(url, data=body, method="POST")
    with urllib.request.urlopen(request, timeout=60) as response:
        response.read()


def wait_settled(names: set[str], management_url: str, timeout_s: float = 180) -> dict[str, str]:
    """Wait until every model has left LOADING; name -> state (reason when not READY)."""
    deadline = time.monotonic() + timeout_s
    states: dict[str, str] = {}
    while time.monotonic() < deadline:
        states = {}
        for entry in index(management_url):
            if entry["name"] in names:
                states[entry["name"]] = (
                    entry["state"]
                    if entry["state"] != "UNAVAILABLE"
                    else f"UNAVAILABLE: {entry['reason']}"
                )
        if names <= states.keys() and not any(s == "LOADING" for s in states.values()):
            return states
        time.sleep(0.5)
    missing = sorted(names - {n for n, s in states.items() if s != "LOADING"})
    raise TimeoutError(f"models not settled after {timeout_s:.0f} s: {missing}")
