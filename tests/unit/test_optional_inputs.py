"""Triton's input.optional: a request may leave an optional input out, and the model gets no
tensor for it (as Triton's backends do); a required input left out is still refused."""

from __future__ import annotations

import numpy as np
import pytest

from lambdaserve.config.documents import parse_document
from lambdaserve.config.model_config import build
from lambdaserve.config.support import warnings_for
from lambdaserve.errors import InvalidInput
from lambdaserve.protocol.v2 import InferInput, InferRequest
from lambdaserve.serving.binding import bind_inputs
from lambdaserve.tensors.signature import Signature, TensorSpec

CONFIG = """
name: "m"
max_batch_size: 4
input [
  { name: "INPUT0" data_type: TYPE_FP32 dims: [ 1 ] optional: true },
  { name: "INPUT1" data_type: TYPE_FP32 dims: [ 1 ] }
]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 1 ] } ]
"""


def request(*names: str) -> InferRequest:
    x = np.ones((2, 1), np.float32)
    return InferRequest(tuple(InferInput(n, "FP32", x.shape, x) for n in names))


def test_the_config_marks_optional_inputs_applied_and_says_so_in_its_json():
    document = parse_document("config.pbtxt", CONFIG.encode())
    config = build(document, "m")
    assert config.optional_inputs == ("INPUT0",)
    assert [i.get("optional", False) for i in config.to_triton_json()["input"]] == [True, False]
    assert not [w for w in warnings_for(document) if "optional" in w]


def test_an_optional_input_left_out_reaches_the_model_as_no_tensor():
    signature = Signature(
        (TensorSpec("INPUT0", "FP32", (-1, 1)), TensorSpec("INPUT1", "FP32", (-1, 1))), ()
    ).with_optional(build(parse_document("config.pbtxt", CONFIG.encode()), "m").optional_inputs)
    assert list(bind_inputs(request("INPUT1"), signature)) == ["INPUT1"]
    assert list(bind_inputs(request("INPUT0", "INPUT1"), signature)) == ["INPUT0", "INPUT1"]
    with pytest.raises(InvalidInput, match=r"missing input 'INPUT1' \(FP32 \[-1, 1\]\)"):
        bind_inputs(request("INPUT0"), signature)
