"""TF Serving's REST API on the inference port, for any runtime: status, metadata and
:predict in the row and columnar formats, named inputs, b64 strings, its error shapes; and
Paddle Serving's pipeline HTTP API."""

from __future__ import annotations

import base64
import json

import numpy as np
import onnxruntime as ort
import pytest

from tests import builders

MLP = builders.onnx_mlp(4, 3)
X = [[0.1, 0.2, 0.3, 0.4], [1.0, -2.0, 3.0, -4.0]]


def direct(x: list[list[float]]) -> np.ndarray:
    return ort.InferenceSession(MLP).run(None, {"INPUT__0": np.array(x, np.float32)})[0]


@pytest.fixture
def mlp(stack):
    stack.put("models/mlp/1/model.onnx", MLP)
    stack.wait_state("mlp", 1, "READY")
    return stack


def test_status_and_metadata_as_tf_serving_words_them(mlp):
    status = mlp.inference.get("/v1/models/mlp").json()
    assert status == {
        "model_version_status": [
            {
                "version": "1",
                "state": "AVAILABLE",
                "status": {"error_code": "OK", "error_message": ""},
            }
        ]
    }
    assert mlp.inference.get("/v1/models/mlp/versions/1").json() == status
    metadata = mlp.inference.get("/v1/models/mlp/versions/1/metadata").json()
    assert metadata["model_spec"] == {"name": "mlp", "signature_name": "", "version": "1"}
    signature = metadata["metadata"]["signature_def"]["signature_def"]["serving_default"]
    assert signature["method_name"] == "tensorflow/serving/predict"
    x = signature["inputs"]["INPUT__0"]
    assert x["dtype"] == "DT_FLOAT"
    assert [d["size"] for d in x["tensor_shape"]["dim"]] == ["-1", "4"]
    missing = mlp.inference.get("/v1/models/nope")
    assert missing.status_code == 404 and "error" in missing.json()


def test_predict_in_the_row_and_the_columnar_formats(mlp):
    rows = mlp.inference.post("/v1/models/mlp:predict", json={"instances": X})
    assert rows.status_code == 200, rows.text
    np.testing.assert_allclose(rows.json()["predictions"], direct(X), rtol=1e-6)
    columns = mlp.inference.post(
        "/v1/models/mlp/versions/1:predict",
        json={"signature_name": "serving_default", "inputs": X},
    )
    np.testing.assert_allclose(columns.json()["outputs"], direct(X), rtol=1e-6)


def test_named_inputs_and_several_outputs(stack):
    stack.put("models/addsub/1/model.onnx", builders.onnx_add_sub())
    stack.wait_state("addsub", 1, "READY")
    a, b = [1.0, 2.0, 3.0, 4.0], [0.5, 0.5, 0.5, 0.5]
    rows = stack.inference.post(
        "/v1/models/addsub:predict", json={"instances": [{"a": a, "b": b}, {"a": b, "b": a}]}
    ).json()["predictions"]
    assert rows[0] == {"sum": [1.5, 2.5, 3.5, 4.5], "diff": [0.5, 1.5, 2.5, 3.5]}
    assert rows[1]["diff"] == [-0.5, -1.5, -2.5, -3.5]
    columns = stack.inference.post(
        "/v1/models/addsub:predict", json={"inputs": {"a": [a], "b": [b]}}
    ).json()["outputs"]
    assert columns == {"sum": [[1.5, 2.5, 3.5, 4.5]], "diff": [[0.5, 1.5, 2.5, 3.5]]}


def test_b64_strings_in_and_out(stack):
    stack.put("models/text/1/model.onnx", builders.onnx_string_identity("y_bytes"))
    stack.wait_state("text", 1, "READY")
    raw = "héllo wörld".encode()
    body = {"instances": [{"b64": base64.b64encode(raw).decode()}, "plain"]}
    answer = stack.inference.post("/v1/models/text:predict", json=body)
    assert answer.status_code == 200, answer.text
    assert answer.json()["predictions"] == [
        {"b64": base64.b64encode(raw).decode()},
        {"b64": base64.b64encode(b"plain").decode()},
    ]


def test_a_label_is_a_version_on_tf_serving_routes(mlp):
    assert mlp.api.put("/models/mlp/labels/stable?version=1").status_code == 200
    answer = mlp.inference.post("/v1/models/mlp/labels/stable:predict", json={"instances": X})
    assert answer.status_code == 200, answer.text
    assert mlp.inference.get("/v1/models/mlp/labels/stable/metadata").status_code == 200


@pytest.mark.parametrize(
    ("path", "body", "status", "words"),
    [
        ("/v1/models/mlp:predict", {"signature_name": "other", "instances": X}, 400, "other"),
        ("/v1/models/mlp:predict", {"instances": X, "inputs": X}, 400, "instances"),
        ("/v1/models/mlp:predict", {"instances": [[1, 2]]}, 400, "shape"),
        ("/v1/models/mlp:predict", {"instances": [[1, None, 3, 4]]}, 400, "null"),
        ("/v1/models/mlp:classify", {"examples": []}, 400, "no classify signature"),
        ("/v1/models/mlp:regress", {"examples": []}, 400, "no regress signature"),
        ("/v1/models/nope:predict", {"instances": X}, 404, "nope"),
        ("/v1/models/mlp/versions/7:predict", {"instances": X}, 404, "7"),
    ],
)
def test_errors_are_tf_serving_error_objects(mlp, path, body, status, words):
    answer = mlp.inference.post(path, json=body)
    assert answer.status_code == status, answer.text
    assert set(answer.json()) == {"error"} and words in answer.json()["error"]


@pytest.mark.parametrize(
    "value",
    [
        "array([[0.1, 0.2, 0.3, 0.4]], dtype=float32)",  # PipelineClient's numpy repr
        "[0.1, 0.2, 0.3, 0.4]",
        "0.1, 0.2, 0.3, 0.4",
    ],
)
def test_paddle_pipeline_requests_reach_the_model(mlp, value):
    answer = mlp.inference.post(
        "/mlp/prediction", json={"key": ["INPUT__0"], "value": [value], "logid": 7}
    )
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert (body["err_no"], body["err_msg"], body["key"]) == (0, "", ["OUTPUT__0"])
    np.testing.assert_allclose(json.loads(body["value"][0]), direct(X[:1]), rtol=1e-6)


def test_paddle_pipeline_errors_keep_200_with_paddle_error_numbers(mlp):
    unknown = mlp.inference.post("/nope/prediction", json={"key": ["x"], "value": ["1"]}).json()
    assert unknown["err_no"] == 3002
    bad = mlp.inference.post("/mlp/prediction", json={"key": ["y"], "value": ["1"]}).json()
    assert bad["err_no"] == 5000 and "INPUT__0" in bad["err_msg"]
    evil = mlp.inference.post(
        "/mlp/prediction", json={"key": ["INPUT__0"], "value": ["__import__('os').system('id')"]}
    ).json()
    assert evil["err_no"] == 5000
