"""TF Serving's users move in with their SavedModels: half_plus_two, the model of TF
Serving's own tests, as TF1 and TF2 SavedModels (``tests/fixtures/half_plus_two``, built by
``tf_builders/half_plus_two.py`` with the signatures TF Serving's tests call) and SavedModels
TensorFlow builds here (a lookup table
OpenVINO refuses, a second signature, TF Serving's warm-up file), uploaded as TF Serving's
layout has them, served by TensorFlow, loaded where they serve before READY, answering TF
Serving's REST API with TF Serving's own expected values
(tensorflow_serving/model_servers/tensorflow_model_server_test.py)."""

from __future__ import annotations

import importlib.util
import logging
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.integration import matrix_doors
from tests.integration.grpc_support import lambdaserve_serve
from tests.integration.matrix_doors import measure
from tests.integration.test_feature_door_matrix import Probes, table
from tests.integration.test_grpc_peers import needs, peer

# TensorFlow's native library is loaded here: these tests run in a pytest process of their
# own (`make test` runs `-m tensorflow` apart), see the marker in pyproject.toml
pytestmark = [
    pytest.mark.tensorflow,
    pytest.mark.skipif(
        importlib.util.find_spec("tensorflow") is None, reason="tensorflow is not installed"
    ),
]
HALF = Path(__file__).parent.parent / "fixtures" / "half_plus_two"
BUILDER = Path(__file__).parent.parent / "fixtures" / "tf_builders" / "savedmodels.py"
HALF_PLUS_TWO = ["tf1", "tf2"]


