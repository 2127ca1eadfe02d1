"""The gRPC codecs alone: protobuf messages to the domain's requests and back, and the one
map from domain errors to gRPC status codes."""

from __future__ import annotations

import subprocess
import sys
from importlib.util import find_spec

import grpc
import ml_dtypes
import numpy as np
import pytest
from tritonclient.grpc import service_pb2

from lambdaserve.errors import (
    InferenceError,
    InvalidInput,
    ModelNotFound,
    ModelNotReady,
    QueueRejected,
    RuntimeMissing,
)
from lambdaserve.protocol.grpc import kserve, tfserving
from lambdaserve.protocol.grpc.protos import tensorflow_core_pb2 as tf
from lambdaserve.protocol.grpc.status import code_for
from lambdaserve.tensors.signature import Signature, TensorSpec


def v2_request(**inputs: tuple[str, list[int], bytes]) -> service_pb2.ModelInferRequest:
    message = service_pb2.ModelInferRequest(model_name="m")
    for name, (datatype, shape, raw) in inputs.items():
        message.inputs.add(name=name, datatype=datatype, shape=shape)
        message.raw_input_contents.append(raw)
    return message


def test_raw_inputs_decode_zero_copy_and_outputs_go_back_raw():
    # Given a request with a raw FP32 input and a classification output
    data = np.arange(6, dtype=np.float32).reshape(2, 3)
    message = v2_request(x=("FP32", [2, 3], data.tobytes()))
    message.outputs.add(name="y").parameters["classification"].int64_param = 2
    message.parameters["timeout"].int64_param = 500
    # When it is decoded
    request = kserve.infer_request(message)
    # Then the tensor, the classification and the parameters are the domain's
    np.testing.assert_array_equal(request.inputs[0].data, data)
    assert request.outputs[0].classification == 2
    assert request.parameters == {"timeout": 500}
    # And outputs are encoded raw, with their datatype and shape
    response = kserve.infer_response("m", 3, "id-1", {"y": data, "s": np.array([b"ab"], object)})
    assert [o.datatype for o in response.outputs] == ["FP32", "BYTES"]
    assert response.raw_output_contents[0] == data.tobytes()
    assert response.raw_output_contents[1] == b"\x02\x00\x00\x00ab"
    assert (response.model_version, response.id) == ("3", "id-1")


@pytest.mark.parametrize(
    ("mutate", "words"),
    [
        (lambda m: m.raw_input_contents.append(b""), "one per input"),
        (lambda m: m.inputs.add(name="z", datatype="FP32", shape=[1]), "one per input"),
        (lambda m: m.inputs[0].contents.fp32_contents.append(1.0), "both contents and raw"),
        (lambda m: setattr(m.inputs[0], "datatype", "FP31"), "unsupported datatype"),
        (lambda m: m.inputs[0].shape.append(-2), "non-negative"),
        (lambda m: m.outputs.add(name="y") and m.outputs.add(name="y"), "more than once"),
        (lambda m: m.ClearField("inputs"), "non-empty list"),
    ],
)
def test_malformed_v2_messages_are_invalid_input_saying_what_is_wrong(mutate, words):
    message = v2_request(x=("FP32", [1], np.float32(1).tobytes()))
    mutate(message)
    with pytest.raises(InvalidInput, match=words):
        kserve.infer_request(message)


def test_typed_contents_are_checked_against_the_shape_and_the_datatype():
    message = service_pb2.ModelInferRequest(model_name="m")
    tensor = message.inputs.add(name="x", datatype="INT8", shape=[2])
    tensor.contents.int_contents.extend([1, 300])
    with pytest.raises(InvalidInput, match="does not fit INT8"):
        kserve.infer_request(message)
    tensor.contents.int_contents[1] = 3
    tensor.shape[0] = 3
    with pytest.raises(InvalidInput, match="needs 3 elements, int_contents has 2"):
        kserve.infer_request(message)
    half = message.inputs.add(name="h", datatype="FP16", shape=[1])
    half.contents.fp32_contents.append(1.0)
    tensor.shape[0] = 2
    with pytest.raises(InvalidInput, match="raw_input_contents"):
        kserve.infer_request(message)


