"""Version labels: stable/canary (and TorchServe's string versions, "1.0") pointing at integer
versions, set and moved with one call, usable wherever a version is."""

from __future__ import annotations

import numpy as np
import pytest
import tritonclient.http as triton

from tests import builders
from tests.support import wait_until


@pytest.fixture
def two_versions(stack):
    stack.put("models/m/config.pbtxt", b"version_policy: { all { } }")
    for version, width in ((1, 4), (2, 6)):
        stack.put(f"models/m/{version}/model.onnx", builders.onnx_mlp(width, 3, seed=version))
    for version in (1, 2):
        stack.wait_state("m", version, "READY")
    return stack


def served_version(stack, path: str) -> str:
    return stack.inference.get(path).json().get("version", "")


def test_a_label_serves_wherever_a_version_does_and_moving_it_rolls_back(two_versions):
    stack = two_versions
    # Given "stable" on version 2 and TorchServe's "1.0" on version 1
    put = stack.api.put("/models/m/labels/stable", json={"version": 2})
    assert put.status_code == 200, put.text
    assert stack.api.put("/models/m/labels/1.0?version=1").status_code == 200
    # Then the label is a version on the v2 routes, /predictions and the management API
    wait_until(lambda: served_version(stack, "/v2/models/m/versions/stable/ready") == "2")
    url = str(stack.inference.base_url).removeprefix("http://").rstrip("/")
    with triton.InferenceServerClient(url) as client:
        x = triton.InferInput("INPUT__0", [1, 6], "FP32")
        x.set_data_from_numpy(np.ones((1, 6), np.float32))
        assert client.infer("m", [x], model_version="stable").get_response()["model_version"] == "2"
    one = stack.inference.post("/predictions/m/1.0", json=[1.0, 2.0, 3.0, 4.0])
    assert one.status_code == 200 and len(one.json()) == 3
    [entry] = stack.api.get("/models/m/stable").json()
    assert entry["modelVersion"] == "2" and entry["labels"] == ["stable"]
    # When stable moves back to version 1 (one call: the rollback)
    assert stack.api.put("/models/m/labels/stable", json={"version": 1}).status_code == 200
    # Then requests naming stable reach version 1
    wait_until(lambda: served_version(stack, "/v2/models/m/versions/stable/ready") == "1")
    assert stack.api.delete("/models/m/labels/1.0").status_code == 200
    gone = stack.api.get("/models/m/1.0")
    assert gone.status_code == 404 and "no version label '1.0'" in gone.json()["error"]


@pytest.mark.parametrize(
    ("path", "body", "status", "message"),
    [
        ("/models/m/labels/stable", {"version": 9}, 404, "has no version 9"),
        ("/models/m/labels/stable", {}, 400, "say which version"),
        ("/models/m/labels/42", {"version": 1}, 400, "not all digits"),
        ("/models/ghost/labels/stable", {"version": 1}, 404, "not in the catalog"),
    ],
)
def test_label_errors_say_what_to_do(two_versions, path, body, status, message):
    response = two_versions.api.put(path, json=body)
    assert response.status_code == status
    assert message in response.json()["error"]


def test_an_unknown_label_on_the_inference_api_is_404_naming_it(two_versions):
    response = two_versions.inference.post(
        "/v2/models/m/versions/canary/infer",
        json={
            "inputs": [{"name": "INPUT__0", "datatype": "FP32", "shape": [1, 4], "data": [1] * 4}]
        },
    )
    assert response.status_code == 404
    assert "no version label 'canary'" in response.json()["error"]
