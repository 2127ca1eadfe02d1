"""Config fields Triton applies are applied here too: BF16 tensors, ``reshape`` and
``model_warmup``; what a sample or reshape gets wrong is refused at publish."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
import tritonclient.http as triton
from tritonclient.utils import InferenceServerException

from tests import builders

RESHAPED = b"""
max_batch_size: 8
input [{ name: "x" data_type: TYPE_FP32 dims: [16] reshape { shape: [2, 8] } }]
output [
  { name: "y" data_type: TYPE_FP32 dims: [16] reshape { shape: [2, 8] } },
  { name: "row_sums" data_type: TYPE_FP32 dims: [2] }
]
"""


@pytest.fixture
def client(stack):
    url = str(stack.inference.base_url).removeprefix("http://").rstrip("/")
    with triton.InferenceServerClient(url) as tc:
        yield tc


def test_bf16_tensors_travel_as_tritonclient_sends_them(stack, client):
    # Given an ONNX model with a BF16 input and a BF16 output
    stack.put("models/bf16/1/model.onnx", builders.onnx_bf16(4))
    stack.wait_state("bf16", 1, "READY")
    metadata = client.get_model_metadata("bf16")
    assert metadata["inputs"][0]["datatype"] == "BF16"
    # When tritonclient sends BF16 in binary (ml_dtypes.bfloat16, as it requires)
    x = np.array([[1.5, -2.0, 3.25, 0.0], [7.0, 8.5, -0.5, 100.0]], dtype=ml_dtypes.bfloat16)
    tensor = triton.InferInput("x", list(x.shape), "BF16")
    tensor.set_data_from_numpy(x, binary_data=True)
    outputs = [
        triton.InferRequestedOutput("as_float", binary_data=True),
        triton.InferRequestedOutput("doubled", binary_data=True),
    ]
    result = client.infer("bf16", [tensor], outputs=outputs)
    # Then the model saw the exact values and its BF16 output comes back as BF16
    np.testing.assert_array_equal(result.as_numpy("as_float"), x.astype(np.float32))
    doubled = result.as_numpy("doubled")
    assert doubled.dtype == ml_dtypes.bfloat16
    np.testing.assert_array_equal(doubled.astype(np.float32), 2 * x.astype(np.float32))
    # And JSON numbers are accepted for BF16 too, answered as numbers
    body = {"inputs": [{"name": "x", "datatype": "BF16", "shape": [1, 4], "data": [1, 2, 3, 4]}]}
    answer = stack.inference.post("/v2/models/bf16/infer", json=body).json()
    by_name = {o["name"]: o for o in answer["outputs"]}
    assert by_name["doubled"]["datatype"] == "BF16" and by_name["doubled"]["data"] == [2, 4, 6, 8]


def test_reshape_gives_clients_the_config_dims_and_the_model_its_own(stack, client):
    # Given a model taking [batch, 2, 8] whose config shows clients [batch, 16]
    stack.put("models/flat/config.pbtxt", RESHAPED)
    stack.put("models/flat/1/model.onnx", builders.onnx_rows_of(2, 8))
    stack.wait_state("flat", 1, "READY")
    assert client.get_model_metadata("flat")["inputs"][0]["shape"] == [-1, 16]
    # When a client sends [3, 16]
    x = np.arange(48, dtype=np.float32).reshape(3, 16)
    tensor = triton.InferInput("x", [3, 16], "FP32")
    tensor.set_data_from_numpy(x)
    result = client.infer("flat", [tensor])
    # Then the model ran on [3, 2, 8] and the reshaped output comes back as [3, 16]
    np.testing.assert_array_equal(result.as_numpy("y"), x)
    np.testing.assert_array_equal(result.as_numpy("row_sums"), x.reshape(3, 2, 8).sum(axis=2))
    # And the model's own shape is not what clients send
    wrong = triton.InferInput("x", [3, 2, 8], "FP32")
    wrong.set_data_from_numpy(x.reshape(3, 2, 8))
    with pytest.raises(InferenceServerException, match=r"expected shape \[-1, 16\]"):
        client.infer("flat", [wrong])


def test_a_reshape_that_cannot_hold_the_dims_is_refused_at_publish(stack):
    stack.put(
        "models/odd/config.pbtxt", RESHAPED.replace(b"shape: [2, 8] } }]", b"shape: [3, 8] } }]")
    )
    stack.put("models/odd/1/model.onnx", builders.onnx_rows_of(2, 8))
    reason = stack.wait_state("odd", 1, "UNAVAILABLE")
    assert "reshape [3, 8] has 24 elements but dims [16] have 16" in reason


WARMUP = b"""
max_batch_size: 8
model_warmup [
  { name: "zeros" batch_size: 4
    inputs { key: "INPUT__0" value: { data_type: TYPE_FP32 dims: [4] zero_data: true } } },
  { name: "sample" batch_size: 2 count: 3
    inputs { key: "INPUT__0"
             value: { data_type: TYPE_FP32 dims: [4] input_data_file: "row.bin" } } }
]
"""


def test_model_warmup_samples_are_checked_at_publish_and_the_version_serves(stack, client):
    # Given Triton's model_warmup with zeros and a raw file in the version's warmup/ directory
    stack.put("models/warm/config.pbtxt", WARMUP)
    stack.put("models/warm/1/warmup/row.bin", np.ones(4, np.float32).tobytes())
    stack.put("models/warm/1/model.onnx", builders.onnx_mlp(4, 3))
    # Then the version is READY with no warning about warm-up, and serves
    stack.wait_state("warm", 1, "READY")
    [entry] = stack.api.get("/models/warm/1").json()
    assert not any("warmup" in w for w in entry.get("configWarnings", []))
    tensor = triton.InferInput("INPUT__0", [1, 4], "FP32")
    tensor.set_data_from_numpy(np.ones((1, 4), np.float32))
    assert client.infer("warm", [tensor]).as_numpy("OUTPUT__0").shape == (1, 3)


@pytest.mark.parametrize(
    ("row", "reason"),
    [
        (None, "reads warmup/row.bin, which the version does not have"),
        (np.ones(3, np.float32).tobytes(), "needs 16 bytes"),
    ],
)
def test_a_warmup_sample_that_cannot_run_is_refused_at_publish(stack, row, reason):
    stack.put("models/cold/config.pbtxt", WARMUP)
    if row is not None:
        stack.put("models/cold/1/warmup/row.bin", row)
    stack.put("models/cold/1/model.onnx", builders.onnx_mlp(4, 3))
    assert reason in stack.wait_state("cold", 1, "UNAVAILABLE")
