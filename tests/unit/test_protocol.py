from __future__ import annotations

import json

import numpy as np
import orjson
import pytest
from tritonclient.http import InferInput, InferRequestedOutput
from tritonclient.http._utils import _get_inference_request

from lambdaserve.errors import InvalidInput
from lambdaserve.protocol import paddle_pipeline, tfserving, torchserve
from lambdaserve.protocol.raw_binary import parse_raw_binary
from lambdaserve.protocol.v2 import HEADER_LENGTH, encode_infer_response, parse_infer_request
from lambdaserve.tensors.signature import Signature, TensorSpec


def triton_request(binary: bool, binary_output: bool):
    """The exact bytes tritonclient sends (its own request builder)."""
    images = InferInput("images", [2, 3], "FP32")
    images.set_data_from_numpy(np.arange(6, dtype=np.float32).reshape(2, 3), binary_data=binary)
    words = InferInput("words", [2], "BYTES")
    words.set_data_from_numpy(np.array([b"hi", b"there"], dtype=object), binary_data=binary)
    outputs = [InferRequestedOutput("probs", binary_data=binary_output)]
    body, header_length = _get_inference_request(
        [images, words], "req-1", outputs, 0, 0, 0, 0, 0, None
    )
    return (body if isinstance(body, bytes) else body.encode()), header_length


@pytest.mark.parametrize("binary", [False, True])
def test_tritonclient_requests_parse(binary):
    body, header_length = triton_request(binary, binary_output=True)
    request = parse_infer_request(body, header_length)
    assert request.id == "req-1"
    assert [i.name for i in request.inputs] == ["images", "words"]
    assert request.inputs[0].data.tolist() == [[0, 1, 2], [3, 4, 5]]
    assert request.inputs[1].data.tolist() == [b"hi", b"there"]
    assert request.outputs[0].name == "probs" and request.outputs[0].binary is True


def test_binary_outputs_follow_the_json_header():
    body, header_length = triton_request(False, binary_output=True)
    request = parse_infer_request(body, header_length)
    probs = np.array([[0.25, 0.75]], np.float32)
    encoded = encode_infer_response("m", 3, request, {"probs": probs})
    length = int(encoded.headers["inference-header-content-length"])
    header = json.loads(encoded.body[:length])
    assert header["model_version"] == "3" and header["id"] == "req-1"
    assert header["outputs"][0]["parameters"]["binary_data_size"] == 8
    assert np.frombuffer(encoded.body[length:], np.float32).tolist() == [0.25, 0.75]


def test_json_outputs_by_default():
    request = parse_infer_request(
        b'{"inputs":[{"name":"x","datatype":"INT32","shape":[1],"data":[1]}]}'
    )
    encoded = encode_infer_response("m", 1, request, {"y": np.array([[1.5]], np.float64)})
    assert encoded.headers == {
        "content-type": "application/json",
        "lambdaserve-model-version": "1",  # every answer says the version that served it
    }
    assert json.loads(encoded.body)["outputs"] == [
        {"name": "y", "datatype": "FP64", "shape": [1, 1], "data": [1.5]}
    ]


@pytest.mark.parametrize(
    ("body", "header_length", "message"),
    [
        (b"{oops", None, "not valid JSON"),
        (b"[]", None, "must be a JSON object"),
        (b"{}", None, '"inputs"'),
        (b'{"inputs":[{"datatype":"FP32","shape":[1],"data":[1]}]}', None, "needs a name"),
        (b'{"inputs":[{"name":"x","shape":[1],"data":[1]}]}', None, "needs a datatype"),
        (b'{"inputs":[{"name":"x","datatype":"FP32","shape":[1]}]}', None, "neither data"),
        (b'{"inputs":[{"name":"x","datatype":"FP32","shape":[1],"data":[1]}]}', 999, "Header"),
        (
            b'{"inputs":[{"name":"x","datatype":"FP32","shape":[2],'
            b'"parameters":{"binary_data_size":8}}]}\x00\x00\x00\x00',
            None,
            "binary_data_size 8 exceeds",
        ),
    ],
)
def test_malformed_requests_are_invalid_input(body, header_length, message):
    if header_length is None and b"binary_data_size" in body:
        header_length = body.index(b"}]}") + 3
    with pytest.raises(InvalidInput, match=message):
        parse_infer_request(body, header_length)


def test_torchserve_single_instance_gets_a_batch_dim_and_loses_it_in_the_answer():
    inputs = (TensorSpec("x", "FP32", (-1, 2)),)
    prediction = torchserve.parse_prediction(b"[1.0, 2.0]", inputs)
    assert prediction.single_instance is True
    assert prediction.request.inputs[0].data.shape == (1, 2)
    answer = torchserve.encode_prediction({"y": np.array([[0.5, 0.5]])}, prediction.single_instance)
    assert json.loads(answer) == [0.5, 0.5]


def test_torchserve_named_inputs_and_several_outputs():
    inputs = (TensorSpec("a", "FP32", (-1, 1)), TensorSpec("b", "FP32", (-1, 1)))
    prediction = torchserve.parse_prediction(b'{"a": [[1]], "b": [[2]]}', inputs)
    assert [t.name for t in prediction.request.inputs] == ["a", "b"]
    with pytest.raises(InvalidInput, match="send an object keyed by"):
        torchserve.parse_prediction(b"[1]", inputs)
    with pytest.raises(InvalidInput, match="unknown input 'c'"):
        torchserve.parse_prediction(b'{"c": [1]}', inputs)
    answer = torchserve.encode_prediction({"s": np.array([[3.0]]), "d": np.array([[-1.0]])})
    assert json.loads(answer) == {"s": [[3.0]], "d": [[-1.0]]}


