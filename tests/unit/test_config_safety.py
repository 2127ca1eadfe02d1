"""A bad config never takes down what serves (Triton keeps the last good load); configs are
checked against the model as Triton checks them; a missing runtime is not remembered."""

from __future__ import annotations

import sys
import threading
from dataclasses import replace

import numpy as np
import pytest

from lambdaserve.catalog import version_policy
from lambdaserve.errors import InvalidInput
from lambdaserve.protocol.v2 import InferInput, InferRequest
from lambdaserve.publishing.management import ModelManager
from lambdaserve.publishing.registrar import Registrar
from lambdaserve.wiring.inference import build_model_server
from tests import builders

GOOD = b'max_batch_size: 8\ninput [{ name: "INPUT__0", data_type: TYPE_FP32, dims: [4] }]\n'
TS_CONFIG = (
    b'platform: "pytorch_libtorch"\nmax_batch_size: 8\n'
    b'input [{ name: "INPUT__0", data_type: TYPE_FP32, dims: [4] }]\n'
    b'output [{ name: "OUTPUT__0", data_type: TYPE_FP32, dims: [3] }]\n'
)


def states(aws, model: str) -> dict[int, tuple[str, str]]:
    return {v.version: (v.state, v.reason) for v in aws.services.catalog.versions(model)}


@pytest.fixture
def serving(aws):
    aws.put("models/mlp/config.pbtxt", GOOD)
    aws.put("models/mlp/1/model.onnx", builders.onnx_mlp(4, 3))
    aws.services.registrar.reconcile_model("mlp")
    assert states(aws, "mlp") == {1: (version_policy.READY, "")}
    return aws


@pytest.mark.parametrize(
    ("config", "why"),
    [
        (b"max_batch_size: 8\ninptu [{ name: 'x' }]\n", "config.pbtxt is not valid"),
        (
            b'max_batch_size: 8\ninput [{ name: "INPUT__0", data_type: TYPE_FP32, dims: [5] }]',
            "dimension 1 is 4",
        ),
        (
            b'max_batch_size: 0\ninput [{ name: "INPUT__0", data_type: TYPE_FP32, dims: [4] }]',
            "model's has 2 dimensions",
        ),
        (b'platform: "tensorrt_plan"', "platform 'tensorrt_plan' is not supported"),
    ],
)
def test_a_bad_config_over_a_serving_model_keeps_the_last_good_one(serving, config, why):
    # When a config with a typo (or one the model fails) is uploaded over a serving model
    serving.put("models/mlp/config.pbtxt", config)
    serving.services.registrar.reconcile_model("mlp")
    # Then the version keeps serving, and the rejection shows beside READY
    [(state, reason)] = states(serving, "mlp").values()
    assert state == version_policy.READY
    assert reason.startswith("serving the last good config; a new one was rejected: config.pbtxt")
    assert why in reason
    record = serving.services.catalog.get_model("mlp")
    assert why in record.rejected_config and record.config_error == ""
    view = serving.services.manager.view("mlp")
    assert view.config.max_batch_size == 8  # the last good config is what applies
    # And requests are still answered
    server = build_model_server(serving.settings, serving.clients)
    assert server.resolver.resolve("mlp", None).version == 1
    # When the config is fixed Then the note goes away
    serving.put("models/mlp/config.pbtxt", GOOD)
    serving.services.registrar.reconcile_model("mlp")
    assert states(serving, "mlp") == {1: (version_policy.READY, "")}
    assert serving.services.catalog.get_model("mlp").rejected_config == ""


def test_a_model_that_never_had_a_good_config_is_unavailable_saying_why(aws):
    aws.put("models/fresh/config.pbtxt", b"max_batch_size: [")
    aws.put("models/fresh/1/model.onnx", builders.onnx_mlp())
    aws.services.registrar.reconcile_model("fresh")
    [(state, reason)] = states(aws, "fresh").values()
    assert state == version_policy.UNAVAILABLE and reason.startswith("model config is invalid")


def test_api_overrides_that_would_stop_serving_versions_are_refused(serving):
    wider = {"input": [{"name": "INPUT__0", "data_type": "TYPE_FP32", "dims": [5]}]}
    with pytest.raises(InvalidInput, match="serving versions would stop.*dimension 1 is 4"):
        serving.services.manager.update_config("mlp", wider)
    assert states(serving, "mlp")[1][0] == version_policy.READY