def tf_tensor(dtype: int, shape: list[int], **values: object) -> tf.TensorProto:
    tensor = tf.TensorProto(dtype=dtype)
    tensor.tensor_shape.dim.extend(tf.TensorShapeProto.Dim(size=d) for d in shape)
    for field, value in values.items():
        if field == "tensor_content":
            tensor.tensor_content = value  # type: ignore[assignment]
        else:
            getattr(tensor, field).extend(value)
    return tensor


def test_tensorflow_tensors_read_content_and_typed_values_as_tensorflow_does():
    # tensor_content: the bytes, as tf.make_tensor_proto writes numbers
    data = np.arange(4, dtype=np.float32).reshape(2, 2)
    _, array = tfserving.tensor_to_array(
        "x", tf_tensor(tf.DT_FLOAT, [2, 2], tensor_content=data.tobytes())
    )
    np.testing.assert_array_equal(array, data)
    # typed values: fewer than the elements repeat the last one, as TensorFlow reads them
    _, filled = tfserving.tensor_to_array("x", tf_tensor(tf.DT_INT64, [2, 3], int64_val=[7, 8]))
    np.testing.assert_array_equal(filled, [[7, 8, 8], [8, 8, 8]])
    # half_val holds FP16 and BF16 bit patterns
    halves = np.array([1.5, -2.0], np.float16)
    _, fp16 = tfserving.tensor_to_array(
        "h", tf_tensor(tf.DT_HALF, [2], half_val=halves.view(np.uint16).tolist())
    )
    np.testing.assert_array_equal(fp16, halves)
    brains = np.array([0.5, 3.0], ml_dtypes.bfloat16)
    datatype, bf16 = tfserving.tensor_to_array(
        "b", tf_tensor(tf.DT_BFLOAT16, [2], half_val=brains.view(np.uint16).tolist())
    )
    assert datatype == "BF16"
    np.testing.assert_array_equal(bf16.astype(np.float32), [0.5, 3.0])
    # strings travel in string_val
    _, text = tfserving.tensor_to_array("s", tf_tensor(tf.DT_STRING, [2], string_val=[b"a", b"b"]))
    assert text.tolist() == [b"a", b"b"]


@pytest.mark.parametrize(
    ("tensor", "words"),
    [
        (tf_tensor(tf.DT_COMPLEX64, [1], scomplex_val=[1.0, 0.0]), "DT_COMPLEX64 is not served"),
        (tf_tensor(tf.DT_FLOAT, [1], float_val=[1.0, 2.0]), "holds 1 elements, the tensor has 2"),
        (tf_tensor(tf.DT_FLOAT, [2], tensor_content=b"\0" * 4), "needs 8 bytes"),
        (tf.TensorProto(dtype=tf.DT_FLOAT, tensor_shape={"unknown_rank": True}), "unknown rank"),
        (tf_tensor(tf.DT_INT32, [1], int_val=[1]), None),
    ],
)
def test_tensorflow_tensors_that_do_not_fit_are_invalid_input(tensor, words):
    if words is None:
        assert tfserving.tensor_to_array("x", tensor)[1].tolist() == [1]
        return
    with pytest.raises(InvalidInput, match=words):
        tfserving.tensor_to_array("x", tensor)


def test_outputs_go_back_as_tensorflow_writes_them():
    tensor = tfserving.array_to_tensor(np.arange(6, dtype=np.int32).reshape(3, 2))
    assert tensor.dtype == tf.DT_INT32 and [d.size for d in tensor.tensor_shape.dim] == [3, 2]
    assert np.frombuffer(tensor.tensor_content, np.int32).tolist() == list(range(6))
    strings = tfserving.array_to_tensor(np.array([b"x", "y"], dtype=object))
    assert list(strings.string_val) == [b"x", b"y"]


