"""Triton's ragged batching (docs/user_guide/ragged_batching.md; core's BackendInputCollector):
inputs with allow_ragged_batch joined in one dimension, the six batch_input kinds computed from
the formed batch, and batch_output BATCH_SCATTER_WITH_INPUT_SHAPE cut back per request; an
ONNX model receives a ragged batch of 3 requests of different lengths in one execution."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from lambdaserve.batching.ragged import batch_input_tensor, member_outputs, model_inputs
from lambdaserve.config.documents import parse_document
from lambdaserve.config.model_config import build
from lambdaserve.config.ragged_batching import BatchInput
from lambdaserve.config.support import warnings_for
from lambdaserve.errors import InvalidInput
from lambdaserve.protocol.v2 import InferInput, InferRequest
from lambdaserve.wiring.inference import build_model_server

KINDS = {
    "COUNT": ("BATCH_ELEMENT_COUNT", "TYPE_FP32"),
    "ACC": ("BATCH_ACCUMULATED_ELEMENT_COUNT", "TYPE_INT32"),
    "ACC0": ("BATCH_ACCUMULATED_ELEMENT_COUNT_WITH_ZERO", "TYPE_INT32"),
    "MAXSHAPE": ("BATCH_MAX_ELEMENT_COUNT_AS_SHAPE", "TYPE_FP32"),
    "ITEMS": ("BATCH_ITEM_SHAPE", "TYPE_INT32"),
    "FLAT": ("BATCH_ITEM_SHAPE_FLATTEN", "TYPE_INT32"),
}
CONFIG = (
    'platform: "onnxruntime_onnx"\nmax_batch_size: 16\n'
    'input [{ name: "INPUT" data_type: TYPE_FP32 dims: [ -1 ] allow_ragged_batch: true }]\n'
    + "".join(
        f'batch_input [{{ kind: {kind} target_name: "{name}" data_type: {dtype} '
        'source_input: "INPUT" }]\n'
        for name, (kind, dtype) in KINDS.items()
    )
    + 'batch_output [{ kind: BATCH_SCATTER_WITH_INPUT_SHAPE target_name: "SCATTER" '
    'source_input: "INPUT" }]\n'
    "dynamic_batching { max_queue_delay_microseconds: 1000 }\n"
)


def ragged_model() -> bytes:
    """INPUT [-1] (the requests' data joined) and the six batch inputs in; out: SCATTER =
    INPUT * 2 (one dimension, scattered back by INPUT's shape), and per batch item (first
    dimension the item count): OUT_COUNT, OUT_ACC, OUT_ACC0 (= ACC0's differences), OUT_MAX
    (MAXSHAPE's length), OUT_ITEMS, OUT_FLAT."""
    two = numpy_helper.from_array(np.array(2, np.float32), "two")
    consts = [
        numpy_helper.from_array(np.array([v], np.int64), n)
        for n, v in (("zero", 0), ("one", 1), ("minus_one", -1), ("big", 1 << 30))
    ]
    nodes = [
        helper.make_node("Mul", ["INPUT", "two"], ["SCATTER"]),
        helper.make_node("Identity", ["COUNT"], ["OUT_COUNT"]),
        helper.make_node("Identity", ["ACC"], ["OUT_ACC"]),
        helper.make_node("Slice", ["ACC0", "one", "big"], ["acc0_tail"]),
        helper.make_node("Slice", ["ACC0", "zero", "minus_one"], ["acc0_head"]),
        helper.make_node("Sub", ["acc0_tail", "acc0_head"], ["OUT_ACC0"]),
        helper.make_node("Shape", ["MAXSHAPE"], ["max_shape"]),
        helper.make_node("Shape", ["COUNT"], ["items"]),
        helper.make_node("Expand", ["max_shape", "items"], ["OUT_MAX"]),
        helper.make_node("Identity", ["ITEMS"], ["OUT_ITEMS"]),
        helper.make_node("Identity", ["FLAT"], ["OUT_FLAT"]),
    ]
    f32, i32, i64 = TensorProto.FLOAT, TensorProto.INT32, TensorProto.INT64
    inputs = [
        helper.make_tensor_value_info("INPUT", f32, ["n"]),
        helper.make_tensor_value_info("COUNT", f32, ["b"]),
        helper.make_tensor_value_info("ACC", i32, ["b"]),
        helper.make_tensor_value_info("ACC0", i32, ["b1"]),
        helper.make_tensor_value_info("MAXSHAPE", f32, ["m"]),
        helper.make_tensor_value_info("ITEMS", i32, ["b", 1]),
        helper.make_tensor_value_info("FLAT", i32, ["b"]),
    ]
    outputs = [
        helper.make_tensor_value_info("SCATTER", f32, ["n"]),
        helper.make_tensor_value_info("OUT_COUNT", f32, ["b"]),
        helper.make_tensor_value_info("OUT_ACC", i32, ["b"]),
        helper.make_tensor_value_info("OUT_ACC0", i32, ["b"]),
        helper.make_tensor_value_info("OUT_MAX", i64, ["b"]),
        helper.make_tensor_value_info("OUT_ITEMS", i32, ["b", 1]),
        helper.make_tensor_value_info("OUT_FLAT", i32, ["b"]),
    ]
    graph = helper.make_graph(nodes, "ragged", inputs, outputs, initializer=[two, *consts])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return bytes(model.SerializeToString())


def request(length: int) -> InferRequest:
    x = np.arange(length, dtype=np.float32).reshape(1, length) + length
    return InferRequest((InferInput("INPUT", "FP32", x.shape, x),))


def test_the_batch_inputs_are_tritons_for_requests_of_3_4_and_5_elements():
    """Given Triton's example (requests [1, 3], [1, 4], [1, 5]), Then the ragged input is
    their 12 elements in one dimension and each batch input is what core computes."""
    members = [{"INPUT": np.ones((1, n), np.float32)} for n in (3, 4, 5)]
    config = build(parse_document("config.pbtxt", CONFIG.encode()), "m")
    assert config.ragged_batching is not None
    merged = model_inputs(config.ragged_batching, members)
    assert merged["INPUT"].shape == (12,)
    assert merged["COUNT"].tolist() == [3, 4, 5] and merged["COUNT"].dtype == np.float32
    assert merged["ACC"].tolist() == [3, 7, 12] and merged["ACC"].dtype == np.int32
    assert merged["ACC0"].tolist() == [0, 3, 7, 12]
    assert merged["MAXSHAPE"].shape == (5,)
    assert merged["ITEMS"].tolist() == [[3], [4], [5]] and merged["FLAT"].tolist() == [3, 4, 5]


def test_item_shapes_repeat_per_batch_item_of_a_request():
    """Given requests [2, 2, 3] and [1, 4, 1], Then BATCH_ITEM_SHAPE has one row per batch
    item (3 rows of the shape less the batch dimension), _FLATTEN the same in one dimension."""
    shapes = [(2, 2, 3), (1, 4, 1)]
    items = batch_input_tensor(BatchInput("BATCH_ITEM_SHAPE", "T", "INT32", "X"), shapes)
    assert items.tolist() == [[2, 3], [2, 3], [4, 1]]
    flat = batch_input_tensor(BatchInput("BATCH_ITEM_SHAPE_FLATTEN", "T", "FP32", "X"), shapes)
    assert flat.tolist() == [2, 3, 2, 3, 4, 1] and flat.dtype == np.float32


def test_a_batch_output_is_scattered_by_each_requests_input_shape():
    config = build(parse_document("config.pbtxt", CONFIG.encode()), "m")
    assert config.ragged_batching is not None
    members = [{"INPUT": np.zeros((1, n), np.float32)} for n in (1, 2)]
    parts = member_outputs(
        config.ragged_batching,
        {"SCATTER": np.arange(3, dtype=np.float32), "OUT_ACC": np.array([1, 3])},
        members,
        [1, 1],
    )
    assert [p["SCATTER"].tolist() for p in parts] == [[[0.0]], [[1.0, 2.0]]]
    assert [p["OUT_ACC"].tolist() for p in parts] == [[1], [3]]


def test_the_fields_are_applied_and_what_triton_refuses_is_refused():
    document = parse_document("config.pbtxt", CONFIG.encode())
    assert not [w for w in warnings_for(document) if "batch_" in w or "ragged" in w]
    config = build(document, "m")
    round_trip = config.to_triton_json()
    assert round_trip["input"][0]["allow_ragged_batch"] is True
    assert [b["target_name"] for b in round_trip["batch_input"]] == [[n] for n in KINDS]
    wrong = CONFIG.replace(
        'source_input: "INPUT" }]\nbatch_output', 'source_input: "X" }]\nbatch_output'
    )
    with pytest.raises(InvalidInput, match="source_input 'X' is not one of the config's inputs"):
        build(parse_document("config.pbtxt", wrong.encode()), "m")
    with pytest.raises(InvalidInput, match="use TYPE_FP32 or TYPE_INT32"):
        build(
            parse_document("config.pbtxt", CONFIG.replace("TYPE_INT32", "TYPE_INT8").encode()), "m"
        )


def test_an_onnx_model_gets_a_ragged_batch_of_three_requests_in_one_execution(aws):
    """Given the ONNX model published with the config, When 3 requests of 3, 4 and 5
    elements run together, Then they run as one execution of 3, the model sees the batch
    inputs Triton gives (each answer carries its own), and SCATTER comes back per request in
    its input's shape; a request alone is a ragged batch of one."""
    for key, body in (("config.pbtxt", CONFIG.encode()), ("1/model.onnx", ragged_model())):
        aws.put(f"models/ragged/{key}", body)
    aws.services.registrar.reconcile_model("ragged")
    server = build_model_server(aws.settings, aws.clients)
    served = server.resolver.resolve("ragged", None)
    assert [(s.name, s.shape) for s in served.signature.inputs] == [("INPUT", (-1, -1))]
    results = server.infer_many("ragged", None, [request(n) for n in (3, 4, 5)])
    for n, acc, result in zip((3, 4, 5), (3, 7, 12), results, strict=True):
        out = result.outputs
        assert out is not None, result.error
        assert out["SCATTER"].tolist() == (2 * (np.arange(n) + n)).reshape(1, n).tolist()
        assert out["OUT_COUNT"].tolist() == [n] and out["OUT_ACC"].tolist() == [acc]
        assert out["OUT_ACC0"].tolist() == [n] and out["OUT_MAX"].tolist() == [5]
        assert out["OUT_ITEMS"].tolist() == [[n]] and out["OUT_FLAT"].tolist() == [n]
    [stats] = server.stats.snapshot("ragged")["model_stats"]
    assert [b["batch_size"] for b in stats["batch_stats"]] == [3] and stats["execution_count"] == 1
    alone = server.infer("ragged", None, request(2), lambda s, o: o)
    assert alone["SCATTER"].tolist() == [[4.0, 6.0]] and alone["OUT_ACC"].tolist() == [2]
