"""Python models at publish: checked statically in the manage function (their code never runs
there), opt-in per deployment, and a load failure where they serve is a 503 with the reason."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from lambdaserve.catalog import version_policy
from lambdaserve.errors import ModelNotReady
from lambdaserve.metrics.custom import CUSTOM_METRICS
from lambdaserve.metrics.prometheus import exposition, metrics_registry
from lambdaserve.protocol.v2 import InferInput, InferRequest
from lambdaserve.wiring.inference import build_model_server

MODELS = Path(__file__).parent.parent / "fixtures" / "python_models"
CONFIG = (MODELS / "add_sub" / "config.pbtxt").read_bytes()
SOURCE = (MODELS / "add_sub" / "1" / "model.py").read_bytes()


@pytest.fixture
def enabled(aws):
    validator = aws.services.registrar._validator
    validator._python_models = True
    aws.settings = replace(aws.settings, python_models=True)
    return aws


def publish(aws, model: str, source: bytes, config: bytes = CONFIG) -> tuple[str, str]:
    aws.put(f"models/{model}/config.pbtxt", config.replace(b'"add_sub"', f'"{model}"'.encode()))
    aws.put(f"models/{model}/1/model.py", source)
    aws.services.registrar.reconcile_model(model)
    record = aws.services.catalog.get_version(model, 1)
    return record.state, record.reason


@pytest.mark.parametrize(
    ("source", "config", "why"),
    [
        (b"class TritonPythonModel:\n  def execute(self, r)\n", CONFIG, "model.py line 2"),
        (b"class Other:\n    pass\n", CONFIG, "defines no class TritonPythonModel"),
        (
            b"class TritonPythonModel:\n    def initialize(self, a): pass\n",
            CONFIG,
            "has no execute(self, requests)",
        ),
        (SOURCE, b'backend: "python"', "declares its inputs and outputs"),
    ],
)
def test_model_py_is_checked_statically(enabled, source, config, why):
    state, reason = publish(enabled, "py", source, config)
    assert state == version_policy.UNAVAILABLE and why in reason


def test_model_code_never_runs_in_the_manage_function(enabled, tmp_path: Path):
    marker = tmp_path / "ran"
    source = f"open({str(marker)!r}, 'w').write('x')\n".encode() + SOURCE
    assert publish(enabled, "py", source)[0] == version_policy.READY
    assert not marker.exists()


def test_python_models_are_opt_in(aws):
    # Given a deployment without LAMBDASERVE_PYTHON_MODELS
    state, reason = publish(aws, "py", SOURCE)
    assert state == version_policy.UNAVAILABLE
    assert "Python models are disabled here" in reason and "LAMBDASERVE_PYTHON_MODELS=1" in reason
    # When the deployment enables them and the model is loaded (Triton's load)
    aws.services.registrar._validator._python_models = True
    aws.services.manager.load("py")
    # Then the same upload validates
    assert aws.services.catalog.get_version("py", 1).state == version_policy.READY


def test_a_serving_process_without_the_opt_in_refuses_to_run_model_code(enabled):
    assert publish(enabled, "py", SOURCE)[0] == version_policy.READY
    server = build_model_server(replace(enabled.settings, python_models=False), enabled.clients)
    with pytest.raises(ModelNotReady, match="Python models are disabled here"):
        server.load(server.resolver.resolve("py", None))


def test_a_load_failure_where_it_serves_is_a_503_with_the_reason(enabled):
    source = SOURCE.replace(b"self.model_config = json.loads", b"raise KeyError('labels.txt');x=(")
    source = source.replace(b'(args["model_config"])', b'args["model_config"])')
    assert publish(enabled, "py", source)[0] == version_policy.READY  # statically fine
    server = build_model_server(enabled.settings, enabled.clients)
    request = InferRequest(
        inputs=tuple(
            InferInput(n, "FP32", (4,), np.ones(4, np.float32)) for n in ("INPUT0", "INPUT1")
        )
    )
    with pytest.raises(ModelNotReady, match="failed to load: KeyError: 'labels.txt'"):
        server.infer("py", None, request, lambda _, outputs: outputs)
    # and READY means it answers: the catalog now says so too, with the reason
    record = enabled.services.catalog.get_version("py", 1)
    assert record.state == version_policy.UNAVAILABLE and "labels.txt" in record.reason


@pytest.mark.parametrize("warmup", [False, True])
def test_model_code_is_warmed_up_only_with_model_warmup(enabled, tmp_path: Path, warmup):
    # Given a Python model whose execute() has a side effect (it writes a file)
    marker = tmp_path / "executed"
    source = SOURCE.replace(
        b"    def execute(self, requests):",
        f"    def execute(self, requests):\n        open({str(marker)!r}, 'a').write('x')".encode(),
    )
    assert source != SOURCE
    config = CONFIG
    if warmup:  # Triton's model_warmup: the one case Triton runs a Python model at load
        config += (
            b'model_warmup [{ name: "ones" batch_size: 1 inputs [{ key: "INPUT0" value: '
            b'{ data_type: TYPE_FP32 dims: [4] zero_data: true }}, { key: "INPUT1" value: '
            b"{ data_type: TYPE_FP32 dims: [4] zero_data: true }}] }]"
        )
    assert publish(enabled, "py", source, config)[0] == version_policy.READY
    # When it is loaded where it serves
    server = build_model_server(enabled.settings, enabled.clients)
    server.load(server.resolver.resolve("py", None))
    # Then its code ran only when the config asked for warm-up, as in Triton
    assert marker.exists() == warmup


COUNTING_CONFIG = b"""
name: "counting"
backend: "python"
max_batch_size: 8
input [{ name: "X" data_type: TYPE_FP32 dims: [ 2 ] }]
output [{ name: "CALL_SIZE" data_type: TYPE_INT32 dims: [ 1 ] }]
"""
COUNTING_SOURCE = b"""
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "X").as_numpy()
            if np.isnan(x).any():
                error = pb_utils.TritonError("NaN input", pb_utils.TritonError.INVALID_ARG)
                responses.append(pb_utils.InferenceResponse(error=error))
                continue
            size = np.full((x.shape[0], 1), len(requests), dtype=np.int32)
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("CALL_SIZE", size)]))
        return responses