@pytest.fixture(scope="module")
def savedmodels(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("savedmodels")
    subprocess.run([sys.executable, str(BUILDER), str(out)], check=True, capture_output=True)
    return out


def publish(stack, name: str, directory: Path, state: str = "READY", version: int = 1) -> str:
    for path in sorted(p for p in directory.rglob("*") if p.is_file()):
        key = f"models/{name}/{version}/{path.relative_to(directory).as_posix()}"
        stack.put(key, path.read_bytes())
    return stack.wait_state(name, version, state, timeout_s=90)


def tf_servings_metadata_of_half_plus_two(name: str, version: str) -> dict:
    """TF Serving's REST metadata of the TF1 half_plus_two (testGetModelMetadataREST's
    expectation): each signature's tensors by key, their dtype, shape and graph name."""
    rows = {"dim": [{"size": "-1", "name": ""}, {"size": "1", "name": ""}], "unknown_rank": False}
    examples = {
        "dtype": "DT_STRING",
        "tensor_shape": {"dim": [], "unknown_rank": True},
        "name": "tf_example:0",
    }

    def floats(tensor: str) -> dict:
        return {"dtype": "DT_FLOAT", "tensor_shape": rows, "name": tensor}

    signatures = {
        "serving_default": ("x", floats("x:0"), "y", "y:0", "predict"),
        "classify_x_to_y": ("inputs", examples, "scores", "y:0", "classify"),
        "regress_x_to_y": ("inputs", examples, "outputs", "y:0", "regress"),
        "regress_x_to_y2": ("inputs", examples, "outputs", "y2:0", "regress"),
        "regress_x2_to_y3": ("inputs", floats("x2:0"), "outputs", "y3:0", "regress"),
    }
    defs = {
        key: {
            "inputs": {input_key: tensor},
            "outputs": {output_key: floats(output)},
            "method_name": f"tensorflow/serving/{method}",
            "defaults": {},
        }
        for key, (input_key, tensor, output_key, output, method) in signatures.items()
    }
    return {
        "model_spec": {"name": name, "signature_name": "", "version": version},
        "metadata": {"signature_def": {"signature_def": defs}},
    }


def post(stack, path: str, body: dict) -> dict:
    response = stack.inference.post(path, json=body)
    assert response.status_code == 200, response.text
    return response.json()


@pytest.mark.parametrize("fixture", HALF_PLUS_TWO)
def test_tf_servings_half_plus_two_answers_predict_classify_and_regress(stack, fixture, caplog):
    """Given half_plus_two (y = 0.5x + 2), which OpenVINO refuses (TF1) or
    converts without its input (TF2),
    When it is uploaded as TF Serving's users have it,
    Then TensorFlow serves it, loaded where it serves before READY, and :classify and
    :regress answer TF Serving's values (testClassifyREST, testRegressREST)."""
    caplog.set_level(logging.INFO, logger="lambdaserve.publishing.registrar")
    publish(stack, "default", HALF / fixture / "00000123")
    assert stack.services.catalog.get_version("default", 1).runtime == "tensorflow"
    loaded = [r.getMessage() for r in caplog.records if r.name.endswith("registrar")]
    assert any(line.startswith("default version 1 loaded in") for line in loaded), loaded
    classify = {"signature_name": "classify_x_to_y", "examples": [{"x": 2.0}]}
    assert post(stack, "/v1/models/default:classify", classify) == {"results": [[["", 3.0]]]}
    regress = {"signature_name": "regress_x_to_y", "examples": [{"x": 2.0}]}
    assert post(stack, "/v1/models/default:regress", regress) == {"results": [3.0]}


def test_tf1_half_plus_two_predicts_and_describes_itself_as_tf_serving(stack):
    """Given the TF1 half_plus_two as version 123, whose x is [-1, 1],
    When [2.0, 3.0, 4.0] is sent in the row and the columnar format, and its metadata read,
    Then the answers are TF Serving's (testPredictREST, testPredictColumnarREST): the rows
    reshaped to x's shape as TensorFlow does, the outputs as flat as the inputs; and the
    metadata is what TF Serving answers for it (testGetModelMetadataREST)."""
    publish(stack, "default", HALF / HALF_PLUS_TWO[0] / "00000123", version=123)
    metadata = stack.inference.get("/v1/models/default/metadata").json()
    assert metadata == tf_servings_metadata_of_half_plus_two("default", "123")
    rows = post(stack, "/v1/models/default:predict", {"instances": [2.0, 3.0, 4.0]})
    assert rows == {"predictions": [3.0, 3.5, 4.0]}
    columns = post(stack, "/v1/models/default:predict", {"inputs": [2.0, 3.0, 4.0]})
    assert columns == {"outputs": [3.0, 3.5, 4.0]}
    x2 = {"signature_name": "regress_x2_to_y3", "instances": [[1.0]]}  # y3 = 0.5 x2 + 3
    assert post(stack, "/v1/models/default:predict", x2) == {"predictions": [[3.5]]}


def test_tf2_half_plus_two_predicts_and_every_signature_is_in_metadata(stack):
    """Given the TF2 half_plus_two (OpenVINO dropped its input: 'takes 0 inputs'),
    When it predicts and its metadata is read,
    Then predict answers 3.0 for 2.0 (testPredictSavedModel) and the metadata lists every
    signature with its method name."""
    publish(stack, "default", HALF / HALF_PLUS_TWO[1] / "00000123")
    assert post(stack, "/v1/models/default:predict", {"instances": [2.0]}) == {"predictions": [3.0]}
    metadata = stack.inference.get("/v1/models/default/metadata").json()
    defs = metadata["metadata"]["signature_def"]["signature_def"]
    assert set(defs) == {
        "serving_default",
        "classify_x_to_y",
        "classify_x2_to_y3",
        "regress_x_to_y",
        "regress_x_to_y2",
        "regress_x2_to_y3",
    }
    assert defs["classify_x_to_y"]["inputs"]["inputs"]["dtype"] == "DT_STRING"


def test_a_lookup_table_openvino_refuses_is_ready_and_answers(stack, savedmodels):
    """Given a SavedModel whose graph holds a StaticHashTable (OpenVINO refuses it),
    When it is published without a backend,
    Then TensorFlow serves it: READY, and the table's ids answer v2 and TF Serving's API."""
    publish(stack, "lookup", savedmodels / "lookup")
    record = stack.services.catalog.get_version("lookup", 1)
    assert record.runtime == "tensorflow" and "served by TensorFlow" in record.notes
    answer = post(stack, "/v1/models/lookup:predict", {"instances": ["b", "a", "zz"]})
    assert answer == {"predictions": [2, 1, -1]}
    body = {"inputs": [{"name": "keys", "datatype": "BYTES", "shape": [1], "data": ["a"]}]}
    assert post(stack, "/v2/models/lookup/infer", body)["outputs"][0]["data"] == [1]


def test_a_second_signature_answers_by_name(stack, savedmodels):
    """Given a SavedModel with serving_default (x + 1) and times_two (x * 2),
    When each is asked for by signature_name, and one it does not have,
    Then each answers its own, and the unknown one is a 400 naming those it has."""
    publish(stack, "two", savedmodels / "two")
    rows = {"instances": [[1.0, 2.0]]}
    assert post(stack, "/v1/models/two:predict", rows) == {"predictions": [[2.0, 3.0]]}
    named = {**rows, "signature_name": "times_two"}
    assert post(stack, "/v1/models/two:predict", named) == {"predictions": [[2.0, 4.0]]}
    wrong = stack.inference.post("/v1/models/two:predict", json={**rows, "signature_name": "no"})
    assert wrong.status_code == 400 and "times_two" in wrong.text, wrong.text
    not_examples = stack.inference.post("/v1/models/two:regress", json={"examples": [{"x": 1}]})
    assert not_examples.status_code == 400 and ":predict" in not_examples.text
    # and both signatures' answers are counted in the version's statistics
    [stats] = stack.inference.get("/v2/models/two/stats").json()["model_stats"]
    assert stats["inference_stats"]["success"]["count"] == 2, stats


def test_the_warm_up_file_is_replayed_before_ready(stack, savedmodels):
    """Given TF Serving's warm-up file, one fitting request in one version and one naming
    an input the signature does not have in another,
    When both are published,
    Then the first is READY and the second UNAVAILABLE naming its warm-up request: the
    requests ran where it serves before READY."""
    publish(stack, "warm", savedmodels / "warm")
    reason = publish(stack, "cold", savedmodels / "bad_warm", "UNAVAILABLE")
    assert "tf_serving_warmup_requests: warm-up request 0 failed" in reason, reason


def test_classify_regress_and_multi_inference_warm_up_logs_are_replayed(stack, savedmodels):
    """Given half_plus_two with regress, classify and multi-inference warm-up
    logs of tf.Examples, and another whose classify log names a signature taking no Examples,
    When both are published,
    Then the first is READY, and the second UNAVAILABLE naming its warm-up request and the
    signature that refused it: the Examples ran through the signatures before READY."""
    publish(stack, "half", savedmodels / "half_warm")
    reason = publish(stack, "bad", savedmodels / "half_bad_warm", "UNAVAILABLE")
    assert "warm-up request 0 failed" in reason and "regress_x2_to_y3" in reason, reason


def test_where_tensorflow_is_missing_it_is_unavailable_naming_the_fixes(stack, monkeypatch):
    """Given a serving side without TensorFlow,
    When half_plus_two is published,
    Then it is UNAVAILABLE, not READY, naming each fix; and once TensorFlow is there, a load
    checks again and it is READY."""
    monkeypatch.setitem(sys.modules, "tensorflow", None)
    reason = publish(stack, "default", HALF / HALF_PLUS_TWO[0] / "00000123", "UNAVAILABLE")
    for fix in (
        "make dev TENSORFLOW=1",
        "make build VARIANT=tensorflow",
        "pip install 'lambdaserve[tensorflow]'",
    ):
        assert fix in reason, reason
    monkeypatch.delitem(sys.modules, "tensorflow")
    response = stack.api.post("/v2/repository/models/default/load")
    assert response.status_code == 200, response.text
    stack.wait_state("default", 1, "READY", timeout_s=60)


@pytest.mark.parametrize("fixture", HALF_PLUS_TWO)
def test_tf_servings_own_grpc_client_classifies_regresses_and_multi_infers(stack, fixture):
    """Given half_plus_two served by `lambdaserve serve`,
    When TF Serving's own client (tensorflow-serving-api) calls Predict, Classify, Regress
    and MultiInference as tensorflow_model_server_test.py does,
    Then each answers 3.0 for x = 2.0, naming the signature that answered, and
    GetModelMetadata and GetModelStatus answer version 123 (testGetModelMetadata,
    testGetModelStatus)."""
    needs("tensorflow_serving")
    publish(stack, "default", HALF / fixture / "00000123", version=123)
    example = {"model": "default", "examples": [{"x": 2.0}]}
    # testPredict's x = [2.0], shape [1], for both: the TF1 signature says x is [-1, 1], and
    # TF Serving hands the tensor to TensorFlow as sent, which runs it
    x = [2.0]
    with lambdaserve_serve() as served:
        answers = peer(
            "tfserving_client.py",
            served.grpc_url,
            [
                {
                    "rpc": "predict",
                    "model": "default",
                    "inputs": {"x": {"data": x, "dtype": "float32"}},
                },
                {"rpc": "classify", **example, "signature": "classify_x_to_y"},
                {"rpc": "regress", **example, "signature": "regress_x_to_y"},
                {
                    "rpc": "multi",
                    **example,
                    "tasks": [["regress_x_to_y", "regress"], ["classify_x_to_y", "classify"]],
                },
                {"rpc": "regress", **example, "signature": "nope"},
                {"rpc": "metadata", "model": "default"},
                {"rpc": "status", "model": "default"},
            ],
        )
    assert answers[0]["ok"] and answers[0]["outputs"]["y"] == [3.0], answers[0]
    assert answers[1] == {"ok": True, "results": [[["", 3.0]]], "signature": "classify_x_to_y"}
    assert answers[2] == {"ok": True, "results": [3.0], "signature": "regress_x_to_y"}
    assert answers[3] == {
        "ok": True,
        "results": [[3.0], [3.0]],
        "signatures": ["regress_x_to_y", "classify_x_to_y"],
    }
    assert answers[4]["code"] == "INVALID_ARGUMENT" and "nope" in answers[4]["details"]
    assert answers[5]["ok"] and answers[5]["version"] == 123 and "x" in answers[5]["inputs"]
    assert answers[6] == {"ok": True, "versions": [[123, "AVAILABLE"]]}


# the TF Serving columns of the feature-by-door matrix for a SavedModel's signatures, the
# default and one named (test_feature_door_matrix.py: the matrix and its probes)
MATRIX_CONFIG = b"""
max_batch_size: 8
response_cache { enable: true }
parameters { key: "data_capture" value { string_value: "{\\"sampling_percentage\\": 100}" } }
"""
SIGNATURE_FEATURES = ("capture", "statistics", "cache", "trace", "max_batch_size")


def test_every_feature_applies_to_a_signature_by_name_and_by_default(stack, savedmodels, tmp_path):
    """Given the SavedModel with serving_default and times_two, asking for the response
    cache and capture, and `serve` tracing every request,
    When TF Serving's REST and gRPC doors ask for each signature (the default, and one by
    name) with their own clients,
    Then each feature applies to each, as to a model of any other family."""
    needs("tensorflow_serving")
    stack.put("models/two/config.pbtxt", MATRIX_CONFIG)
    publish(stack, "two", savedmodels / "two")
    traces = tmp_path / "trace.json"
    flags = ["--cache-config", "local,size=1048576"]
    flags += ["--trace-config", f"triton,file={traces}", "--trace-config", "level=TIMESTAMPS"]
    flags += ["--trace-config", "rate=1", "--trace-config", "triton,log-frequency=1"]
    found: dict[tuple[str, str], str] = {}
    rng = np.random.default_rng(8)
    with lambdaserve_serve(*flags) as served:
        for signature in ("", "times_two"):
            probes = Probes(stack, served, traces, "two", signature=signature, input="x")
            for name, door in matrix_doors.tfserving_doors().items():
                column = f"{name} ({signature or 'default'})"
                for feature in SIGNATURE_FEATURES:
                    probe, rows = probes.features[feature], rng.random((1, 2), np.float32)
                    send = lambda ask, door=door: door(served, [ask])[0]  # noqa: E731
                    measure(found, (feature, column), lambda p=probe, s=send, r=rows: p(s, r))
    print("\n" + table(found))
    assert set(found.values()) == {"applied"}, table(found)
