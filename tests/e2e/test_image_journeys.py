"""The Lambda paths as deployed, from the environments the images and the zip hold (built by
scripts/shipped_envs.py as their recipes build them, nothing of the test venv importable there):
publish through the manage image's events handler fed by the real repository-events queue;
v2 infer and /predictions through the infer image's api_handler with API Gateway's events;
Prefer: respond-async through the requests queue to the batcher (its zip and layer); a KIND_GPU
model's request forwarded to a real `lambdaserve serve`. All against the moto emulator."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import onnxruntime as ort
import pytest

from lambdaserve.local.http_api_event import http_api_event
from tests import builders
from tests.e2e.deployed import Deployed, deploy
from tests.integration.grpc_support import lambdaserve_serve
from tests.lambda_process import LambdaProcess

pytestmark = pytest.mark.e2e
EVENTS = Path(__file__).parents[1] / "events"
MLP = builders.onnx_mlp(4, 3)
GPU_CONFIG = b"max_batch_size: 8\ninstance_group [{ kind: KIND_GPU }]"


@pytest.fixture(scope="module")
def deployed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployed]:
    # as deployed: Python models off (template Globals)
    with deploy(tmp_path_factory.mktemp("images"), python_models=False) as stack:
        stack.publish("mlp", {"1/model.onnx": MLP})
        yield stack


def expected(rows: list[list[float]]) -> np.ndarray:
    return ort.InferenceSession(MLP).run(None, {"INPUT__0": np.array(rows, np.float32)})[0]


def sample(name: str) -> dict[str, Any]:
    return dict(json.loads((EVENTS / name).read_text()))


def test_v2_infer_from_api_gateways_event_in_the_infer_image(deployed: Deployed):
    # Given a model published through the manage image (READY in the catalog)
    # When API Gateway's v2 infer event reaches the infer image's api_handler
    response = deployed.infer.invoke("api_handler", sample("apigw_v2_infer_json.json"))
    # Then it answers the model's outputs for both rows
    assert response["statusCode"] == 200, response
    [output] = json.loads(response["body"])["outputs"]
    rows = [[0.1, 0.2, 0.3, 0.4], [1, 2, 3, 4]]
    np.testing.assert_allclose(output["data"], expected(rows).ravel(), rtol=1e-5)


def test_torchserve_predictions_in_the_infer_image(deployed: Deployed):
    # When TorchServe's /predictions event reaches the infer image
    response = deployed.infer.invoke("api_handler", sample("apigw_v2_predictions.json"))
    # Then it answers as TorchServe does: the row's outputs
    assert response["statusCode"] == 200, response
    np.testing.assert_allclose(
        json.loads(response["body"]), expected([[0.1, 0.2, 0.3, 0.4]])[0], rtol=1e-5
    )


def test_a_queued_request_is_answered_by_the_batcher_zip_and_layer(deployed: Deployed):
    # Given a v2 request sent with Prefer: respond-async to the infer image
    body = sample("apigw_v2_infer_json.json")["body"].encode()
    event = http_api_event("POST", "/v2/models/mlp/infer", body)
    event["headers"]["prefer"] = "respond-async"
    accepted = deployed.infer.invoke("api_handler", event)
    assert accepted["statusCode"] == 202, accepted
    status_url = json.loads(accepted["body"])["status_url"]
    # When the requests queue feeds the batcher as built from its zip and the layer
    with LambdaProcess("batcher", deployed.work / "batcher.log", deployed.environment) as batcher:

        def answered() -> bool:
            done = deployed.infer.invoke("api_handler", http_api_event("GET", status_url, b""))
            return bool(done["statusCode"] == 200)

        deployed.pump("requests", batcher.handler("handler"), answered)
    # Then the status URL answers the outputs
    done = deployed.infer.invoke("api_handler", http_api_event("GET", status_url, b""))
    [output] = json.loads(done["body"])["outputs"]
    rows = [[0.1, 0.2, 0.3, 0.4], [1, 2, 3, 4]]
    np.testing.assert_allclose(output["data"], expected(rows).ravel(), rtol=1e-5)


def test_a_gpu_models_request_is_forwarded_to_serve_from_the_infer_image(deployed: Deployed):
    # Given a KIND_GPU model and a real `lambdaserve serve`, the infer image pointed at it
    deployed.publish("gpu", {"config.pbtxt": GPU_CONFIG, "1/model.onnx": MLP})
    with lambdaserve_serve() as served:
        pointed = {
            **deployed.environment,
            "LAMBDASERVE_SERVER_URL": f"http://127.0.0.1:{served.http}",
            "LAMBDASERVE_WORK_DIR": str(deployed.work / "infer-server-mode"),
        }
        with LambdaProcess("infer", deployed.work / "infer-sm.log", pointed) as infer:
            # When its v2 infer event reaches the infer image
            body = sample("apigw_v2_infer_json.json")["body"].encode()
            event = http_api_event("POST", "/v2/models/gpu/infer", body)
            response = infer.invoke("api_handler", event)
        # Then `serve` answered it (its statistics count both rows), with the model's outputs
        assert response["statusCode"] == 200, response
        stats = httpx.get(f"http://127.0.0.1:{served.http}/v2/models/gpu/stats", timeout=30)
    assert sum(int(m["inference_count"]) for m in stats.json()["model_stats"]) == 2
    [output] = json.loads(response["body"])["outputs"]
    rows = [[0.1, 0.2, 0.3, 0.4], [1, 2, 3, 4]]
    np.testing.assert_allclose(output["data"], expected(rows).ravel(), rtol=1e-5)
