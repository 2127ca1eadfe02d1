"""The infer function invoked in-process with real API Gateway v2 events (Mangum), and its
batch entry point, against in-process moto."""

from __future__ import annotations

import base64
import json
import struct
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest

from lambdaserve.handlers import infer
from lambdaserve.processes.event_pump import LocalContext
from lambdaserve.wiring.process import current
from tests import builders

EVENTS = Path(__file__).parent.parent / "events"
MLP = builders.onnx_mlp(4, 3)


def event(name: str) -> dict:
    return json.loads((EVENTS / name).read_text())


@pytest.fixture
def mlp_server(aws, monkeypatch: pytest.MonkeyPatch):
    aws.put("models/mlp/1/model.onnx", MLP)
    aws.services.registrar.reconcile_model("mlp")
    return aws.use_process().server()


def payload(response: dict) -> object:
    if response["isBase64Encoded"]:
        return base64.b64decode(response["body"])
    return json.loads(response["body"])


def direct(x: np.ndarray) -> np.ndarray:
    return ort.InferenceSession(MLP).run(None, {"INPUT__0": x})[0]


def test_v2_json_infer_through_api_gateway(mlp_server):
    response = infer.api_handler(event("apigw_v2_infer_json.json"), LocalContext("infer"))
    assert response["statusCode"] == 200
    body = json.loads(response["body"])
    assert body["id"] == "r1" and body["model_version"] == "1"
    x = np.array([[0.1, 0.2, 0.3, 0.4], [1, 2, 3, 4]], np.float32)
    np.testing.assert_allclose(
        np.array(body["outputs"][0]["data"]).reshape(2, 3), direct(x), rtol=1e-6
    )


def test_v2_binary_infer_through_api_gateway(mlp_server):
    response = infer.api_handler(event("apigw_v2_infer_binary.json"), LocalContext("infer"))
    assert response["statusCode"] == 200
    assert response["isBase64Encoded"] is True
    raw = base64.b64decode(response["body"])
    length = int(response["headers"]["inference-header-content-length"])
    header = json.loads(raw[:length])
    assert header["outputs"][0]["parameters"]["binary_data_size"] == 12
    got = np.frombuffer(raw[length:], np.float32).reshape(1, 3)
    x = np.array([struct.unpack("<4f", struct.pack("<4f", 0.5, 0.25, -1.0, 2.0))], np.float32)
    np.testing.assert_allclose(got, direct(x), rtol=1e-6)


def test_a_wrong_shape_is_a_400_naming_the_tensor(mlp_server):
    response = infer.api_handler(event("apigw_v2_infer_bad_shape.json"), LocalContext("infer"))
    assert response["statusCode"] == 400
    assert json.loads(response["body"]) == {
        "error": "input 'INPUT__0': expected shape [-1, 4], got [1, 5]"
    }


def test_torchserve_predictions_and_readiness(mlp_server):
    response = infer.api_handler(event("apigw_v2_predictions.json"), LocalContext("infer"))
    assert response["statusCode"] == 200
    x = np.array([[0.1, 0.2, 0.3, 0.4]], np.float32)
    np.testing.assert_allclose(json.loads(response["body"]), direct(x)[0], rtol=1e-6)
    ready = infer.api_handler(event("apigw_v2_model_ready.json"), LocalContext("infer"))
    assert ready["statusCode"] == 200 and json.loads(ready["body"])["ready"] is True


def test_the_batch_entry_point_returns_n_results_with_errors_in_place(mlp_server, monkeypatch):
    good = {
        "model_name": "mlp",
        "inputs": [{"name": "INPUT__0", "datatype": "FP32", "shape": [1, 4], "data": [1, 2, 3, 4]}],
    }
    wrong_shape = {
        "model_name": "mlp",
        "inputs": [{"name": "INPUT__0", "datatype": "FP32", "shape": [1, 2], "data": [1, 2]}],
    }
    no_model = {"inputs": []}
    unknown = {**good, "model_name": "ghost", "id": "x"}
    event_ = {"requests": [good, wrong_shape, no_model, unknown, good]}
    results = infer.batch_handler(event_, LocalContext("infer"))["results"]
    assert len(results) == 5
    assert results[0]["status"] == 200 and results[0]["response"]["model_name"] == "mlp"
    assert results[4]["response"]["outputs"][0]["shape"] == [1, 3]
    assert results[1]["status"] == 400 and "INPUT__0" in results[1]["error"]
    assert results[2]["status"] == 400 and "model_name" in results[2]["error"]
    assert results[3]["status"] == 404


@pytest.mark.parametrize(
    "name",
    ["apigw_v2_infer_json.json", "apigw_v2_infer_binary.json", "apigw_v2_infer_bad_shape.json"],
)
def test_the_direct_infer_path_answers_exactly_as_the_fastapi_route(mlp_server, name):
    # Given the same API Gateway event / When answered directly and through Mangum + FastAPI
    direct = infer.api_handler(event(name), LocalContext("infer"))
    through_asgi = current().lambda_app(event(name), LocalContext("infer"))
    # Then status, payload and the headers that matter are the same
    assert direct["statusCode"] == through_asgi["statusCode"]
    assert direct["isBase64Encoded"] == through_asgi["isBase64Encoded"]
    assert payload(direct) == payload(through_asgi)
    for header in ("content-type", "inference-header-content-length"):
        assert direct["headers"].get(header) == through_asgi["headers"].get(header)


def test_the_direct_path_enforces_the_size_limit(mlp_server, monkeypatch):
    from dataclasses import replace

    process = current()
    process.forget(settings=replace(process.settings, max_request_bytes=100))
    response = infer.api_handler(event("apigw_v2_infer_json.json"), LocalContext("infer"))
    assert response["statusCode"] == 413
    assert "6 MB" in json.loads(response["body"])["error"]


def test_an_answer_over_the_synchronous_limit_is_a_413_saying_what_to_do(mlp_server, monkeypatch):
    # Given a synchronous limit smaller than the answer (Lambda's is 6 MB)
    from dataclasses import replace

    process = current()
    small = replace(process.settings, max_response_bytes=50)
    process.forget("lambda_app", settings=small)
    # When the answer is too large, on the direct path and through the app
    direct = infer.api_handler(event("apigw_v2_infer_json.json"), LocalContext("infer"))
    through_asgi = process.lambda_app(event("apigw_v2_infer_json.json"), LocalContext("infer"))
    # Then both answer 413 with what to do instead, never a failed invocation
    for response in (direct, through_asgi):
        assert response["statusCode"] == 413
        message = json.loads(response["body"])["error"]
        assert "over the 50-byte limit" in message and "Prefer: respond-async" in message
