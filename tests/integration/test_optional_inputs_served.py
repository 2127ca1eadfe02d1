"""Optional inputs served as Triton serves them (the behaviour qa/L0_optional_input checks):
a request may leave an ``optional: true`` input out and the model gets no tensor, directly
and through an ensemble's step; a required input left out is still refused. Against
`lambdaserve serve`, with tritonclient.grpc unchanged."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from tests.integration.grpc_support import lambdaserve_serve

MODEL = Path(__file__).parents[1] / "fixtures" / "python_models" / "optional_identity_2"
# an ensemble whose one step maps both optional inputs through, as qa's pipeline does
PIPELINE = b"""
platform: "ensemble"
max_batch_size: 8
input [
  { name: "INPUT0" data_type: TYPE_FP32 dims: [ 1 ] optional: true },
  { name: "INPUT1" data_type: TYPE_FP32 dims: [ 1 ] optional: true }
]
output [
  { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 1 ] },
  { name: "OUTPUT1" data_type: TYPE_FP32 dims: [ 1 ] }
]
ensemble_scheduling { step [ {
  model_name: "identity" model_version: -1
  input_map { key: "INPUT0" value: "INPUT0" }
  input_map { key: "INPUT1" value: "INPUT1" }
  output_map { key: "OUTPUT0" value: "OUTPUT0" }
  output_map { key: "OUTPUT1" value: "OUTPUT1" }
} ] }
"""
REQUIRED = (MODEL / "config.pbtxt").read_bytes().replace(b" optional: true", b"")


def tensor(name: str, value: float) -> grpcclient.InferInput:
    given = grpcclient.InferInput(name, [1, 1], "FP32")
    given.set_data_from_numpy(np.array([[value]], np.float32))
    return given


@pytest.fixture
def published(stack):
    code = (MODEL / "1" / "model.py").read_bytes()
    for name, config in (
        ("identity", (MODEL / "config.pbtxt").read_bytes()),
        ("required", REQUIRED),
    ):
        stack.put(f"models/{name}/config.pbtxt", config)
        stack.put(f"models/{name}/1/model.py", code)
    stack.put("models/pipeline/config.pbtxt", PIPELINE)
    stack.put("models/pipeline/1/.keep", b"")
    for name in ("identity", "required", "pipeline"):
        stack.wait_state(name, 1, "READY", timeout_s=60)
    return stack


def test_an_optional_input_left_out_reaches_the_model_as_no_tensor(published):
    with lambdaserve_serve() as served:
        client = served.client()
        # When a request sends both inputs, only INPUT0, and (through the ensemble) only INPUT1
        both = client.infer("identity", [tensor("INPUT0", 1.0), tensor("INPUT1", 2.0)])
        first = client.infer("identity", [tensor("INPUT0", 3.0)])
        piped = client.infer("pipeline", [tensor("INPUT1", 4.0)])
        # and a model whose inputs are required gets only one
        with pytest.raises(InferenceServerException) as refused:
            client.infer("required", [tensor("INPUT0", 5.0)])
    # Then each output is its input, and zeros where the model got no tensor
    assert (both.as_numpy("OUTPUT0")[0, 0], both.as_numpy("OUTPUT1")[0, 0]) == (1.0, 2.0)
    assert (first.as_numpy("OUTPUT0")[0, 0], first.as_numpy("OUTPUT1")[0, 0]) == (3.0, 0.0)
    assert (piped.as_numpy("OUTPUT0")[0, 0], piped.as_numpy("OUTPUT1")[0, 0]) == (0.0, 4.0)
    # and the required input's absence is refused, naming it
    assert refused.value.status() == "StatusCode.INVALID_ARGUMENT"
    assert "INPUT1" in refused.value.message()