@pytest.mark.parametrize(
    ("config", "files", "why"),
    [
        (b'platform: "tensorrt_plan"', {"model.onnx": None}, "'tensorrt_plan' is not supported"),
        (
            b'platform: "tensorflow_graphdef"',
            {"model.graphdef": b"x"},
            "'tensorflow_graphdef' is not supported",
        ),
        (
            b'platform: "tensorflow_savedmodel"',  # TensorFlow's, read without it
            {"saved_model.pb": b"x"},
            "saved_model.pb is not a TF SavedModel",
        ),
        (b'backend: "openvino"', {"saved_model.pb": b"x"}, "OpenVINO cannot read the SavedModel"),
        (b'backend: "pytorch"', {"model.onnx": None}, "backend 'pytorch' needs model.pt"),
        (
            b'platform: "onnxruntime_onnx"\nmax_batch_size: 4\n'
            b'input [{ name: "INPUT__0", data_type: TYPE_FP32, dims: [1, 4] }]',
            {"model.onnx": None},
            "max_batch_size 4 adds the batch dimension",
        ),
        (
            b"max_batch_size: 4",
            {"model.onnx": builders.onnx_identity_shape([1, 4])},
            "needs a batch (first, dynamic) dimension",
        ),
    ],
)
def test_configs_are_checked_against_the_model_as_triton_does(aws, config, files, why):
    aws.put("models/m/config.pbtxt", config)
    for name, body in files.items():
        aws.put(f"models/m/1/{name}", body if body is not None else builders.onnx_mlp())
    aws.services.registrar.reconcile_model("m")
    [(state, reason)] = states(aws, "m").values()
    assert state == version_policy.UNAVAILABLE
    assert why in reason


def test_a_config_inside_a_version_directory_is_ignored_saying_where_it_belongs(aws):
    aws.put("models/m/1/model.onnx", builders.onnx_mlp())
    aws.put("models/m/1/config.pbtxt", b"max_batch_size: 8")
    aws.services.registrar.reconcile_model("m")
    [(state, reason)] = states(aws, "m").values()
    assert state == version_policy.READY
    assert "1/config.pbtxt" not in reason  # paths are relative to the version
    assert "config.pbtxt inside the version directory is ignored" in reason
    assert "belongs at models/m/config.pbtxt" in reason


@pytest.mark.torch
def test_a_missing_runtime_is_retried_when_asked_not_remembered(aws, monkeypatch):
    aws.put("models/ts/config.pbtxt", TS_CONFIG)
    aws.put("models/ts/1/model.pt", builders.torchscript_mlp())
    import torch

    # Given a manage process without PyTorch
    monkeypatch.setitem(sys.modules, "torch", None)
    aws.services.registrar.reconcile_model("ts")
    [(state, reason)] = states(aws, "ts").values()
    assert state == version_policy.UNAVAILABLE and "PyTorch is not installed" in reason
    # When PyTorch is installed and the model is loaded again (Triton's load)
    monkeypatch.setitem(sys.modules, "torch", torch)
    aws.services.manager.load("ts")
    # Then the same bytes validate, without a re-upload
    assert states(aws, "ts")[1][0] == version_policy.READY


@pytest.mark.torch
def test_a_reupload_of_the_same_bytes_retries_a_missing_runtime(aws, monkeypatch):
    aws.put("models/ts/config.pbtxt", TS_CONFIG)
    aws.put("models/ts/1/model.pt", builders.torchscript_mlp())
    import torch

    monkeypatch.setitem(sys.modules, "torch", None)
    aws.services.registrar.on_version_change("ts", 1)
    assert states(aws, "ts")[1][0] == version_policy.UNAVAILABLE
    monkeypatch.setitem(sys.modules, "torch", torch)
    aws.put("models/ts/1/model.pt", builders.torchscript_mlp())  # same bytes, same etag
    aws.services.registrar.on_version_change("ts", 1)
    assert states(aws, "ts")[1][0] == version_policy.READY


def test_a_load_waits_for_a_validation_an_event_has_in_progress(aws):
    # Given an UNAVAILABLE version (its runtime was missing) that a later S3 event is
    # validating again: its LOADING item observed after the load's, so the event's write wins
    aws.put("models/m/1/model.onnx", builders.onnx_mlp())
    services = aws.services
    services.registrar.reconcile_model("m")
    catalog = services.catalog
    served = catalog.get_version("m", 1)
    catalog.put_version(replace(served, state=version_policy.UNAVAILABLE, fingerprint=""))
    in_progress = replace(served, pending=True, state="LOADING", observed_at=2**62)
    naps: list[float] = []

    def event_finishes_meanwhile(seconds: float) -> None:
        naps.append(seconds)
        if len(naps) == 3:
            catalog.put_version(replace(in_progress, pending=False, state="READY"))

    raced = ValidationRacedByEvent(services.registrar, catalog, in_progress)
    manager = ModelManager(
        services.repository,
        catalog,
        raced,
        configs=services.configs,
        labels=services.labels,
        watchers=services.watchers,
        sleep=event_finishes_meanwhile,
    )
    # When the model is loaded (Triton's load)
    manager.load("m")
    # Then the load answered after the event's validation, with the version it made READY
    assert len(naps) == 3 and catalog.get_version("m", 1).state == version_policy.READY