"""


def test_the_requests_of_a_batch_reach_one_execute_call_each_answered_alone(enabled):
    # Given a batching Python model that answers how many requests its execute call got
    enabled.put("models/counting/config.pbtxt", COUNTING_CONFIG)
    enabled.put("models/counting/1/model.py", COUNTING_SOURCE)
    enabled.services.registrar.reconcile_model("counting")
    server = build_model_server(enabled.settings, enabled.clients)

    def request(value: float) -> InferRequest:
        array = np.full((1, 2), value, np.float32)
        return InferRequest(inputs=(InferInput("X", "FP32", (1, 2), array),))

    # When five requests, one of them bad, are served as one batch (Triton's contract)
    results = server.infer_many("counting", None, [request(v) for v in (1, 2, np.nan, 4, 5)])
    # Then one execute call saw all five, the bad one failed alone, the rest answered
    assert [r.error is None for r in results] == [True, True, False, True, True]
    assert [int(r.outputs["CALL_SIZE"][0, 0]) for r in results if r.outputs] == [5, 5, 5, 5]
    assert "NaN input" in str(results[2].error)
    stats = server.stats.snapshot("counting", None)["model_stats"][0]
    assert stats["inference_count"] == 4 and stats["execution_count"] == 1


def test_handlers_are_opt_in_too(aws):
    aws.put("models/h/1/handler.py", b"def handle(data, context):\n    return data\n")
    aws.services.registrar.reconcile_model("h")
    record = aws.services.catalog.get_version("h", 1)
    assert record.state == version_policy.UNAVAILABLE
    assert "LAMBDASERVE_PYTHON_MODELS=1" in record.reason


def test_the_pb_utils_surface_of_pythons_backend_examples(enabled):
    # Given add_sub, and a model calling it by a name read from a STRING tensor (bytes),
    # counting requests in a MetricFamily, round-tripping BYTES and passing DLPack tensors
    for model in ("add_sub", "pb_features"):
        for file in sorted((MODELS / model).rglob("*")):
            if file.is_file():
                key = f"models/{model}/{file.relative_to(MODELS / model).as_posix()}"
                enabled.put(key, file.read_bytes())
        enabled.services.registrar.reconcile_model(model)
    server = build_model_server(enabled.settings, enabled.clients)
    a, b = np.arange(4, dtype=np.float32), np.full(4, 0.5, np.float32)
    request = InferRequest(
        inputs=(
            InferInput("MODEL_NAME", "BYTES", (1,), np.array([b"add_sub"], dtype=object)),
            InferInput("INPUT0", "FP32", (4,), a),
            InferInput("INPUT1", "FP32", (4,), b),
        )
    )
    # When it is called
    outputs = server.infer("pb_features", None, request, lambda _, produced: produced)
    # Then the BLS call reached add_sub, and each helper answered as Triton's does
    np.testing.assert_allclose(outputs["OUTPUT0"], a + b)
    assert outputs["ROUND_TRIP"].tolist() == [b"one", b"two"]
    assert outputs["FACTS"].tolist() == [b"11", b"True", b"False"]
    counted = {f.name: f for f in CUSTOM_METRICS.collect()}["pb_features_requests"]
    assert counted.samples[0].labels == {"model": "pb_features"}
    assert counted.samples[0].value >= 1
    # and /metrics carries the family's description as its HELP line, as Triton's does
    scraped = exposition(metrics_registry(lambda: server.stats)).decode()
    assert "# HELP pb_features_requests requests seen by pb_features" in scraped
