"""Reasons a person reads: what is wrong with the model, never where a runtime was built or
where this machine keeps its scratch files."""

from __future__ import annotations

from pathlib import Path

import pytest
from onnx import TensorProto, helper

from lambdaserve.config.model_config import ModelConfig
from lambdaserve.errors import ModelRejected, first_line
from lambdaserve.runtimes.registry import runtime_named


def test_a_rejected_models_reason_names_no_build_or_scratch_path(tmp_path: Path):
    # Given an ONNX model newer than this onnxruntime reads, in a scratch directory
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 99
    path = tmp_path / "scratch" / "model.onnx"
    path.parent.mkdir()
    path.write_bytes(model.SerializeToString())
    # When validation loads it
    with pytest.raises(ModelRejected) as rejected:
        runtime_named("onnxruntime").inspect(path, ModelConfig(name="m"))
    # Then the reason says what is wrong, without onnxruntime's source tree or our scratch path
    reason = rejected.value.message
    assert "Unsupported model IR version: 99" in reason
    assert "onnxruntime_src" not in reason and ".cc:" not in reason
    assert str(tmp_path) not in reason and "model.onnx" in reason


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "Load model from /tmp/a/b/model.onnx failed: bad",
            "Load model from model.onnx failed: bad",
        ),
        ("see s3://bucket/models/m/1/model.onnx", "see s3://bucket/models/m/1/model.onnx"),
        ("models/mlp/1/model.onnx is missing", "models/mlp/1/model.onnx is missing"),
        ("first\nsecond", "first"),
    ],
)
def test_paths_become_their_last_part_and_keys_and_urls_stay(text, expected):
    assert first_line(ValueError(text)) == expected


def test_model_code_that_fails_to_load_names_no_path_of_ours(tmp_path: Path):
    # Given model code whose initialize fails on a file of its version directory
    version = tmp_path / "cache" / "views" / "3f2a" / "1"
    version.mkdir(parents=True)
    (version / "model.py").write_text(
        "import os\n"
        "class TritonPythonModel:\n"
        "    def initialize(self, args):\n"
        "        open(os.path.join(os.path.dirname(__file__), 'labels.txt'))\n"
        "    def execute(self, requests):\n"
        "        return []\n"
    )
    config = ModelConfig(name="m", backend="python")
    from lambdaserve.errors import ModelCodeFailed
    from lambdaserve.runtimes.base import LoadOptions
    from lambdaserve.tensors.signature import Signature

    # When it loads where it serves
    with pytest.raises(ModelCodeFailed) as failed:
        runtime_named("python").load(
            version / "model.py", config, Signature((), ()), LoadOptions(python_models=True)
        )
    # Then the reason names the user's file, not where the cache keeps it
    assert "labels.txt" in failed.value.message
    assert str(tmp_path) not in failed.value.message