class ValidationRacedByEvent:
    """The registrar, with an S3 event's validation starting during the load's reconcile."""

    def __init__(self, registrar, catalog, in_progress) -> None:
        self._registrar = registrar
        self._catalog = catalog
        self._in_progress = in_progress

    def reconcile_model(self, model: str) -> None:
        self._registrar.reconcile_model(model)
        self._catalog.put_version(self._in_progress)


def test_a_load_validates_again_while_another_thread_reconciles_the_model(aws):
    # Given a version an S3 event is validating in another thread (a runtime was missing)
    aws.put("models/m/1/model.onnx", builders.onnx_mlp())
    services = aws.services
    validator = HeldValidator(services.registrar._validator)
    registrar = Registrar(
        services.repository,
        services.catalog,
        validator,
        configs=services.configs,
        labels=services.labels,
        watchers=services.watchers,
    )
    event = threading.Thread(target=registrar.reconcile_model, args=("m",))
    event.start()
    assert validator.entered.wait(10)
    # When a load reconciles the same model in this thread
    try:
        services.catalog.put_version(
            replace(services.catalog.get_version("m", 1), pending=False, fingerprint="")
        )
        registrar.reconcile_model("m")
    finally:
        validator.release.set()
        event.join(10)
    # Then the load validated the version itself instead of skipping the model
    assert validator.calls == 2
    assert services.catalog.get_version("m", 1).state == version_policy.READY


class HeldValidator:
    """The real validator; its first call waits until released (an event in progress)."""

    def __init__(self, validator) -> None:
        self._validator = validator
        self.entered = threading.Event()
        self.release = threading.Event()
        self.calls = 0

    def validate(self, *args, **kwargs):
        self.calls += 1
        if self.calls == 1:
            self.entered.set()
            self.release.wait(10)
        return self._validator.validate(*args, **kwargs)


def test_every_field_a_config_sets_is_applied_or_named(aws):
    # Given a config setting nested fields lambdaserve applies and does not apply
    config = GOOD + (
        b"\ninstance_group [{ count: 4 kind: KIND_GPU gpus: [0, 1] "
        b'rate_limiter { resources [{ name: "R" count: 1 }] } }]\n'
        b"dynamic_batching { preserve_ordering: true }\n"
        b'metric_tags { key: "team" value: "vision" }\n'
    )
    aws.put("models/mlp/config.pbtxt", config)
    aws.put("models/mlp/1/model.onnx", builders.onnx_mlp(4, 3))
    aws.services.registrar.reconcile_model("mlp")
    # Then the version serves, and each of them is named in the catalog's warnings
    warnings = aws.services.catalog.get_model("mlp").config_warnings
    for field in ("instance_group.gpus", "metric_tags"):
        assert field in " | ".join(warnings), field
    # and the ones it applies (instances, preserve_ordering) are not
    joined = " | ".join(warnings)
    for applied in ("instance_group.count", "preserve_ordering", "rate_limiter is not applied"):
        assert applied not in joined, applied
    # and the rate limiter, applied by serve and dev and not by the infer function, says so
    assert "instance_group rate_limiter is applied by `serve` and `dev`" in joined
    assert "not by the infer function" in joined
    assert states(aws, "mlp")[1][0] == version_policy.READY


def test_default_model_filename_chooses_the_model_file_as_in_triton(aws):
    # Given a version whose ONNX file is named as its config's default_model_filename says
    aws.put("models/named/config.pbtxt", b'default_model_filename: "resnet_small.onnx"')
    aws.put("models/named/1/resnet_small.onnx", builders.onnx_mlp(4, 3))
    aws.services.registrar.reconcile_model("named")
    # Then it validates with ONNX Runtime, and serves
    record = aws.services.catalog.get_version("named", 1)
    assert (record.state, record.runtime) == (version_policy.READY, "onnxruntime")
    server = build_model_server(aws.settings, aws.clients)
    request = InferRequest(
        inputs=(InferInput("INPUT__0", "FP32", (1, 4), np.ones((1, 4), np.float32)),)
    )
    outputs = server.infer("named", None, request, lambda _, produced: produced)
    assert outputs["OUTPUT__0"].shape == (1, 3)
    # And a name the version does not have is refused saying so
    aws.put("models/other/config.pbtxt", b'default_model_filename: "missing.onnx"')
    aws.put("models/other/1/model.onnx", builders.onnx_mlp(4, 3))
    aws.services.registrar.reconcile_model("other")
    assert "names a file the version does not have" in states(aws, "other")[1][1]


def test_decoupled_is_for_python_models_only(aws):
    aws.put("models/d/config.pbtxt", GOOD + b"\nmodel_transaction_policy { decoupled: true }")
    aws.put("models/d/1/model.onnx", builders.onnx_mlp(4, 3))
    aws.services.registrar.reconcile_model("d")
    [(state, reason)] = states(aws, "d").values()
    assert state == version_policy.UNAVAILABLE
    assert 'served for Python models (backend: "python") only' in reason