def test_an_output_requested_twice_is_refused():
    body = (
        b'{"inputs": [{"name": "x", "datatype": "FP32", "shape": [1], "data": [1]}],'
        b' "outputs": [{"name": "y"}, {"name": "y"}]}'
    )
    with pytest.raises(InvalidInput, match="'y' already exists in request: it is requested more"):
        parse_infer_request(body, None)


def test_binary_data_output_is_for_the_outputs_a_request_does_not_name():
    """Given binary_data_output: true, output a named with binary_data: true and b named
    without it (qa/L0_http test.sh; Triton reads binary_data per named output, default off)
    When the response is encoded
    Then a is binary and b JSON; with no outputs named, both are binary."""
    inputs = b'{"inputs": [{"name": "x", "datatype": "FP32", "shape": [1], "data": [1]}],'
    outputs = {"a": np.ones(2, np.float32), "b": np.ones(2, np.float32)}
    named = parse_infer_request(
        inputs + b' "outputs": [{"name": "a", "parameters": {"binary_data": true}}, {"name": "b"}],'
        b' "parameters": {"binary_data_output": true}}',
        None,
    )
    encoded = encode_infer_response("m", 1, named, outputs)
    a, b = orjson.loads(encoded.body[: int(encoded.headers[HEADER_LENGTH])])["outputs"]
    assert a["parameters"]["binary_data_size"] == 8 and b["data"] == [1.0, 1.0]

    unnamed = parse_infer_request(inputs + b' "parameters": {"binary_data_output": true}}', None)
    encoded = encode_infer_response("m", 1, unnamed, outputs)
    header = orjson.loads(encoded.body[: int(encoded.headers[HEADER_LENGTH])])
    assert [o["parameters"]["binary_data_size"] for o in header["outputs"]] == [8, 8]


def test_a_raw_binary_body_is_one_row_of_a_batching_model():
    # Given a model whose config batches (max_batch_size > 0): Triton reads the body as batch 1
    spec = (TensorSpec("INPUT0", "FP32", (-1, -1)),)
    body = np.arange(8, dtype=np.float32).tobytes()
    request = parse_raw_binary(body, spec, "identity", batched=True)
    assert request.inputs[0].shape == (1, 8) and request.binary_output
    # and without a batching config the one dynamic dimension is deduced, as before
    rows = parse_raw_binary(body, (TensorSpec("x", "FP32", (-1, 4)),), "mlp")
    assert rows.inputs[0].shape == (2, 4)


@pytest.mark.parametrize(
    ("specs", "body", "triton_says"),
    [
        (
            (TensorSpec("INPUT0", "INT32", (-1, 16)), TensorSpec("INPUT1", "INT32", (-1, 16))),
            b"\0" * 64,
            "Raw request must only have 1 input (found 1) to be deduced but got 2 inputs in "
            "'m' model configuration",
        ),
        (
            (TensorSpec("INPUT0", "BYTES", (-1, -1)),),
            b"427",
            "For BYTE datatype raw input 'INPUT0', the model must have input shape [1]",
        ),
        (
            (TensorSpec("INPUT0", "FP16", (-1, -1, -1)),),
            b"\0" * 8,
            "The shape of the raw input 'INPUT0' can not be deduced because there are more "
            "than one variable-sized dimension",
        ),
    ],
)
def test_raw_binary_refusals_carry_tritons_words(specs, body, triton_says):
    with pytest.raises(InvalidInput) as refused:
        parse_raw_binary(body, specs, "m", batched=True)
    assert triton_says in refused.value.message


def test_a_raw_bytes_element_fits_a_one_element_batching_model():
    spec = (TensorSpec("INPUT0", "BYTES", (-1, 1)),)
    request = parse_raw_binary(b"427", spec, "m", batched=True)
    assert request.inputs[0].shape == (1, 1) and request.inputs[0].data.tolist() == [[b"427"]]


@pytest.mark.parametrize(
    ("datatype", "body", "says"),
    [
        ("BOOL", {"instances": [True, None]}, "element 1 is null, not true or false"),
        ("FP32", {"inputs": {"x": [1.5, None]}}, "element 1 is null, not a number"),
        ("FP32", {"instances": [[1, 2], [3]]}, "rows of one shape"),
    ],
)
def test_tf_servings_bodies_refuse_nulls_and_ragged_rows(datatype, body, says):
    # A null is no value: never False or NaN fed to the model
    signature = Signature((TensorSpec("x", datatype, (-1,)),), ())
    with pytest.raises(InvalidInput, match=says):
        tfserving.parse_predict(body, signature)


@pytest.mark.parametrize(
    ("datatype", "value", "says"),
    [
        ("FP32", "[1.5, None]", "element 1 is null, not a number"),
        ("BOOL", "[True, None]", "element 1 is null, not true or false"),
    ],
)
def test_paddles_values_refuse_none_as_pipelineclient_would_write_it(datatype, value, says):
    signature = Signature((TensorSpec("x", datatype, (-1,)),), ())
    with pytest.raises(InvalidInput, match=says):
        paddle_pipeline.parse_request({"key": ["x"], "value": [value]}, signature)
