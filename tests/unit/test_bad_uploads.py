"""Every upload ends in a state: READY, or UNAVAILABLE with a reason about the user's files
(never a server path); only storage failures are retried. Warm-up is checked at publish and
can neither exhaust memory nor fail a client's request."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import numpy as np
import pytest
from botocore.exceptions import ClientError

from lambdaserve.catalog import version_policy
from lambdaserve.runtimes.onnx import OnnxRuntime
from lambdaserve.serving.residency.warmup import MAX_WARMUP_BYTES, warm_up, zero_inputs
from lambdaserve.tensors.signature import Signature
from lambdaserve.wiring.inference import build_model_server
from tests import builders


def state(aws, model: str, version: int) -> tuple[str, str]:
    record = aws.services.catalog.get_version(model, version)
    assert record is not None
    return record.state, record.reason


def publish(aws, model: str, files: dict[str, bytes], version: int = 1) -> tuple[str, str]:
    for path, body in files.items():
        aws.put(f"models/{model}/{version}/{path}", body)
    aws.services.registrar.on_version_change(model, version)
    return state(aws, model, version)


def test_a_300_character_file_name_ends_unavailable_saying_so(aws):
    long_name = "w" * 300 + ".bin"
    got = publish(aws, "long", {"model.onnx": builders.onnx_mlp(), long_name: b"x"})
    assert got[0] == version_policy.UNAVAILABLE
    assert "at most 255 bytes" in got[1] and "rename it" in got[1]


def test_an_external_data_location_with_a_nul_byte_ends_unavailable(aws, tmp_path: Path):
    model = builders.load_onnx(builders.onnx_with_external_data(tmp_path, "w.bin"))
    for tensor in model.graph.initializer:
        for entry in tensor.external_data:
            if entry.key == "location":
                entry.value = "w\x00.bin"
    got = publish(aws, "nul", {"model.onnx": model.SerializeToString(), "w.bin": b"\0" * 64})
    assert got[0] == version_policy.UNAVAILABLE
    assert "is not a file name" in got[1]


def test_any_exception_in_validation_ends_unavailable_without_the_server_path(aws, monkeypatch):
    def explode(self, model_path: Path, config):
        raise RuntimeError(f"cannot mmap {model_path}: out of luck")

    monkeypatch.setattr(OnnxRuntime, "inspect", explode)
    state_, reason = publish(aws, "boom", {"model.onnx": builders.onnx_mlp()})
    assert state_ == version_policy.UNAVAILABLE
    assert "cannot mmap model.onnx: out of luck (RuntimeError)" in reason
    assert aws.settings.work_dir not in reason and "/tmp" not in reason


def test_runtime_rejections_name_the_file_not_where_the_server_put_it(aws):
    _, reason = publish(aws, "junk", {"model.onnx": b"\x08\x07" + b"\xff" * 64})
    assert "model.onnx" in reason
    assert aws.settings.work_dir not in reason and "validate-" not in reason


def test_a_storage_failure_is_retried_not_remembered(aws, monkeypatch):
    repository = aws.services.registrar._validator._repository
    real_download = repository.download

    def throttled(key: str, path: str, progress=None) -> None:
        raise ClientError({"Error": {"Code": "SlowDown", "Message": "reduce rate"}}, "GetObject")

    aws.put("models/flaky/1/model.onnx", builders.onnx_mlp())
    monkeypatch.setattr(repository, "download", throttled)
    # When the bucket fails while validating, the event is retried (the error propagates)
    with pytest.raises(ClientError):
        aws.services.registrar.on_version_change("flaky", 1)
    # And meanwhile the version is in a state that says why, not stuck in LOADING
    state_, reason = state(aws, "flaky", 1)
    assert state_ == version_policy.UNAVAILABLE and "could not read the version" in reason
    # Then the next attempt validates again rather than remembering the failure
    monkeypatch.setattr(repository, "download", real_download)
    aws.services.registrar.on_version_change("flaky", 1)
    assert state(aws, "flaky", 1)[0] == version_policy.READY


def _sample(data: list[float], shape: list[int]) -> bytes:
    inputs = [{"name": "INPUT__0", "datatype": "FP32", "shape": shape, "data": data}]
    return json.dumps({"inputs": inputs}).encode()


@pytest.mark.parametrize(
    ("sample", "message"),
    [
        (b"{not json", "warmup/sample.json is not a valid v2 request"),
        (_sample([1, 2, 3], [1, 3]), "expected shape [-1, 4], got [1, 3]"),
    ],
)
def test_a_malformed_warmup_sample_rejects_the_version_at_publish(aws, sample, message):
    files = {"model.onnx": builders.onnx_mlp(), "warmup/sample.json": sample}
    state_, reason = publish(aws, "warm", files)
    assert state_ == version_policy.UNAVAILABLE
    assert message in reason


def test_a_valid_warmup_sample_is_accepted(aws):
    files = {"model.onnx": builders.onnx_mlp(), "warmup/sample.json": _sample([1] * 4, [1, 4])}
    assert publish(aws, "warm", files)[0] == version_policy.READY


def test_a_dimension_of_a_trillion_serves_without_allocating_its_zeros(aws):
    # Given a model whose static input would take 4 TB of zeros to warm up
    assert publish(aws, "huge", {"model.onnx": builders.onnx_identity_shape([1, 10**12])})[0] == (
        version_policy.READY
    )
    server = build_model_server(aws.settings, aws.clients)
    # When it is loaded (what /ready does) Then the warm-up is skipped, not a MemoryError
    served = server.resolver.resolve("huge", None)
    assert server.load(served) is not None
    assert zero_inputs(served.signature.inputs) is None


def test_warm_up_failures_are_logged_never_raised(tmp_path: Path, caplog):
    class Failing:
        device = "cpu"

        def run(self, inputs, outputs):
            raise MemoryError("no room")

    signature = Signature.from_json(
        {"inputs": [{"name": "x", "datatype": "FP32", "shape": [-1, 2]}], "outputs": []}
    )
    warm_up(Failing(), signature, tmp_path, label="big version 3")
    # said with the model and version, as every log line about a version is
    assert "big version 3: warm-up run failed: no room" in caplog.text
    assert np.zeros((1, 2), np.float32).nbytes <= MAX_WARMUP_BYTES


def test_a_version_deleted_while_it_validates_ends_removed(aws, monkeypatch):
    repository = aws.services.registrar._validator._repository
    real_download = repository.download
    aws.put("models/gone/1/model.onnx", builders.onnx_mlp())

    def deleted_meanwhile(key: str, path: str, progress=None) -> None:
        # The user deletes the version between the listing and the download.
        aws.clients.s3.delete_object(Bucket=aws.settings.bucket, Key=key)
        real_download(key, path, progress)

    monkeypatch.setattr(repository, "download", deleted_meanwhile)
    aws.services.registrar.on_version_change("gone", 1)
    state_, reason = state(aws, "gone", 1)
    assert state_ == version_policy.UNAVAILABLE and reason.startswith("removed")


def test_a_rejection_is_logged_with_its_model_version_and_reason_in_the_words(aws, caplog):
    # Given a local text log, which shows a record's message and not its structured extras
    caplog.set_level(logging.INFO, logger="lambdaserve")
    # When an upload is rejected
    _, reason = publish(aws, "junk", {"model.onnx": b"\x08\x07" + b"\xff" * 64})
    # Then the line says which model, which version and why
    lines = [record.getMessage() for record in caplog.records]
    assert f"junk version 1 rejected: {reason}" in lines


def test_a_model_file_outside_a_version_directory_is_logged_with_where_it_belongs(aws, caplog):
    from lambdaserve.publishing.events import EventBatch

    # Given a model file uploaded straight into the model's folder
    caplog.set_level(logging.WARNING, logger="lambdaserve")
    aws.put("models/flat/model.onnx", builders.onnx_mlp())
    # When its event arrives
    EventBatch(aws.services.registrar, aws.services.uploads).on_object_event(
        "models/flat/model.onnx"
    )
    # Then the log says it is ignored, and where it should go
    assert (
        "ignoring models/flat/model.onnx: a model file belongs in a version directory, "
        "e.g. models/flat/1/model.onnx"
    ) in [record.getMessage() for record in caplog.records]
    # And the index and describe say so too, until the file is where it belongs
    [record] = aws.services.catalog.versions("flat")
    assert record.state == version_policy.UNAVAILABLE
    assert record.reason == (
        "models/flat/model.onnx is outside a version directory: upload it as "
        "models/flat/1/model.onnx"
    )
    aws.put("models/flat/1/model.onnx", builders.onnx_mlp())
    EventBatch(aws.services.registrar, aws.services.uploads).on_object_event(
        "models/flat/1/model.onnx"
    )
    assert aws.services.catalog.get_version("flat", 1).state == version_policy.READY


@pytest.mark.parametrize(
    ("key", "advice"),
    [
        ("models/resnet.onnx", "e.g. models/resnet/1/model.onnx"),
        ("models/model.onnx", "e.g. models/<model>/1/model.onnx"),
        ("models/mlp/v2/model.onnx", "upload it as models/mlp/2/model.onnx"),
        ("models/mlp/latest/model.pt", "upload it as models/mlp/1/model.pt"),
    ],
)
def test_a_key_outside_the_layout_is_logged_with_where_it_would_be_read(aws, caplog, key, advice):
    from lambdaserve.publishing.events import EventBatch

    caplog.set_level(logging.WARNING, logger="lambdaserve")
    aws.put(key, builders.onnx_mlp())
    EventBatch(aws.services.registrar, aws.services.uploads).on_object_event(key)
    [line] = [r.getMessage() for r in caplog.records if r.getMessage().startswith("ignoring")]
    assert line.startswith(f"ignoring {key}: ") and advice in line


def test_a_paddle_1x_program_that_is_no_inference_program_is_refused_saying_so(aws):
    # Given Paddle 1.x's layout, __model__ and __params__, whose program has no feed or fetch
    state, reason = publish(aws, "uci", {"__model__": b"\x0a\x00", "__params__": b"\x00" * 8})
    # Then the version says what the file is not, and how to save one (Paddle Inference
    # serves real __model__ programs: tests/unit/test_paddle_inference.py)
    assert state == version_policy.UNAVAILABLE
    assert "__model__ is not a Paddle inference program" in reason
    assert "paddle.static.save_inference_model" in reason
