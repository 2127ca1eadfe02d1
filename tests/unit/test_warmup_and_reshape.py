"""Triton's model_warmup samples as they run at load, and reshape's two shapes."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from lambdaserve.config.model_config import build, parse_document
from lambdaserve.errors import InvalidInput
from lambdaserve.serving.residency.reshaped_model import ReshapedModel
from lambdaserve.serving.residency.warmup import warm_up
from lambdaserve.tensors.signature import Signature, TensorSpec

SIGNATURE = Signature(
    inputs=(TensorSpec("x", "FP32", (-1, 4)), TensorSpec("ids", "BYTES", (-1, 2))),
    outputs=(TensorSpec("y", "FP32", (-1, 3)),),
)


class Recording:
    device = "cpu"

    def __init__(self) -> None:
        self.runs: list[dict[str, np.ndarray]] = []

    def run(self, inputs, outputs):
        self.runs.append(dict(inputs))
        return {name: np.zeros((1, 3), np.float32) for name in outputs}


def config(text: str):
    return build(parse_document("config.pbtxt", text.encode()), "m")


def test_warmup_samples_run_count_times_with_their_batch_and_data(tmp_path: Path):
    # Given a zero sample and a file sample (a BYTES row as Triton serializes it)
    (tmp_path / "warmup").mkdir()
    (tmp_path / "warmup" / "x.bin").write_bytes(np.arange(4, dtype=np.float32).tobytes())
    (tmp_path / "warmup" / "ids.bin").write_bytes(b"\x01\x00\x00\x00a\x02\x00\x00\x00bc")
    samples = config("""
        max_batch_size: 8
        model_warmup [
          { name: "zeros" batch_size: 2 inputs [
              { key: "x" value: { data_type: TYPE_FP32 dims: [4] zero_data: true } },
              { key: "ids" value: { data_type: TYPE_STRING dims: [2] random_data: true } }] },
          { name: "files" batch_size: 3 count: 2 inputs [
              { key: "x" value: { data_type: TYPE_FP32 dims: [4] input_data_file: "x.bin" } },
              { key: "ids"
                value: { data_type: TYPE_STRING dims: [2] input_data_file: "ids.bin" } }] }
        ]""").warmup
    model = Recording()
    # When the version warms up
    warm_up(model, SIGNATURE, tmp_path, samples, batched=True)
    # Then each sample ran its count, batch rows repeating the file's row
    assert len(model.runs) == 3
    assert model.runs[0]["x"].shape == (2, 4) and not model.runs[0]["x"].any()
    np.testing.assert_array_equal(model.runs[1]["x"], np.tile(np.arange(4.0), (3, 1)))
    assert model.runs[2]["ids"].tolist() == [[b"a", b"bc"]] * 3


def test_without_model_warmup_zero_inputs_run_once(tmp_path: Path):
    model = Recording()
    warm_up(model, SIGNATURE, tmp_path)
    assert len(model.runs) == 1 and model.runs[0]["x"].shape == (1, 4)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('input_data_file: "../x"', "must name a file in the version's warmup/ directory"),
        ("", "needs zero_data, random_data or input_data_file"),
    ],
)
def test_malformed_samples_are_config_errors(text: str, message: str):
    with pytest.raises(InvalidInput, match=message):
        config(f"""model_warmup [{{ name: "s" inputs {{ key: "x" value: {{
            data_type: TYPE_FP32 dims: [4] {text} }} }} }}]""")


def test_reshape_records_both_shapes_and_the_wrapper_applies_them():
    # Given dims [4] shown to clients, [2, 2] handed to a batching model; an empty reshape
    reshapes = config("""
        max_batch_size: 4
        input [{ name: "x" data_type: TYPE_FP32 dims: [4] reshape { shape: [2, 2] } }]
        output [{ name: "y" data_type: TYPE_FP32 dims: [1] reshape { shape: [] } }]
        """).reshapes
    assert [(r.role, r.client_shape, r.model_shape) for r in reshapes] == [
        ("input", (-1, 4), (-1, 2, 2)),
        ("output", (-1, 1), (-1,)),
    ]

    class Summing:
        device = "cpu"

        def run(self, inputs, outputs):
            assert inputs["x"].shape == (3, 2, 2)
            return {"y": inputs["x"].sum(axis=(1, 2))}

    # When three rows run through the wrapper
    outputs = ReshapedModel(Summing(), reshapes, batched=True).run(
        {"x": np.ones((3, 4), np.float32)}, ["y"]
    )
    # Then the model saw its own shape and the client gets the config's
    assert outputs["y"].shape == (3, 1) and outputs["y"].tolist() == [[4.0]] * 3