def test_a_predict_request_names_only_the_models_inputs_and_its_signature():
    signature = Signature((TensorSpec("x", "FP32", (-1, 2)),), (TensorSpec("y", "FP32", (-1,)),))
    message = tfserving.pb.PredictRequest(output_filter=["y"])
    message.inputs["x"].CopyFrom(tf_tensor(tf.DT_FLOAT, [1, 2], float_val=[1.0, 2.0]))
    request = tfserving.predict_request(message, signature)
    assert [i.name for i in request.inputs] == ["x"] and request.outputs[0].name == "y"
    message.inputs["z"].CopyFrom(tf_tensor(tf.DT_FLOAT, [1], float_val=[1.0]))
    with pytest.raises(InvalidInput, match="unknown input 'z'"):
        tfserving.predict_request(message, signature)


def test_examples_with_a_context_are_merged_as_protobuf_merges_them():
    """Given an Input with a context (x = 0, c = 1) and one example (x = 2),
    When its examples are read, Then each is the context followed by the example: protobuf's
    merge, where the example's x wins; an empty Input has none."""
    message = tfserving.pb.Input()
    message.example_list_with_context.context = b"context"
    message.example_list_with_context.examples.append(b"example")
    assert tfserving.serialized_examples(message) == [b"contextexample"]
    assert tfserving.serialized_examples(tfserving.pb.Input()) == []


def test_classify_and_regress_results_are_tf_servings_messages():
    classified = tfserving.classification_result([[["", 3.0]], [["a", 0.5], ["b", 0.25]]])
    assert [[(c.label, c.score) for c in r.classes] for r in classified.classifications] == [
        [("", 3.0)],
        [("a", 0.5), ("b", 0.25)],
    ]
    assert [r.value for r in tfserving.regression_result([3.0, 3.5]).regressions] == [3.0, 3.5]


@pytest.mark.parametrize(
    ("error", "code"),
    [
        (InvalidInput("x"), grpc.StatusCode.INVALID_ARGUMENT),
        (RuntimeMissing("x"), grpc.StatusCode.INVALID_ARGUMENT),
        (ModelNotFound("x"), grpc.StatusCode.NOT_FOUND),
        (ModelNotReady("x"), grpc.StatusCode.UNAVAILABLE),
        (QueueRejected("x"), grpc.StatusCode.UNAVAILABLE),
        (InferenceError("x"), grpc.StatusCode.INTERNAL),
    ],
)
def test_domain_errors_map_once_to_grpc_codes(error, code):
    assert code_for(error) == code


_BESIDE_TENSORFLOW = """
import sys

def ours():
    from lambdaserve.protocol.grpc import tfserving
    from lambdaserve.protocol.grpc.protos import tensorflow_serving_pb2 as pb
    from lambdaserve.tensors.signature import Signature, TensorSpec

    signature = Signature((TensorSpec("x", "FP32", (-1, 2)),), (TensorSpec("y", "FP32", (-1, 1)),))
    return pb, tfserving.metadata_response("m", 3, signature, ["signature_def"])

def theirs():
    import tensorflow  # noqa: F401
    from tensorflow_serving.apis import get_model_metadata_pb2

    return get_model_metadata_pb2

if sys.argv[1] == "ours-first":
    pb, answer = ours()
    metadata = theirs()
else:
    metadata = theirs()
    pb, answer = ours()
# What TF Serving's own client reads from our bytes
read = metadata.GetModelMetadataResponse.FromString(answer.SerializeToString())
signatures = metadata.SignatureDefMap()
read.metadata["signature_def"].Unpack(signatures)
print(read.model_spec.name, read.model_spec.version.value, sorted(signatures.signature_def))
"""


@pytest.mark.parametrize("order", ["ours-first", "tensorflow-first"])
def test_tensorflow_imports_beside_our_tf_serving_protos_in_either_order(order):
    # Given TensorFlow and tensorflow-serving-api (their protos declare the same names as ours)
    if find_spec("tensorflow") is None or find_spec("tensorflow_serving") is None:
        pytest.skip("tensorflow / tensorflow-serving-api are not installed (make install-test)")
    # When one process imports both, as a serve process answering TF Serving's gRPC does when
    # model code in it imports TensorFlow
    done = subprocess.run(
        [sys.executable, "-c", _BESIDE_TENSORFLOW, order],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    # Then neither import fails, and TF Serving's own messages read our answer
    assert done.returncode == 0, done.stderr[-1500:]
    assert done.stdout.split("\n")[-2] == "m 3 ['serving_default']"
