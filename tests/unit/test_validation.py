from __future__ import annotations

import sys
from pathlib import Path

import pytest

from lambdaserve.config.model_config import ModelConfig, build, parse_document
from lambdaserve.errors import ModelRejected
from lambdaserve.publishing.validation import ValidatedVersion
from lambdaserve.tensors.signature import TensorSpec
from tests import builders


def validate(
    aws, model: str, version: int, files: dict[str, bytes], config: ModelConfig | None = None
) -> ValidatedVersion:
    for path, body in files.items():
        aws.put(f"models/{model}/{version}/{path}", body)
    objects = aws.services.repository.version_objects(model, version)
    validator = aws.services.registrar._validator
    return validator.validate(objects, config or ModelConfig(name=model))


def test_onnx_model_validates_with_its_signature_and_digest(aws):
    result = validate(aws, "mlp", 1, {"model.onnx": builders.onnx_mlp(4, 3)})
    assert result.runtime == "onnxruntime"
    assert result.signature.inputs == (TensorSpec("INPUT__0", "FP32", (-1, 4)),)
    assert result.signature.outputs == (TensorSpec("OUTPUT__0", "FP32", (-1, 3)),)
    assert len(result.sha256) == 64
    assert result.size == len(builders.onnx_mlp(4, 3))


def test_non_model_bytes_are_rejected(aws):
    with pytest.raises(ModelRejected, match="not an ONNX model|cannot load"):
        validate(aws, "junk", 1, {"model.onnx": b"<html>not a model</html>" * 10})


def test_a_version_without_a_model_file_says_what_to_upload(aws):
    with pytest.raises(ModelRejected, match="upload model.onnx"):
        validate(aws, "empty", 1, {"labels.txt": b"cat\ndog\n"})


def test_two_model_files_are_ambiguous(aws):
    with pytest.raises(ModelRejected, match="keep exactly one"):
        validate(aws, "both", 1, {"model.onnx": builders.onnx_mlp(), "model.pt": b"x"})


def test_files_over_the_size_limit_are_rejected_before_download(aws):
    with pytest.raises(ModelRejected, match="over the 1000000-byte limit"):
        validate(aws, "big", 1, {"model.onnx": builders.onnx_mlp(), "blob.bin": b"0" * 1_000_001})


def test_external_data_inside_the_version_directory_is_fine(aws, tmp_path: Path):
    model = builders.onnx_with_external_data(tmp_path, "weights/w.bin")
    result = validate(
        aws,
        "ext",
        1,
        {"model.onnx": model, "weights/w.bin": (tmp_path / "weights/w.bin").read_bytes()},
    )
    assert {f.path for f in result.files} == {"model.onnx", "weights/w.bin"}


@pytest.mark.parametrize("location", ["../../other/1/w.bin", "/etc/passwd"])
def test_external_data_leaving_the_version_directory_is_rejected(aws, tmp_path: Path, location):
    model = builders.onnx_with_external_data(tmp_path, location)
    with pytest.raises(ModelRejected, match="outside the version directory"):
        validate(aws, "escape", 1, {"model.onnx": model})


def test_missing_external_data_names_the_file(aws, tmp_path: Path):
    model = builders.onnx_with_external_data(tmp_path, "w.bin")
    with pytest.raises(ModelRejected, match="needs external data file 'w.bin'"):
        validate(aws, "missing", 1, {"model.onnx": model})


def test_config_declaring_a_tensor_the_model_lacks_is_rejected(aws):
    config = ModelConfig(name="mlp", inputs=(TensorSpec("pixels", "FP32", (-1, 4)),))
    with pytest.raises(ModelRejected, match="config declares input 'pixels'"):
        validate(aws, "mlp", 2, {"model.onnx": builders.onnx_mlp()}, config)


def test_plain_pickles_are_never_loaded(aws):
    with pytest.raises(ModelRejected, match="never unpickles"):
        validate(aws, "pickled", 1, {"model.pt": builders.plain_pickle()})


def test_non_zip_pt_is_rejected(aws):
    with pytest.raises(ModelRejected, match="not a TorchScript archive"):
        validate(aws, "text", 1, {"model.pt": b"hello world"})


TS_CONFIG = build(parse_document("config.pbtxt", builders.TORCHSCRIPT_CONFIG), "ts")


@pytest.mark.torch
def test_torch_save_archives_are_not_torchscript(aws):
    with pytest.raises(ModelRejected, match="torch.save archive"):
        validate(aws, "ts", 1, {"model.pt": builders.torch_save_state_dict()}, TS_CONFIG)


@pytest.mark.torch
def test_torchscript_validates_with_the_declared_signature(aws):
    result = validate(aws, "ts", 1, {"model.pt": builders.torchscript_mlp()}, TS_CONFIG)
    assert result.runtime == "torchscript"
    assert result.signature.inputs == (TensorSpec("INPUT__0", "FP32", (-1, 4)),)


@pytest.mark.torch
def test_torchscript_needs_inputs_and_outputs_in_the_config(aws):
    with pytest.raises(ModelRejected, match="declared in config.pbtxt"):
        validate(aws, "ts", 1, {"model.pt": builders.torchscript_mlp()})


@pytest.mark.torch
def test_torchscript_without_torch_installed_says_so(aws, monkeypatch: pytest.MonkeyPatch):
    model = builders.torchscript_mlp()
    # Given a process where torch cannot be imported (a None entry makes import fail)
    monkeypatch.setitem(sys.modules, "torch", None)
    with pytest.raises(ModelRejected, match="PyTorch is not installed"):
        validate(aws, "ts", 1, {"model.pt": model}, TS_CONFIG)
